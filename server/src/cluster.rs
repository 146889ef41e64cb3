//! Connecting to the cluster and turning API failures into one line a person can act on.

use kube::Client;

/// A client from the in-cluster service account or the kubeconfig, or one clear line saying why not.
/// One TLS backend for every client in the process, chosen explicitly: a build that links more than
/// one (feature unification in a workspace) would otherwise refuse to pick. Idempotent.
pub fn choose_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub async fn connect() -> anyhow::Result<Client> {
    Client::try_default().await.map_err(|error| {
        let kubeconfig = std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".to_owned());
        anyhow::anyhow!(
            "no Kubernetes configuration found: not running in a cluster, and no usable kubeconfig at {kubeconfig} ({})",
            root_cause(&error)
        )
    })
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
