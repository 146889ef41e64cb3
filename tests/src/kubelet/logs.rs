//! The kubelet's HTTPS endpoint the apiserver calls for `pods/log`: `/containerLogs/{ns}/{pod}/{container}`
//! with `tailLines`, `limitBytes` and `previous`. Clients must present a certificate of the cluster's CA
//! (the apiserver's kubelet-client certificate), as a kubelet with webhook authn requires.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use super::Kubelet;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LogQuery {
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
    #[serde(default)]
    previous: bool,
}

async fn container_logs(
    State(k): State<Arc<Kubelet>>,
    UrlPath((ns, pod, container)): UrlPath<(String, String, String)>,
    Query(q): Query<LogQuery>,
) -> Result<String, (StatusCode, String)> {
    let path = {
        let files = k.files.lock().expect("files lock");
        let logs = files
            .get(&(ns.clone(), pod.clone()))
            .and_then(|f| f.logs.get(&container))
            .ok_or_else(|| {
                (
                    StatusCode::NOT_FOUND,
                    format!("container {container} of pod {ns}/{pod} is not on this node"),
                )
            })?;
        let index = if q.previous {
            logs.len().checked_sub(2)
        } else {
            logs.len().checked_sub(1)
        };
        index.and_then(|i| logs.get(i)).cloned().ok_or_else(|| {
            (
                StatusCode::BAD_REQUEST,
                format!("previous terminated container {container} in pod {pod} not found"),
            )
        })?
    };
    let text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
    let mut out = match q.tail_lines {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let mut t = lines[lines.len().saturating_sub(n)..].join("\n");
            if !t.is_empty() {
                t.push('\n');
            }
            t
        }
        None => text,
    };
    if let Some(limit) = q.limit_bytes
        && out.len() > limit
    {
        out.truncate(out.floor_char_boundary(limit));
    }
    Ok(out)
}

/// Accepts TCP connections and completes TLS handshakes off the accept loop (each bounded in time), so
/// one client that never finishes its handshake cannot stall every other request.
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        std::net::SocketAddr,
    )>,
    addr: std::net::SocketAddr,
}

impl TlsListener {
    fn new(tcp: tokio::net::TcpListener, tls: tokio_rustls::TlsAcceptor) -> std::io::Result<Self> {
        let addr = tcp.local_addr()?;
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = tcp.accept().await else {
                    continue;
                };
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        tls.accept(stream),
                    );
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, addr })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task lives as long as the process; nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

pub fn serve(
    k: Arc<Kubelet>,
    tcp: tokio::net::TcpListener,
    cert: &Path,
    key: &Path,
    client_ca: &Path,
) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(cert)?.collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(client_ca)? {
        roots.add(ca?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).build()?;
    let config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    let listener = TlsListener::new(tcp, tokio_rustls::TlsAcceptor::from(Arc::new(config)))?;
    let app = axum::Router::new()
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(k);
    Ok(async move {
        axum::serve(listener, app).await?;
        Ok(())
    })
}
