//! Waiting on the cluster with a deadline, and the installer's errors: what ends a wait.

use std::time::Duration;

use super::progress::Progress;

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0}")]
    Bundle(#[from] super::BundleError),
    #[error(
        "cannot apply {kind} {name}: its fields {fields} are managed by {managers}; re-run with --force-conflicts to take them over"
    )]
    Conflict {
        kind: String,
        name: String,
        managers: String,
        fields: String,
    },
    #[error("{0}")]
    Api(String),
    #[error(
        "the operator Deployment {deployment} cannot roll out: {reason}; {hint}",
        hint = ROLLOUT_HINT
    )]
    RolloutStuck { deployment: String, reason: String },
    #[error(
        "timed out after {seconds}s waiting for {what} (see `kubectl -n {namespace} get events`); raise --timeout or fix the cause and re-run install"
    )]
    Timeout {
        what: String,
        seconds: u64,
        namespace: String,
    },
}

/// What to do about a stuck rollout: most often the image (the default one is built from this
/// repository's Dockerfile and must be pushed where the cluster can pull it).
const ROLLOUT_HINT: &str = "fix the cause and re-run install (an image the cluster cannot pull: build and push it as docs/install.md's Image section says, or pass --image)";

/// A failed API call as one line naming what we were doing.
pub fn api_error(action: &str, e: &kube::Error) -> InstallError {
    InstallError::Api(crate::cluster::describe(action, e))
}

/// Checks every `every` until `check` says done, or `timeout` has passed (then [`InstallError::Timeout`]).
pub async fn poll(
    what: &str,
    (timeout, every): (Duration, Duration),
    progress: &Progress,
    ns: &str,
    mut check: impl AsyncFnMut() -> Result<Option<()>, InstallError>,
) -> Result<(), InstallError> {
    let deadline = tokio::time::Instant::now() + timeout;
    progress.step(&format!("waiting for {what}"));
    loop {
        if check().await?.is_some() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(InstallError::Timeout {
                what: what.to_owned(),
                seconds: timeout.as_secs(),
                namespace: ns.to_owned(),
            });
        }
        tokio::time::sleep(every).await;
    }
}
