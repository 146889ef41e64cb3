//! A TLS listener for the test servers (the HTTPS ClickHouse endpoint of the CA-bundle test) and
//! the certificates they present, made with openssl.

use std::path::Path;
use std::process::Command;

/// Accepts TCP connections and completes TLS handshakes off the accept loop (each bounded in time), so
/// one client that never finishes its handshake cannot stall every other request.
pub struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        std::net::SocketAddr,
    )>,
    addr: std::net::SocketAddr,
}

impl TlsListener {
    pub fn new(
        tcp: tokio::net::TcpListener,
        tls: tokio_rustls::TlsAcceptor,
    ) -> std::io::Result<Self> {
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

    pub fn local_addr_port(&self) -> u16 {
        self.addr.port()
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

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes, in `dir`, a CA: `<ca>.crt` and `<ca>.key`.
pub fn make_ca(dir: &Path, ca: &str) {
    let (crt, key) = (format!("{ca}.crt"), format!("{ca}.key"));
    let subject = format!("/CN={ca}");
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", &subject,
            "-keyout", &key, "-out", &crt,
        ],
    );
}

/// Makes, in `dir`, a server certificate `<server>.crt` (key `<server>.key`) for `ip` and localhost,
/// signed by the CA [`make_ca`] made there.
pub fn make_server_cert(dir: &Path, ca: &str, server: &str, ip: &str) {
    let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
    let (crt, key, csr) = (
        format!("{server}.crt"),
        format!("{server}.key"),
        format!("{server}.csr"),
    );
    let ext = format!("{server}.ext");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            &key,
            "-out",
            &csr,
        ],
    );
    std::fs::write(
        dir.join(&ext),
        format!("subjectAltName=IP:{ip},DNS:localhost\n"),
    )
    .expect("write the extension file");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &ext,
            "-out",
            &crt,
        ],
    );
}

/// A rustls server configuration presenting `<server>.crt` from `dir`.
pub fn server_config(dir: &Path, server: &str) -> std::sync::Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join(format!("{server}.crt")))
            .expect("the certificate")
            .collect::<Result<_, _>>()
            .expect("PEM");
    let key = PrivateKeyDer::from_pem_file(dir.join(format!("{server}.key"))).expect("the key");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("a certificate and its key");
    std::sync::Arc::new(config)
}
