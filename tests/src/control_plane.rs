//! The real control plane tier: etcd, kube-apiserver and kube-controller-manager built from pinned Go
//! modules and started by `scripts/cluster.sh`. Nothing here imitates the apiserver: the tests talk to
//! the real one, and read its audit log.
//!
//! `SENTRY_TENANTS_E2E_KUBECONFIG` names the cluster (`scripts/test.sh` starts one and sets it); without
//! it the first test to ask runs `scripts/cluster.sh up` itself and leaves the cluster running for the
//! next run (`bash scripts/cluster.sh down` stops it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use crate::PATIENCE;

pub const KUBECONFIG_ENV: &str = "SENTRY_TENANTS_E2E_KUBECONFIG";

/// Where the cluster's files are: its kubeconfig and, when `scripts/cluster.sh` started it, its
/// certificates, logs and audit log beside it.
pub struct ControlPlane {
    pub kubeconfig: PathBuf,
    pub dir: PathBuf,
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// The cluster of this test run, started on first use if no kubeconfig was named.
pub fn control_plane() -> &'static ControlPlane {
    static PLANE: OnceLock<ControlPlane> = OnceLock::new();
    PLANE.get_or_init(|| {
        let kubeconfig = match std::env::var(KUBECONFIG_ENV) {
            Ok(path) if !path.is_empty() => PathBuf::from(path),
            _ => start_with_cluster_sh(),
        };
        let dir = kubeconfig
            .parent()
            .expect("a kubeconfig path has a parent")
            .to_owned();
        ControlPlane { kubeconfig, dir }
    })
}

fn start_with_cluster_sh() -> PathBuf {
    let script = workspace_root().join("scripts/cluster.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("up")
        .output()
        .expect("run scripts/cluster.sh");
    assert!(
        out.status.success(),
        "`bash scripts/cluster.sh up` failed (the real control plane tier cannot be skipped):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    eprintln!(
        "control plane: started by scripts/cluster.sh; stop it with `bash scripts/cluster.sh down`"
    );
    PathBuf::from(path)
}

/// An audit event of a Job status write that says the Job finished: a true `SuccessCriteriaMet`,
/// `Complete` or `Failed` condition in its body (scripts/cluster.sh logs these writes with it).
pub fn is_finishing_job_status(e: &Value) -> bool {
    e["requestObject"]["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["status"] == "True"
                && matches!(
                    c["type"].as_str(),
                    Some("SuccessCriteriaMet" | "Complete" | "Failed")
                )
        })
}

impl ControlPlane {
    /// A client with the kubeconfig's (admin) credentials.
    pub async fn admin(&self) -> Client {
        client_from(&self.kubeconfig).await
    }

    /// Where the audit log ends now: [`Self::audit_events_after`] reads what comes after it.
    pub fn audit_log_offset(&self) -> u64 {
        std::fs::metadata(self.dir.join("audit.log")).map_or(0, |m| m.len())
    }

    /// The audit events written after `offset` that `keep` keeps, read line by line: a burst of
    /// thousands of tenants writes hundreds of megabytes, most of it of no interest to the reader.
    pub fn audit_events_after(&self, offset: u64, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        use std::io::{BufRead, Seek};
        let path = self.dir.join("audit.log");
        let mut file =
            std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        file.seek(std::io::SeekFrom::Start(offset))
            .expect("seek in the audit log");
        std::io::BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
            .filter(|e| keep(e))
            .collect()
    }

