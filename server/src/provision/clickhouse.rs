//! ClickHouse over its HTTP interface, spoken directly with hyper (already in the binary for the
//! Kubernetes client): one POST per statement, credentials in a header, errors parsed from the
//! HTTP status and ClickHouse's `Code: N` text. A full client crate would add a second HTTP stack and a
//! row codec for the few DDL statements and one-value SELECTs the provisioner sends.

use std::future::Future;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// How a query reaches ClickHouse: what the provisioner needs, and a seam tests can fill.
pub trait ClickHouse: Send + Sync {
    /// Runs one statement as the admin; returns the response body (TSV for SELECTs).
    fn query(&self, sql: &str) -> impl Future<Output = Result<String, ChError>> + Send;
    /// Runs one statement as another user: proves a tenant's credentials really log in.
    fn query_as(
        &self,
        user: &str,
        password: &str,
        sql: &str,
    ) -> impl Future<Output = Result<String, ChError>> + Send;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChError {
    /// No HTTP answer at all: refused, DNS, TLS, timeout.
    #[error("{0}")]
    Unreachable(String),
    /// The server answered with an error.
    #[error("HTTP {status}: {message}")]
    Server {
        status: u16,
        code: Option<u32>,
        message: String,
    },
}

/// ClickHouse error codes the provisioner tells apart.
pub mod codes {
    pub const UNKNOWN_USER: u32 = 192;
    pub const WRONG_PASSWORD: u32 = 193;
    pub const IP_ADDRESS_NOT_ALLOWED: u32 = 195;
    pub const ACCESS_DENIED: u32 = 497;
    pub const AUTHENTICATION_FAILED: u32 = 516;
    pub const NOT_ENOUGH_PRIVILEGES: u32 = 497;
    pub const SYNTAX_ERROR: u32 = 62;
}

/// The ways ClickHouse's HTTP interface accepts credentials. Headers are the default: they keep the
/// password out of URLs (and so out of proxy logs) and work on every server version we support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Auth {
    /// `X-ClickHouse-User` / `X-ClickHouse-Key` headers.
    Headers,
    /// HTTP Basic authentication.
    Basic,
    /// `user=` and `password=` query parameters (avoid: URLs get logged).
    Query,
}

pub struct HttpClickHouse {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: String,
    user: String,
    password: String,
    auth: Auth,
    timeout: Duration,
}

impl HttpClickHouse {
    pub fn new(url: &str, user: &str, password: &str, auth: Auth) -> Result<Self, ChError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            // Explicit provider: with more than one rustls backend in a build, the default is ambiguous.
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| ChError::Unreachable(format!("cannot load the system's TLS roots: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(Self {
            client,
            url: url.trim_end_matches('/').to_owned(),
            user: user.to_owned(),
            password: password.to_owned(),
            auth,
            timeout: Duration::from_secs(30),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn request(
        &self,
        user: &str,
        password: &str,
        sql: &str,
    ) -> Result<Request<Full<Bytes>>, ChError> {
        let mut uri = format!("{}/", self.url);
        let mut builder = Request::builder().method(http::Method::POST);
        match self.auth {
            Auth::Headers => {
                builder = builder
                    .header("X-ClickHouse-User", user)
                    .header("X-ClickHouse-Key", password);
            }
            Auth::Basic => {
                let token = STANDARD.encode(format!("{user}:{password}"));
                builder = builder.header(header::AUTHORIZATION, format!("Basic {token}"));
            }
            Auth::Query => {
                uri.push_str(&format!(
                    "?user={}&password={}",
                    crate::text::percent_encode(user),
                    crate::text::percent_encode(password)
                ));
            }
        }
        builder
            .uri(uri)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from(sql.to_owned())))
            .map_err(|e| {
                ChError::Unreachable(format!("invalid ClickHouse URL {:?}: {e}", self.url))
            })
    }
}

impl ClickHouse for HttpClickHouse {
    async fn query(&self, sql: &str) -> Result<String, ChError> {
        self.query_as(&self.user, &self.password, sql).await
    }

    async fn query_as(&self, user: &str, password: &str, sql: &str) -> Result<String, ChError> {
        let request = self.request(user, password, sql)?;
        let call = self.client.request(request);
        let response = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| {
                ChError::Unreachable(format!("no answer within {}s", self.timeout.as_secs()))
            })?
            .map_err(|e| ChError::Unreachable(root_cause(&e)))?;
        let status = response.status();
        let header_code = response
            .headers()
            .get("X-ClickHouse-Exception-Code")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ChError::Unreachable(root_cause(&e)))?;
        let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
        if status == StatusCode::OK {
            return Ok(text);
        }
        Err(ChError::Server {
            status: status.as_u16(),
            code: header_code.or_else(|| parse_code(&text)),
            message: clean_message(&text),
        })
    }
}

/// `Code: 193, e.displayText() = …` (old servers) and `Code: 193. DB::Exception: …` (new ones).
pub fn parse_code(text: &str) -> Option<u32> {
    let rest = text.trim_start().strip_prefix("Code:")?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The server's message on one line, without the `e.what()` tail and stack noise.
fn clean_message(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default().trim();
    let first = first.split(", e.what() = ").next().unwrap_or(first);
    first
        .replace("e.displayText() = ", "")
        .chars()
        .take(400)
        .collect()
}

fn root_cause(error: &dyn std::error::Error) -> String {
    let mut root = error;
    while let Some(source) = root.source() {
        root = source;
    }
    root.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_parse_from_old_and_new_formats() {
        assert_eq!(
            parse_code("Code: 193, e.displayText() = DB::Exception: Wrong password"),
            Some(193)
        );
        assert_eq!(
            parse_code("Code: 516. DB::Exception: admin: Authentication failed"),
            Some(516)
        );
        assert_eq!(parse_code("something else"), None);
        assert_eq!(
            clean_message(
                "Code: 193, e.displayText() = DB::Exception: Wrong password for user admin, e.what() = DB::Exception\n"
            ),
            "Code: 193, DB::Exception: Wrong password for user admin"
        );
    }
}
