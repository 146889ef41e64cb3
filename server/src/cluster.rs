//! Connecting to the cluster and turning API failures into one line a person can act on.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// One TLS backend for every client in the process, chosen explicitly: a build that links more than
/// one (feature unification in a workspace) would otherwise refuse to pick. Idempotent.
pub fn choose_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Which cluster a command talks to, as kubectl's flags say it. Without either, the kubeconfig from
/// `KUBECONFIG` or `~/.kube/config`, else the pod's ServiceAccount (in a cluster).
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file to use.
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
}

static SELECTED: OnceLock<ClusterArgs> = OnceLock::new();

/// What the process calls itself in every request's User-Agent (the audit log's `userAgent`), set
/// once by a command that wants more than the default `sentry-tenants/<version>`: an operator says
/// which shard it reconciles.
static USER_AGENT: OnceLock<String> = OnceLock::new();

/// Names the process in its requests: `sentry-tenants/<version> <role>`.
pub fn identify_as(role: &str) {
    let _ = USER_AGENT.set(format!("{} {role}", default_user_agent()));
}

fn default_user_agent() -> String {
    format!("sentry-tenants/{}", env!("CARGO_PKG_VERSION"))
}

/// Records the command line's choice once, before any command connects.
pub fn select(args: ClusterArgs) {
    let _ = SELECTED.set(args);
}

/// How long any request waits for the API server's next bytes. kube's default is forever: on a
/// half-open connection a reconcile would hang while the pod stays Ready (and keeps leading).
pub const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The server-side `timeoutSeconds` of every watch: shorter than [`READ_TIMEOUT`], so the API server
/// ends a quiet watch cleanly (and the watcher renews it from where it was) before the read timeout
/// would cut it.
pub const WATCH_TIMEOUT_SECONDS: u32 = 50;
const _: () = assert!((WATCH_TIMEOUT_SECONDS as u64) < READ_TIMEOUT.as_secs());

/// A client for the selected cluster whose every request is bounded by [`READ_TIMEOUT`], or one
/// clear line saying why not.
pub async fn connect() -> anyhow::Result<Client> {
    client_for(selected(), Some(READ_TIMEOUT))
        .await
        .map_err(anyhow::Error::msg)
}

/// A client with no read timeout, for streams that are quiet for as long as their user is: the
/// dashboard's port-forwards (an open page's event stream waits on the cluster's changes).
pub async fn connect_for_streams() -> anyhow::Result<Client> {
    client_for(selected(), None)
        .await
        .map_err(anyhow::Error::msg)
}

fn selected() -> &'static ClusterArgs {
    static DEFAULT: ClusterArgs = ClusterArgs {
        kubeconfig: None,
        context: None,
    };
    SELECTED.get().unwrap_or(&DEFAULT)
}

/// The kubeconfig's credential plugin as a person would type it (`gke-gcloud-auth-plugin`,
/// `aws eks get-token …`), kept so a failure later in the run can name it too.
static CREDENTIAL_PLUGIN: OnceLock<String> = OnceLock::new();

async fn client_for(args: &ClusterArgs, read_timeout: Option<Duration>) -> Result<Client, String> {
    let mut config = config_for(args).await?;
    config.read_timeout = read_timeout;
    client_from(config)
}

fn client_from(mut config: kube::Config) -> Result<Client, String> {
    let agent = USER_AGENT.get().cloned().unwrap_or_else(default_user_agent);
    if let Ok(agent) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    if let Some(exec) = &config.auth_info.exec {
        let words: Vec<String> = exec
            .command
            .iter()
            .chain(exec.args.iter().flatten())
            .cloned()
            .collect();
        let _ = CREDENTIAL_PLUGIN.set(words.join(" "));
    }
    // A credential plugin runs here, before the first request.
    Client::try_from(config).map_err(|e| match &e {
        kube::Error::Auth(auth) => credentials_failed(auth),
        _ => format!(
            "cannot build a Kubernetes client from the kubeconfig: {}",
            root_cause(&e)
        ),
    })
}

/// "the kubeconfig's credential plugin `…` failed: <its last stderr line>; log in again …", or what
/// else kept the credentials from being obtained — an expired cloud login, most of the time.
fn credentials_failed(error: &kube::client::AuthError) -> String {
    use kube::client::AuthError;
    let said = match error {
        AuthError::AuthExecRun { status, out, .. } => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            match stderr.lines().rev().find(|l| !l.trim().is_empty()) {
                Some(line) => format!("{status}: {}", line.trim()),
                None => status.to_string(),
            }
        }
        other => root_cause(other),
    };
    match CREDENTIAL_PLUGIN.get() {
        Some(plugin) => format!(
            "the kubeconfig's credential plugin `{plugin}` failed ({said}): log in again (an expired cloud login is the usual cause), or run it yourself to see why"
        ),
        None => format!("cannot obtain credentials from the kubeconfig: {said}"),
    }
}