    /// The audit log: one JSON event per request, every request the apiserver answered.
    pub fn audit_events(&self) -> Vec<Value> {
        let path = self.dir.join("audit.log");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (is this cluster started by scripts/cluster.sh?)",
                path.display()
            )
        });
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Path to a binary `scripts/cluster.sh` built (kubectl, ...).
    pub fn bin(&self, name: &str) -> PathBuf {
        let k8s = workspace_root().join("target/k8s");
        let version = std::fs::read_dir(&k8s)
            .unwrap_or_else(|e| panic!("{}: {e}", k8s.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.join("bin").join(name).exists())
            .unwrap_or_else(|| panic!("no {name} under {}", k8s.display()));
        version.join("bin").join(name)
    }

    /// Stops kube-apiserver and starts it again on the same port (`scripts/cluster.sh
    /// restart-apiserver`); returns once it answers `/readyz`. Only for a test that has the cluster to
    /// itself (`setup_alone`).
    pub fn restart_apiserver(&self) {
        let out = Command::new("bash")
            .arg(workspace_root().join("scripts/cluster.sh"))
            .arg("restart-apiserver")
            .env("SENTRY_TENANTS_CLUSTER_DIR", &self.dir)
            .output()
            .expect("run scripts/cluster.sh");
        assert!(
            out.status.success(),
            "restarting kube-apiserver failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// This checkout's `sentry-tenants` (dev profile), the binary in the cluster's image of the operator
    /// (`scripts/image.sh`) and the one tests run on this host; `scripts/cluster.sh up` builds it.
    pub fn project_binary(&self) -> PathBuf {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        let binary = target.join("debug/sentry-tenants");
        assert!(
            binary.exists(),
            "{} is missing (scripts/cluster.sh up builds it)",
            binary.display()
        );
        binary
    }

    /// Runs kubectl with the admin kubeconfig; returns (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        kubectl_with(&self.bin("kubectl"), &self.kubeconfig, args, stdin)
    }
}

pub fn kubectl_with(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    use std::io::Write;
    let mut child = crate::processes::Owned::spawn(
        Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    )
    .expect("run kubectl");
    let mut input = child.child_mut().stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("write kubectl's stdin");
    drop(input);
    let out = child.wait_with_output().expect("kubectl output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub async fn client_from(kubeconfig: &Path) -> Client {
    sentry_tenants::cluster::choose_tls_provider();
    let parsed = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    Client::try_from(config).expect("a client")
}

/// A namespace of its own for one test: `<prefix>-<n>`, new in every run (a test's objects never leak
/// into another's, and a reused cluster needs no cleaning).
pub async fn fresh_namespace(client: &Client, prefix: &str) -> String {
    let api: Api<Namespace> = Api::all(client.clone());
    let mut n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis()
        % 1_000_000;
    loop {
        let name = format!("{prefix}-{n}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => return name,
            Err(kube::Error::Api(e)) if e.code == 409 => n += 1,
            Err(e) => panic!("create namespace {name}: {e}"),
        }
    }
}

/// Waits until kube-controller-manager acts on new namespaces again — its root CA publisher puts
/// `kube-root-ca.crt` into a fresh one, which every pod's ServiceAccount volume needs. After an
/// apiserver restart its watches come back by themselves, but only after a back-off (up to a minute);
/// tests sharing the cluster start once they have.
pub async fn wait_controllers_caught_up(client: &Client) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let ns = fresh_namespace(client, "caught-up").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    wait_until("kube-root-ca.crt in a new namespace", async || {
        maps.get_opt("kube-root-ca.crt").await.ok().flatten()
    })
    .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&ns, &Default::default()).await;
}

