//! The ClickHouse HTTP **stand-in** of the real control plane tier (test code only, never in the
//! product): no ClickHouse >= 20.4 can be installed on the machines this project is built on, and the
//! provisioner's success path needs SQL users. It speaks ClickHouse's HTTP interface (credentials in
//! `X-ClickHouse-User`/`X-ClickHouse-Key`, Basic auth or `?user=&password=`; errors as HTTP status,
//! `X-ClickHouse-Exception-Code` and `Code: N. DB::Exception: …`) and answers from the stand-in's
//! server, [`Model`]: every statement through chdb's parser, the admin's statements applied, a
//! tenant's login and statement checked by its authentication methods, lock, grants, quota and
//! settings profile. It stores no rows: a tenant's allowed query that reads a table answers none.

use std::sync::{Arc, Mutex};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::clickhouse_model::{Login, Model, http_status};

/// A current ClickHouse version, as `SELECT version()` answers.
pub const VERSION: &str = "26.9.1.1";

struct Inner {
    model: Model,
    /// Each answer waits this long: a slow server, so a test can act while a run is in flight.
    delay: std::time::Duration,
}

#[derive(Clone)]
struct Shared {
    admin: (String, String),
    inner: Arc<Mutex<Inner>>,
}

pub struct ClickHouseStandIn {
    pub url: String,
    shared: Shared,
    task: Mutex<tokio::task::JoinHandle<()>>,
    addr: std::net::SocketAddr,
}

#[derive(Deserialize, Default)]
struct Credentials {
    user: Option<String>,
    password: Option<String>,
    query: Option<String>,
}

fn error(status: StatusCode, code: u32, message: &str) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        "X-ClickHouse-Exception-Code",
        code.to_string().parse().expect("a header value"),
    );
    (
        status,
        headers,
        format!("Code: {code}. DB::Exception: {message}. (stand-in)\n"),
    )
        .into_response()
}

fn basic(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Basic ")?;
    let decoded = String::from_utf8(STANDARD.decode(value).ok()?).ok()?;
    let (u, p) = decoded.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

async fn handle(
    State(s): State<Shared>,
    Query(q): Query<Credentials>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (user, password) = match (
        header("X-ClickHouse-User"),
        header("X-ClickHouse-Key"),
        basic(&headers),
    ) {
        (Some(u), k, _) => (u, k.unwrap_or_default()),
        (None, _, Some(b)) => b,
        _ => (
            q.user.clone().unwrap_or_else(|| "default".into()),
            q.password.clone().unwrap_or_default(),
        ),
    };
    let sql = if body.trim().is_empty() {
        q.query.clone().unwrap_or_default()
    } else {
        body
    };
    let sql = sql.trim().trim_end_matches(';').to_owned();
    let delay = s.inner.lock().expect("stand-in lock").delay;
    tokio::time::sleep(delay).await;
    let s2 = s.clone();
    tokio::task::spawn_blocking(move || answer(&s2, &user, &password, &sql))
        .await
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, 1001, &e.to_string()))
}

fn answer(s: &Shared, user: &str, password: &str, sql: &str) -> Response {
    let mut inner = s.inner.lock().expect("stand-in lock");
    let login = if (user, password) == (s.admin.0.as_str(), s.admin.1.as_str()) {
        Login::Admin
    } else {
        Login::User { user, password }
    };
    match inner.model.serve(VERSION, login, sql) {
        Ok(answer) => (StatusCode::OK, answer).into_response(),
        Err(refused) => {
            let status = StatusCode::from_u16(http_status(refused.code)).expect("a status");
            error(status, refused.code, &refused.message)
        }
    }
}

impl ClickHouseStandIn {
    /// Listens on `ip` (the cluster bridge's address, so pods reach it) with the admin's credentials.
    pub async fn start(ip: &str, admin_user: &str, admin_password: &str) -> Self {
        Self::serve(ip, admin_user, admin_password, None).await
    }

    /// [`Self::start`], over TLS with the certificate `<server>.crt` of `dir` (see `crate::tls`).
    pub async fn start_tls(
        ip: &str,
        admin_user: &str,
        admin_password: &str,
        tls: std::sync::Arc<rustls::ServerConfig>,
    ) -> Self {
        Self::serve(ip, admin_user, admin_password, Some(tls)).await
    }

