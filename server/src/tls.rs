//! TLS for the HTTP clients this binary runs (ClickHouse, an image registry): rustls with ring,
//! verifying servers against the system's roots, or against a given CA bundle only (as `curl
//! --cacert`): a private CA, without trusting it for anything else on the machine.

use hyper_util::client::legacy::connect::HttpConnector;

/// A connector for `http://` and `https://` URLs.
pub type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// `https://` verified against the system's roots.
pub fn with_system_roots() -> Result<Connector, String> {
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        // Explicit provider: with more than one rustls backend in a build, the default is ambiguous.
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| format!("cannot load the system's TLS roots: {e}"))?
        .https_or_http()
        .enable_http1()
        .build())
}

/// `https://` verified against the certificates of the PEM bundle `ca_pem` only.
pub fn with_ca_bundle(ca_pem: &[u8]) -> Result<Connector, String> {
    let bad = |e: String| format!("the CA bundle is unusable: {e}");
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca_pem).map_err(bad)? {
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .build())
}

/// The certificates of a PEM bundle; an error for a bundle with none or with a malformed one.
fn certificates(pem: &[u8]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no CERTIFICATE block in it".to_owned());
    }
    Ok(certs)
}

/// How many certificates a PEM bundle holds, or why it is unusable (for the installer's check).
pub fn pem_certificates(pem: &[u8]) -> Result<usize, String> {
    certificates(pem).map(|c| c.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    /// A PEM block of each DER certificate given, as a CA bundle holds them.
    fn pem_of(ders: &[&[u8]]) -> String {
        ders.iter()
            .map(|der| {
                let b64 = base64::engine::general_purpose::STANDARD.encode(der);
                format!("-----BEGIN CERTIFICATE-----\n{b64}\n-----END CERTIFICATE-----\n")
            })
            .collect()
    }

    fn roots(n: usize) -> Vec<&'static [u8]> {
        webpki_root_certs::TLS_SERVER_ROOT_CERTS[..n]
            .iter()
            .map(|c| c.as_ref())
            .collect()
    }

    #[test]
    fn a_bundle_is_counted_by_its_certificates() {
        assert_eq!(pem_certificates(pem_of(&roots(1)).as_bytes()), Ok(1));
        assert_eq!(pem_certificates(pem_of(&roots(3)).as_bytes()), Ok(3));
    }

    #[test]
    fn a_bundle_without_a_certificate_or_with_a_broken_one_is_unusable() {
        assert_eq!(
            pem_certificates(b"just text\n"),
            Err("no CERTIFICATE block in it".to_owned())
        );
        let broken = "-----BEGIN CERTIFICATE-----\n!!!not base64!!!\n-----END CERTIFICATE-----\n";
        let refused = pem_certificates(broken.as_bytes()).unwrap_err();
        assert!(refused.starts_with("not PEM: "), "{refused}");
        let refused = with_ca_bundle(b"").expect_err("an empty bundle is refused");
        assert_eq!(
            refused,
            "the CA bundle is unusable: no CERTIFICATE block in it"
        );
    }

    #[test]
    fn a_bundle_of_real_roots_makes_a_connector() {
        assert!(with_ca_bundle(pem_of(&roots(2)).as_bytes()).is_ok());
    }
}