/// Waits until `name` is gone from `api`: deleted, with every finalizer released.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let started = Instant::now();
    loop {
        let last = match api.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(obj)) => format!("{obj:#?}"),
            Err(e) => e.to_string(),
        };
        // What kept it is in the object (its finalizers, its status): shown, not just the timeout.
        assert!(
            started.elapsed() < PATIENCE,
            "still waiting after {PATIENCE:?} for {name} to be gone; last seen:\n{last}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Polls `f` until it returns something; panics only after [`PATIENCE`].
pub async fn wait_until<T>(what: &str, f: impl AsyncFnMut() -> Option<T>) -> T {
    wait_until_within(what, PATIENCE, f).await
}

/// [`wait_until`] for what the product itself schedules later than [`PATIENCE`] (a retry after a
/// backoff of minutes): panics only after `patience`.
pub async fn wait_until_within<T>(
    what: &str,
    patience: std::time::Duration,
    mut f: impl AsyncFnMut() -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            started.elapsed() < patience,
            "still waiting after {patience:?} for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A kubeconfig that authenticates as a ServiceAccount, with a token from the TokenRequest API (what a
/// kubelet mounts into the account's pods): every request it makes is authorised by the real RBAC.
pub async fn service_account_kubeconfig(
    plane: &ControlPlane,
    admin: &Client,
    namespace: &str,
    account: &str,
) -> PathBuf {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let answer: TokenRequest = api
        .create_subresource("token", account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("token for {namespace}/{account}: {e}"));
    let token = answer.status.expect("a token").token;
    let admin_config: Value = serde_norway::from_str(
        &std::fs::read_to_string(&plane.kubeconfig).expect("read the admin kubeconfig"),
    )
    .expect("a YAML kubeconfig");
    let cluster = &admin_config["clusters"][0]["cluster"];
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": account, "namespace": namespace}}],
        "current-context": "local",
    });
    let path = plane
        .dir
        .join(format!("sa-{namespace}-{account}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap())
        .expect("write the ServiceAccount's kubeconfig");
    path
}

impl ControlPlane {
    /// When kube-apiserver was being restarted, until its RBAC caches were filled (it forbids everyone
    /// meanwhile): (from, to) as the audit log's timestamps, written by `scripts/cluster.sh
    /// restart-apiserver`.
    pub fn apiserver_restarts(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(self.dir.join("apiserver-restarts"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (from, to) = l.split_once(' ')?;
                Some((from.to_owned(), to.to_owned()))
            })
            .collect()
    }

    /// Requests the apiserver answered 403 to a ServiceAccount of ours (but for the moments after an
    /// apiserver restart when it forbids everyone, and new objects in a namespace being deleted) in
    /// `namespace` (the operator's
    /// and the provisioner's), as "verb resource name: user".
    pub fn forbidden_for_our_accounts(&self, namespace: &str) -> Vec<String> {
        let ours = format!("system:serviceaccount:{namespace}:sentry-tenants");
        let restarts = self.apiserver_restarts();
        self.audit_events()
            .iter()
            .filter(|e| e["responseStatus"]["code"] == 403)
            .filter(|e| !refused_for_a_terminating_namespace(e))
            .filter(|e| {
                let received = e["requestReceivedTimestamp"].as_str().unwrap_or_default();
                !restarts
                    .iter()
                    .any(|(start, end)| start.as_str() <= received && received <= end.as_str())
            })
            .filter(|e| {
                e["user"]["username"]
                    .as_str()
                    .is_some_and(|u| u.starts_with(&ours))
            })
            .map(|e| {
                format!(
                    "{} {}: {}",
                    e["verb"].as_str().unwrap_or_default(),
                    e["requestURI"].as_str().unwrap_or_default(),
                    e["user"]["username"].as_str().unwrap_or_default()
                )
            })
            .collect()
    }
}

/// The apiserver refuses new objects in a namespace being deleted whatever the RBAC says: such a 403
/// says nothing about the RBAC we ship.
fn refused_for_a_terminating_namespace(event: &Value) -> bool {
    event["responseStatus"]["details"]["causes"]
        .as_array()
        .is_some_and(|causes| causes.iter().any(|c| c["reason"] == "NamespaceTerminating"))
}

/// A TCP relay to the apiserver that can freeze: while frozen it forwards nothing in either direction
/// and answers nothing, as a network that silently drops packets does (no reset, no error: a request
/// just never gets its answer).
pub struct FreezingRelay {
    pub addr: std::net::SocketAddr,
    frozen: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezingRelay {
    pub async fn start(upstream: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a relay port");
        let addr = listener.local_addr().expect("relay address");
        let (frozen, _) = tokio::sync::watch::channel(false);
        let watch = frozen.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let gate = watch.subscribe();
                tokio::spawn(async move {
                    let Ok(outbound) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    tokio::join!(pipe(ri, wo, gate.clone()), pipe(ro, wi, gate));
                });
            }
        });
        Self { addr, frozen, task }
    }

    pub fn freeze(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }

    /// A copy of `kubeconfig` whose server is this relay.
    pub fn kubeconfig_through(&self, kubeconfig: &Path) -> PathBuf {
        let mut config: Value =
            serde_norway::from_str(&std::fs::read_to_string(kubeconfig).expect("read kubeconfig"))
                .expect("a YAML kubeconfig");
        config["clusters"][0]["cluster"]["server"] =
            Value::String(format!("https://127.0.0.1:{}", self.addr.port()));
        let path = kubeconfig.with_extension(format!("relay-{}.kubeconfig", self.addr.port()));
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap())
            .expect("write the relayed kubeconfig");
        path
    }
}

impl Drop for FreezingRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a freeze are held until it thaws, like packets in a dead link.
        if frozen.wait_for(|f| !*f).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl ControlPlane {
    /// The apiserver's address, from the kubeconfig.
    pub fn apiserver_addr(&self) -> std::net::SocketAddr {
        let config: Value = serde_norway::from_str(
            &std::fs::read_to_string(&self.kubeconfig).expect("read kubeconfig"),
        )
        .expect("a YAML kubeconfig");
        let server = config["clusters"][0]["cluster"]["server"]
            .as_str()
            .expect("a server URL");
        server
            .trim_start_matches("https://")
            .parse()
            .expect("server is https://IP:port")
    }
}