    async fn serve(
        ip: &str,
        admin_user: &str,
        admin_password: &str,
        tls: Option<std::sync::Arc<rustls::ServerConfig>>,
    ) -> Self {
        let shared = Shared {
            admin: (admin_user.to_owned(), admin_password.to_owned()),
            inner: Arc::new(Mutex::new(Inner {
                model: Model::default(),
                delay: std::time::Duration::ZERO,
            })),
        };
        let listener = tokio::net::TcpListener::bind((ip, 0))
            .await
            .expect("bind the stand-in");
        let addr = listener.local_addr().expect("address");
        let app = app(&shared);
        let (url, task) = match tls {
            None => (format!("http://{addr}"), serve_plain(listener, app)),
            Some(config) => {
                let tls =
                    crate::tls::TlsListener::new(listener, tokio_rustls::TlsAcceptor::from(config))
                        .expect("a TLS listener");
                (
                    format!("https://{addr}"),
                    tokio::spawn(async move {
                        let _ = axum::serve(tls, app).await;
                    }),
                )
            }
        };
        Self {
            url,
            shared,
            task: Mutex::new(task),
            addr,
        }
    }

    /// An outage as a crashed or restarting server shows it: the listener closes, so every new
    /// connection is refused until [`Self::come_back`]. What it stored is kept. (Plain HTTP only.)
    pub async fn go_down(&self) {
        let task = std::mem::replace(
            &mut *self.task.lock().expect("lock"),
            tokio::spawn(async {}),
        );
        task.abort();
        let _ = task.await;
    }

    /// Listens again on the same address, with the same users and databases.
    pub async fn come_back(&self) {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("bind the stand-in's address again");
        *self.task.lock().expect("lock") = serve_plain(listener, app(&self.shared));
    }

    /// `sql` sent over HTTP as an application logged in as `user` sends it: the rows, or the refusal's
    /// exception code and message as the server answered them.
    pub async fn query_as(
        &self,
        user: &str,
        password: &str,
        sql: &str,
    ) -> Result<String, (u32, String)> {
        use http_body_util::BodyExt;
        let request = http::Request::post(format!("{}/", self.url))
            .header("X-ClickHouse-User", user)
            .header("X-ClickHouse-Key", password)
            .body(http_body_util::Full::new(bytes::Bytes::from(
                sql.to_owned(),
            )))
            .expect("a request");
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        let reply = client.request(request).await.expect("the stand-in answers");
        let code = reply
            .headers()
            .get("X-ClickHouse-Exception-Code")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let body = reply
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        let body = String::from_utf8_lossy(&body).into_owned();
        match code {
            None => Ok(body),
            Some(code) => Err((code, body)),
        }
    }

    pub fn set_delay(&self, delay: std::time::Duration) {
        self.shared.inner.lock().expect("lock").delay = delay;
    }

    pub fn statements(&self) -> Vec<String> {
        self.shared
            .inner
            .lock()
            .expect("lock")
            .model
            .statements
            .clone()
    }

    /// Statements chdb's parser refused.
    pub fn refused(&self) -> Vec<String> {
        self.model(|m| m.syntax_errors.clone())
    }

    pub fn user_hash(&self, user: &str) -> Option<String> {
        self.model(|m| m.password_hash(user))
    }

    pub fn is_locked(&self, user: &str) -> Option<bool> {
        self.model(|m| m.is_locked(user))
    }

    pub fn may_log_in(&self, user: &str, password: &str) -> bool {
        self.shared
            .inner
            .lock()
            .expect("lock")
            .model
            .may_log_in(user, password)
    }

    pub fn has_user(&self, user: &str) -> bool {
        let inner = self.shared.inner.lock().expect("lock");
        inner.model.users.contains_key(user)
    }

    /// A query of `user` running now (as `system.processes` would show it), for `KILL QUERY` to end.
    pub fn start_query(&self, user: &str, id: &str) {
        let mut inner = self.shared.inner.lock().expect("lock");
        inner.model.running.push((user.to_owned(), id.to_owned()));
    }

    /// Reads the server's state (profiles, quotas, …).
    pub fn model<T>(&self, read: impl FnOnce(&Model) -> T) -> T {
        read(&self.shared.inner.lock().expect("lock").model)
    }

    pub fn has_database(&self, database: &str) -> bool {
        let inner = self.shared.inner.lock().expect("lock");
        inner.model.databases.contains_key(database)
    }
}

impl Drop for ClickHouseStandIn {
    fn drop(&mut self) {
        self.task.lock().expect("lock").abort();
    }
}

fn app(shared: &Shared) -> axum::Router {
    axum::Router::new()
        .route("/", axum::routing::post(handle).get(handle))
        .with_state(shared.clone())
}

fn serve_plain(
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    })
}
