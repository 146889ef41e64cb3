//! A real image registry for the push tests: Debian's docker-registry (the CNCF distribution, the
//! same v2 API as Harbor, GHCR or ECR speak), serving TLS with a certificate from a private CA made
//! here, and asking for basic auth against an htpasswd file unless started open.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::processes::Owned;

pub struct TestRegistry {
    /// `127.0.0.1:PORT`, the registry part of an image reference.
    pub address: String,
    /// The private CA's certificate (PEM), which `--registry-ca` names.
    pub ca: PathBuf,
    /// A directory with the CA as `ca.crt`, as skopeo's `--cert-dir` wants it.
    pub cert_dir: PathBuf,
    pub username: String,
    pub password: String,
    _process: Owned,
}

impl TestRegistry {
    /// Starts a registry on `ip` whose only account is `username`/`password`, in a fresh `dir`;
    /// returns once it listens.
    pub async fn start(dir: &Path, ip: &str, username: &str, password: &str) -> Self {
        Self::serve(dir, ip, Some((username, password))).await
    }

    /// A registry anyone may push to and pull from (over TLS from the private CA all the same): a
    /// team registry inside a network, which the README's quick start pushes to.
    pub async fn open(dir: &Path, ip: &str) -> Self {
        Self::serve(dir, ip, None).await
    }

    async fn serve(dir: &Path, ip: &str, account: Option<(&str, &str)>) -> Self {
        let _ = std::fs::remove_dir_all(dir);
        let cert_dir = dir.join("certs");
        std::fs::create_dir_all(&cert_dir).unwrap();
        crate::tls::make_ca(dir, "ca");
        crate::tls::make_server_cert(dir, "ca", "registry", ip);
        std::fs::copy(dir.join("ca.crt"), cert_dir.join("ca.crt")).unwrap();
        let auth = match account {
            Some((username, password)) => {
                let hash = bcrypt::hash(password, 4).expect("bcrypt");
                std::fs::write(dir.join("htpasswd"), format!("{username}:{hash}\n")).unwrap();
                format!(
                    "auth:\n  htpasswd: {{realm: sentry-tenants-test, path: {}}}\n",
                    dir.join("htpasswd").display()
                )
            }
            None => String::new(),
        };
        let address = format!("{ip}:{}", crate::free_port());
        let config = dir.join("registry.yaml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\n\
                 storage: {{filesystem: {{rootdirectory: {data}}}}}\n\
                 http:\n  addr: {address}\n  secret: sentry-tenants-test\n  tls: {{certificate: {crt}, key: {key}}}\n\
                 {auth}",
                data = dir.join("data").display(),
                crt = dir.join("registry.crt").display(),
                key = dir.join("registry.key").display(),
            ),
        )
        .unwrap();
        let process = Owned::spawn(
            Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdout(std::process::Stdio::null())
                // Its log (every refused login, every probe's handshake) in the test's directory.
                .stderr(std::fs::File::create(dir.join("registry.log")).unwrap()),
        )
        .expect("docker-registry (scripts/setup.sh installs it)");
        let registry = Self {
            address,
            ca: dir.join("ca.crt"),
            cert_dir,
            username: account.map(|a| a.0).unwrap_or_default().to_owned(),
            password: account.map(|a| a.1).unwrap_or_default().to_owned(),
            _process: process,
        };
        crate::control_plane::wait_until("the test registry to listen", async || {
            tokio::net::TcpStream::connect(&registry.address).await.ok()
        })
        .await;
        registry
    }

    /// `skopeo inspect --raw` of `reference` as the registry's account: the manifest's bytes, or
    /// skopeo's error.
    pub fn manifest(&self, reference: &str) -> Result<Vec<u8>, String> {
        let mut skopeo = Command::new("skopeo");
        skopeo
            .args(["inspect", "--raw", "--cert-dir"])
            .arg(&self.cert_dir);
        if !self.username.is_empty() {
            skopeo.args(["--creds", &format!("{}:{}", self.username, self.password)]);
        }
        let out = skopeo
            .arg(format!("docker://{reference}"))
            .output()
            .expect("skopeo (scripts/setup.sh installs it)");
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}