/// Which document of the image [`ControlPlane::image_document`] reads.
pub enum ImageDocument<'a> {
    Manifest,
    Blob(&'a str),
}

impl ControlPlane {
    /// This host's address as the pods reach it (the host's end of the node's link, `scripts/cluster.sh`):
    /// where servers the tests start listen for the pods.
    pub fn host_address(&self) -> String {
        format!("10.245.{}.1", self.subnet())
    }

    /// The number `scripts/cluster.sh` gave this cluster: its node's subnet, network namespace and cgroups.
    fn subnet(&self) -> String {
        let x = std::fs::read_to_string(self.dir.join("subnet")).unwrap_or_else(|e| {
            panic!(
                "{}/subnet: {e} (is this cluster started by scripts/cluster.sh?)",
                self.dir.display()
            )
        });
        x.trim().to_owned()
    }

    /// The node's cgroup in `controller`'s (cgroup v1) hierarchy: the kubelet's pods under `kubepods`,
    /// containerd with its shims under `containerd` (`scripts/cluster.sh`).
    pub fn node_cgroup(&self, controller: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(format!("sentry-tenants-st{}", self.subnet()))
    }

    /// Tells the node's containerd to pull from `registry` (`host:port`) over TLS verified by the CA
    /// in `ca` — what a cluster's admin does for a private registry (containerd reads its hosts
    /// directory on every pull).
    pub fn trust_registry(&self, registry: &str, ca: &Path) {
        let hosts = self.dir.join("containerd/certs.d").join(registry);
        std::fs::create_dir_all(&hosts).unwrap();
        std::fs::write(
            hosts.join("hosts.toml"),
            format!(
                "server = \"https://{registry}\"\n[host.\"https://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"{}\"\n",
                ca.display()
            ),
        )
        .unwrap();
    }

    /// Runs containerd's `ctr` against the node's containerd, in the CRI's namespace (`k8s.io`, the
    /// images the kubelet runs); its stdout.
    pub fn ctr(&self, args: &[&str]) -> String {
        let socket = format!("/run/sentry-tenants/st{}/containerd.sock", self.subnet());
        let out = Command::new(self.bin("ctr"))
            .args(["--address", &socket, "--namespace", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The operator image of this checkout in the cluster's registry, by digest (`scripts/image.sh`,
    /// which `scripts/cluster.sh up` runs; run it again after rebuilding the binary).
    pub fn image(&self) -> String {
        let path = self.dir.join("image");
        let image = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/cluster.sh up pushes the image; so does scripts/image.sh)",
                path.display()
            )
        });
        image.trim().to_owned()
    }

    /// The operator image under another repository name with another entrypoint, pushed to the
    /// cluster's registry by `scripts/image.sh`; the reference by digest.
    pub fn push_image_variant(&self, name: &str, entrypoint: &str) -> String {
        let out = Command::new("bash")
            .arg(workspace_root().join("scripts/image.sh"))
            .env("SENTRY_TENANTS_CLUSTER_DIR", &self.dir)
            .env("SENTRY_TENANTS_IMAGE_NAME", name)
            .env("SENTRY_TENANTS_IMAGE_ENTRYPOINT", entrypoint)
            .output()
            .expect("run scripts/image.sh");
        assert!(
            out.status.success(),
            "scripts/image.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .last()
            .expect("the image reference")
            .to_owned()
    }

    /// A JSON document of the cluster's image of the operator, from the registry: `manifest` (the
    /// image's manifest) or the blob of `digest` (its config, say).
    pub async fn image_document(&self, what: ImageDocument<'_>) -> Value {
        let image = self.image();
        let (registry, rest) = image.split_once('/').expect("registry/repository@digest");
        let (repository, digest) = rest.split_once('@').expect("an image by digest");
        let path = match what {
            ImageDocument::Manifest => format!("/v2/{repository}/manifests/{digest}"),
            ImageDocument::Blob(blob) => format!("/v2/{repository}/blobs/{blob}"),
        };
        // The registry serves an OCI manifest only to a client that says it reads one.
        let accept = ("Accept", "application/vnd.oci.image.manifest.v1+json");
        let body = crate::http_get_with(registry, &path, &[accept])
            .await
            .unwrap_or_else(|e| panic!("{registry}{path}: {e}"));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// [`crate::install_values`] with this cluster's image of the operator.
    pub fn install_values(&self, namespace: &str) -> sentry_tenants::install::Values {
        sentry_tenants::install::Values {
            image: self.image(),
            ..crate::install_values(namespace)
        }
        .validate()
        .expect("valid values")
    }
}