async fn config_for(args: &ClusterArgs) -> Result<kube::Config, String> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let source = match &args.kubeconfig {
        Some(path) => path.display().to_string(),
        None => std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".to_owned()),
    };
    let explained = |error: KubeconfigError| match error {
        KubeconfigError::LoadContext(name) => format!(
            "the kubeconfig {source} has no context {name:?} (`kubectl config get-contexts` lists them)"
        ),
        other => format!("cannot use the kubeconfig {source}: {}", root_cause(&other)),
    };
    match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                format!("cannot read the kubeconfig {source}: {}", root_cause(&e))
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(explained)
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(explained),
        None => kube::Config::infer().await.map_err(|error| {
            format!(
                "no Kubernetes configuration found: not running in a cluster, and no usable kubeconfig at {source} ({})",
                root_cause(&error)
            )
        }),
    }
}

/// The innermost cause of an error chain: kube's errors repeat their sources at every level.
pub fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut root = error;
    while let Some(source) = root.source() {
        root = source;
    }
    root.to_string()
}

/// "cannot {action}: …" with the reason a person can act on: unreachable, forbidden, not found, or the
/// API server's own message.
pub fn describe(action: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 401 => format!(
            "cannot {action}: the API server rejected your credentials ({}): they may have expired; log in again or refresh the kubeconfig",
            status.message
        ),
        kube::Error::Auth(auth) => format!("cannot {action}: {}", credentials_failed(auth)),
        kube::Error::Api(status) if status.code == 403 => {
            format!(
                "cannot {action}: forbidden ({}); your account needs permission to {action}",
                status.message
            )
        }
        kube::Error::Api(status) => format!(
            "cannot {action}: {} ({} {})",
            status.message, status.code, status.reason
        ),
        other => format!(
            "cannot {action}: the Kubernetes API is unreachable ({})",
            root_cause(other)
        ),
    }
}

/// A SelfSubjectAccessReview of `verb` `resource` (group `group`) in `namespace`, or cluster-wide
/// without one: the API server's answer, its reason included.
pub async fn access_review(
    client: &Client,
    namespace: Option<&str>,
    group: &str,
    (verb, resource): (&str, &str),
) -> kube::Result<k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus> {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: namespace.map(Into::into),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let answer = api
        .create(&kube::api::PostParams::default(), &review)
        .await?;
    Ok(answer.status.unwrap_or_default())
}

/// A missing CRD shows up as a 404 on the resource itself; listing one tenant needs no permission beyond
/// what the operator already has (it holds no cluster-scoped read of CRDs).
pub async fn ensure_crds_installed(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let tenants: kube::Api<crate::crd::Tenant> = kube::Api::namespaced(client.clone(), namespace);
    match tenants
        .list(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            anyhow::bail!(
                "the sentry.io CRDs are not installed in this cluster: run `sentry-tenants install` first"
            )
        }
        Err(e) => Err(anyhow::anyhow!(describe("list tenants", &e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that accepts connections and never answers: a half-open connection, as a dead peer
    /// behind a load balancer leaves one. The request must fail, not hang.
    #[tokio::test]
    async fn a_request_to_a_server_that_never_answers_fails_after_the_read_timeout() {
        choose_tls_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                open.push(conn);
            }
        });
        let path = std::env::temp_dir().join(format!("st-silent-{}.yaml", std::process::id()));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
            ),
        )
        .unwrap();
        let args = ClusterArgs {
            kubeconfig: Some(path.clone()),
            context: None,
        };
        let client = client_for(&args, Some(Duration::from_millis(500)))
            .await
            .unwrap();
        // Far beyond the read timeout: without one, the request waits here until this bound ends it.
        let answer =
            tokio::time::timeout(Duration::from_secs(60), client.apiserver_version()).await;
        let _ = std::fs::remove_file(path);
        held.abort();
        let error = answer
            .expect("the request ended by itself, not by the test's bound")
            .expect_err("nothing answered");
        assert!(
            root_cause(&error).to_lowercase().contains("timed out")
                || error.to_string().to_lowercase().contains("timeout"),
            "{error:?}"
        );
    }
}
