//! A run outlasts a short outage of the Kubernetes API (an apiserver restarted or upgraded, a
//! control plane briefly overloaded): a run that failed only because the API was unavailable is run
//! again once the apiserver says it is ready, for a few minutes. Every step of a run is safe to repeat
//! (the module doc of `provision`), which the Job's pod retries rely on as well; waiting here spares
//! those retries, and their growing delays, for failures that are not the API's.

use std::time::Duration;

// tokio's clock: the same in production, and a test can pause it.
use tokio::time::Instant;

use super::ProvisionError;

/// How long a run keeps trying through an unavailable API, counted from its first failure of that
/// kind, before it fails with it. Well inside the Job's deadline (`activeDeadlineSeconds`, 600 s).
pub const OUTAGE_BUDGET: Duration = Duration::from_secs(180);

/// The waits before asking whether the apiserver is back: 1, 2, 4, then every 8 seconds.
fn wait_before_asking(asked: u32) -> Duration {
    Duration::from_secs(1 << asked.min(3))
}

/// Runs `attempt`; while it fails only because the API is unavailable and the budget lasts, waits
/// until `ready` says the apiserver is back and runs it again. Any other outcome is returned as is.
pub async fn outlasting_api_outages<T>(
    mut ready: impl AsyncFnMut() -> bool,
    mut attempt: impl AsyncFnMut() -> Result<T, ProvisionError>,
) -> Result<T, ProvisionError> {
    let mut outage_began = None;
    // The waits grow over the whole outage, not per attempt: an apiserver that says it is ready and
    // still fails every request is not asked for a whole run every second.
    let mut asked = 0;
    loop {
        let error = match attempt().await {
            Err(error) if error.is_api_unavailable() => error,
            outcome => return outcome,
        };
        let began = *outage_began.get_or_insert_with(Instant::now);
        tracing::warn!(%error, "waiting for the Kubernetes API to run again");
        loop {
            let wait = wait_before_asking(asked);
            if began.elapsed() + wait > OUTAGE_BUDGET {
                return Err(error);
            }
            tokio::time::sleep(wait).await;
            asked += 1;
            if ready().await {
                break;
            }
        }
    }
}

/// Whether the apiserver says it is ready (`/readyz`, which every account may read): it answers
/// requests before its caches are filled, and forbids everyone for that moment.
pub async fn apiserver_ready(client: &kube::Client) -> bool {
    let request = http::Request::get("/readyz").body(Vec::new());
    match request {
        Ok(request) => client.request_text(request).await.is_ok(),
        Err(_) => false,
    }
}
