//! `https://` ClickHouse URLs verified against a CA bundle (`install --clickhouse-ca-configmap`, the
//! provisioner's `--clickhouse-ca-file`): the real client, a TLS endpoint with a certificate from a
//! private CA made by openssl. The endpoint answers every query with a version string, as ClickHouse's
//! HTTP interface answers `SELECT version()`; only the TLS verification is under test here.

use sentry_tenants::provision::{Auth, ChError, ClickHouse, HttpClickHouse};
use sentry_tenants_tests::tls::{TlsListener, make_ca, make_server_cert, server_config};

async fn https_endpoint(dir: &std::path::Path) -> String {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls = tokio_rustls::TlsAcceptor::from(server_config(dir, "server"));
    let listener = TlsListener::new(tcp, tls).unwrap();
    let url = format!("https://127.0.0.1:{}", listener.local_addr_port());
    let app = axum::Router::new().route("/", axum::routing::post(|| async { "24.8.4.13\n" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn an_https_url_is_verified_against_the_ca_bundle_only() {
    let dir = std::env::temp_dir().join(format!("sentry-tenants-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    make_ca(&dir, "ca");
    make_server_cert(&dir, "ca", "server", "127.0.0.1");
    make_ca(&dir, "other-ca");
    let url = https_endpoint(&dir).await;
    let pem = |name: &str| std::fs::read(dir.join(name)).unwrap();

    let trusted =
        HttpClickHouse::with_ca_bundle(&url, "admin", "pw", Auth::Headers, &pem("ca.crt")).unwrap();
    assert_eq!(
        trusted.query("SELECT version()").await.unwrap(),
        "24.8.4.13\n"
    );

    // Another CA's bundle, and the system's roots, do not vouch for the private CA's certificate.
    let other =
        HttpClickHouse::with_ca_bundle(&url, "admin", "pw", Auth::Headers, &pem("other-ca.crt"))
            .unwrap();
    let system = HttpClickHouse::new(&url, "admin", "pw", Auth::Headers).unwrap();
    for client in [other, system] {
        match client.query("SELECT version()").await {
            Err(ChError::Unreachable(detail)) => {
                assert!(detail.to_lowercase().contains("certificate"), "{detail}")
            }
            other => panic!("an untrusted certificate was accepted: {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bundle_without_certificates_is_refused_with_its_reason() {
    for (bundle, want) in [
        (&b""[..], "no CERTIFICATE block"),
        (&b"hello"[..], "no CERTIFICATE block"),
        (
            &b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"[..],
            "not PEM",
        ),
    ] {
        let Err(ChError::Unreachable(e)) =
            HttpClickHouse::with_ca_bundle("https://x", "a", "b", Auth::Headers, bundle)
        else {
            panic!("{bundle:?} accepted");
        };
        assert!(e.contains(want), "{bundle:?}: {e}");
    }
}
