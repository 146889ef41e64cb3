//! What the account behind the dashboard may do, by action kind: one SelfSubjectAccessReview per
//! permission an action needs, asked at start and again every [`REVIEW_EVERY`], so a page never shows a
//! button its account may not use. The API server still decides every request; this only hides.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::Client;
use kube::api::{Api, PostParams};
use sentry_tenants_app::model::Allowed;

use crate::cluster::access_review;
use tokio::sync::watch;

/// How long a review is believed: a RoleBinding granted or taken away shows within this.
pub const REVIEW_EVERY: Duration = Duration::from_secs(60);

/// The permission behind each action kind, as `(verb, resource)` in the `sentry.io` group.
pub const CREATE: (&str, &str) = ("create", "tenants");
pub const START_RUNS: (&str, &str) = ("create", "runjobs");
pub const CHANGE: (&str, &str) = ("patch", "tenants");
pub const DELETE: (&str, &str) = ("delete", "tenants");

/// The latest review, shared by every request.
#[derive(Clone)]
pub struct Permissions(watch::Receiver<Allowed>);

impl Permissions {
    /// Always `allowed` (a read-only dashboard: none; tests: what they set).
    pub fn fixed(allowed: Allowed) -> Self {
        Self(watch::channel(allowed).1)
    }

    /// Reviewed now, then every [`REVIEW_EVERY`] until `shutdown`.
    pub async fn reviewed(
        client: Client,
        namespace: String,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self::reviewed_every(REVIEW_EVERY, client, namespace, shutdown).await
    }

    /// Reviewed now, then every `period` until `shutdown` (tests wait less than a minute).
    pub async fn reviewed_every(
        period: Duration,
        client: Client,
        namespace: String,
        mut shutdown: watch::Receiver<bool>,
    ) -> Self {
        let (tx, rx) = watch::channel(review(&client, &namespace).await);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = shutdown.wait_for(|stop| *stop) => return,
                }
                // Nobody reads the reviews any more (the dashboard turned read-only): stop asking.
                if tx.is_closed() {
                    return;
                }
                // Pages read the latest answer when they render; nothing waits for a change.
                tx.send_replace(review(&client, &namespace).await);
            }
        });
        Self(rx)
    }

    pub fn now(&self) -> Allowed {
        *self.0.borrow()
    }
}

/// One review per action kind, side by side.
pub async fn review(client: &Client, namespace: &str) -> Allowed {
    let (create, start_runs, change, delete) = futures::join!(
        may(client, namespace, CREATE),
        may(client, namespace, START_RUNS),
        may(client, namespace, CHANGE),
        may(client, namespace, DELETE),
    );
    Allowed {
        create,
        start_runs,
        change,
        delete,
    }
}

/// Whether this client's account may `verb` `resource` (group `sentry.io`) in `namespace`. A review
/// that cannot be made says yes: the button is then shown, and the API server answers the click.
pub async fn may(client: &Client, namespace: &str, (verb, resource): (&str, &str)) -> bool {
    match may_in_group(client, namespace, crate::crd::GROUP, (verb, resource)).await {
        Ok(allowed) => allowed,
        Err(error) => {
            tracing::warn!(%error, verb, resource, "could not review a permission; showing its buttons");
            true
        }
    }
}

/// The API server's SelfSubjectAccessReview answer: may this client's account `verb` `resource` of API
/// group `group` in `namespace`?
pub async fn may_in_group(
    client: &Client,
    namespace: &str,
    group: &str,
    permission: (&str, &str),
) -> kube::Result<bool> {
    let answer = access_review(client, Some(namespace), group, permission).await?;
    Ok(answer.allowed)
}

/// The user name the API server knows this client as (SelfSubjectReview, Kubernetes ≥ 1.28); `None`
/// where the server cannot say.
pub async fn who_am_i(client: &Client) -> Option<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let answer = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .ok()?;
    answer.status?.user_info?.username
}
