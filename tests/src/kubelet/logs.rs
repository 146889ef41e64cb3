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
    let listener =
        crate::tls::TlsListener::new(tcp, tokio_rustls::TlsAcceptor::from(Arc::new(config)))?;
    let app = axum::Router::new()
        .route("/containerLogs/{ns}/{pod}/{container}", get(container_logs))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(k);
    Ok(async move {
        axum::serve(listener, app).await?;
        Ok(())
    })
}
