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
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
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
    pub const UNKNOWN_TABLE: u32 = 60;
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

/// The largest answer any statement of ours can get (a version string, a count, nothing): a larger
/// one is not ClickHouse answering us, and is not read.
pub const MAX_ANSWER: usize = 1 << 20;

pub struct HttpClickHouse {
    client: Client<crate::tls::Connector, Full<Bytes>>,
    url: String,
    user: String,
    password: String,
    auth: Auth,
    timeout: Duration,
    /// ClickHouse settings sent with every query, as URL parameters.
    settings: Vec<(&'static str, String)>,
}

/// How long ClickHouse waits for every host of an `ON CLUSTER` statement
/// (`distributed_ddl_task_timeout`). Its default, 180 s, is longer than a statement's 30 s deadline
/// here, which would cut off the answer that names the hosts that did not finish.
pub const DISTRIBUTED_DDL_TIMEOUT: Duration = Duration::from_secs(120);

impl HttpClickHouse {
    /// `https://` URLs verified against the system's roots.
    pub fn new(url: &str, user: &str, password: &str, auth: Auth) -> Result<Self, ChError> {
        let https = crate::tls::with_system_roots().map_err(ChError::Unreachable)?;
        Ok(Self::with_connector(https, url, user, password, auth))
    }

    /// `https://` URLs verified against the CA certificates in `ca_pem` only (as `curl --cacert`):
    /// a private CA, without trusting it for anything else on the machine.
    pub fn with_ca_bundle(
        url: &str,
        user: &str,
        password: &str,
        auth: Auth,
        ca_pem: &[u8],
    ) -> Result<Self, ChError> {
        let https = crate::tls::with_ca_bundle(ca_pem).map_err(ChError::Unreachable)?;
        Ok(Self::with_connector(https, url, user, password, auth))
    }

    fn with_connector(
        https: crate::tls::Connector,
        url: &str,
        user: &str,
        password: &str,
        auth: Auth,
    ) -> Self {
        let client = Client::builder(TokioExecutor::new()).build(https);
        Self {
            client,
            url: url.trim_end_matches('/').to_owned(),
            user: user.to_owned(),
            password: password.to_owned(),
            auth,
            timeout: Duration::from_secs(30),
            settings: Vec::new(),
        }
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
        for (name, value) in &self.settings {
            let separator = if uri.contains('?') { '&' } else { '?' };
            uri.push_str(&format!(
                "{separator}{name}={}",
                crate::text::percent_encode(value)
            ));
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
        // One deadline for the whole exchange: a server that sends its headers and then stalls the
        // body must not hold the run past it either.
        tokio::time::timeout(self.timeout, self.exchange(request))
            .await
            .map_err(|_| {
                ChError::Unreachable(format!(
                    "no complete answer within {}s",
                    self.timeout.as_secs_f64()
                ))
            })?
    }
}

impl HttpClickHouse {
    /// The time one statement may take, answer included (default 30 s).
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Self { timeout, ..self }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// For runs `ON CLUSTER`: ClickHouse ends a statement some hosts have not finished within
    /// [`DISTRIBUTED_DDL_TIMEOUT`] with an error that names them, and a statement's deadline here
    /// waits 30 s longer than that for the answer.
    pub fn for_cluster(mut self) -> Self {
        self.settings.push((
            "distributed_ddl_task_timeout",
            DISTRIBUTED_DDL_TIMEOUT.as_secs().to_string(),
        ));
        self.with_timeout(DISTRIBUTED_DDL_TIMEOUT + Duration::from_secs(30))
    }

    async fn exchange(&self, request: Request<Full<Bytes>>) -> Result<String, ChError> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| ChError::Unreachable(root_cause(&e)))?;
        let status = response.status();
        let header_code = response
            .headers()
            .get("X-ClickHouse-Exception-Code")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| match e.downcast_ref::<LengthLimitError>() {
                Some(_) => {
                    ChError::Unreachable(format!("its answer is larger than {MAX_ANSWER} bytes"))
                }
                None => ChError::Unreachable(root_cause(e.as_ref())),
            })?;
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

    /// ON CLUSTER runs send `distributed_ddl_task_timeout` with every query, whatever carries the
    /// credentials, so ClickHouse's own answer about slow hosts comes before the statement's deadline.
    #[test]
    fn a_cluster_run_sends_the_distributed_ddl_timeout_and_waits_longer_than_it() {
        for (auth, uri) in [
            (
                Auth::Headers,
                "http://ch:8123/?distributed_ddl_task_timeout=120",
            ),
            (
                Auth::Basic,
                "http://ch:8123/?distributed_ddl_task_timeout=120",
            ),
            (
                Auth::Query,
                "http://ch:8123/?user=admin&password=p%26w&distributed_ddl_task_timeout=120",
            ),
        ] {
            let ch = HttpClickHouse::new("http://ch:8123", "admin", "p&w", auth).unwrap();
            assert_eq!(ch.timeout(), Duration::from_secs(30));
            let plain = ch.request("admin", "p&w", "SELECT 1").unwrap();
            assert!(!plain.uri().to_string().contains("distributed_ddl"));
            let ch = ch.for_cluster();
            let request = ch.request("admin", "p&w", "SELECT 1").unwrap();
            assert_eq!(request.uri().to_string(), uri, "{auth:?}");
            assert_eq!(ch.timeout(), Duration::from_secs(150));
        }
    }

    /// A "ClickHouse" on a local port that answers every connection with `reply`, then holds it.
    async fn answering(reply: Vec<u8>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = stream.read(&mut request).await;
                    let _ = stream.write_all(&reply).await;
                    // Never finishes the body, never closes.
                    std::future::pending::<()>().await;
                });
            }
        });
        url
    }

    /// How long a test waits before calling a hang a hang.
    const PATIENCE: Duration = Duration::from_secs(120);

    #[tokio::test]
    async fn a_body_that_stops_coming_ends_the_call_at_its_deadline() {
        let url = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n24.8".to_vec()).await;
        let ch = HttpClickHouse::new(&url, "admin", "pw", Auth::Headers)
            .unwrap()
            .with_timeout(Duration::from_millis(300));
        let answer = tokio::time::timeout(PATIENCE, ch.query("SELECT version()"))
            .await
            .expect("the call ends by itself");
        assert_eq!(
            answer.unwrap_err().to_string(),
            ChError::Unreachable("no complete answer within 0.3s".into()).to_string()
        );
    }

    #[tokio::test]
    async fn an_answer_larger_than_any_of_ours_is_refused_unread() {
        let mut reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            MAX_ANSWER + 1
        )
        .into_bytes();
        reply.extend(std::iter::repeat_n(b'x', MAX_ANSWER + 1));
        let url = answering(reply).await;
        let ch = HttpClickHouse::new(&url, "admin", "pw", Auth::Headers).unwrap();
        let answer = tokio::time::timeout(PATIENCE, ch.query("SELECT version()"))
            .await
            .expect("the call ends by itself");
        let error = match answer {
            Ok(text) => panic!("read an answer of {} bytes", text.len()),
            Err(e) => e,
        };
        assert_eq!(
            error.to_string(),
            ChError::Unreachable(format!("its answer is larger than {MAX_ANSWER} bytes"))
                .to_string()
        );
    }
}
