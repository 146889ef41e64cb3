//! Rule 11 on the in-memory API, through the reconciler and its caches: the marker the provisioner
//! writes beside the credentials Secret stands for it; once the Secret (and, by the garbage
//! collector, the marker) is gone the tenant says so and starts nothing unless
//! `onSecretLoss: Rotate`; a marker the cache has not seen yet is asked of the API before anything
//! is decided. The real garbage collector and Job are in the cluster tier's `secret_loss.rs`.

use http::Method;
use kube::api::{Patch, PatchParams};
use sentry_tenants::crd::{RunAction, Tenant};
use sentry_tenants::names::TenantName;
use sentry_tenants_tests::Cluster;
use sentry_tenants_tests::clickhouse_seam::RecordingClickHouse;
use serde_json::json;

/// Acme provisioned by the provisioner (its marker written) and reconciled once.
async fn provisioned(on_loss: &str) -> (Cluster, RecordingClickHouse) {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let spec = json!({"spec": {"credentials": {"onSecretLoss": on_loss}}});
    c.tenants()
        .patch("acme", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    let ch = RecordingClickHouse::new("25.3.2.39");
    c.provisioner(&ch, false)
        .run(&TenantName::parse("acme").unwrap(), RunAction::Provision)
        .await
        .unwrap();
    c.reconcile_tenant("acme").await;
    (c, ch)
}

/// The `CredentialsSecret` condition's reason.
async fn secret_reason(c: &Cluster) -> Option<String> {
    let tenant: Tenant = c.tenants().get("acme").await.unwrap();
    let status = tenant.status?;
    let condition = status
        .conditions
        .into_iter()
        .find(|c| c.type_ == "CredentialsSecret")?;
    Some(condition.reason)
}

#[tokio::test]
async fn a_deleted_secret_is_reported_and_only_on_secret_loss_rotate_starts_a_run() {
    let (c, _ch) = provisioned("Report").await;
    assert_eq!(secret_reason(&c).await.as_deref(), Some("Present"));

    c.delete_secret_collecting_dependents("acme-clickhouse")
        .await;
    c.log.clear();
    c.reconcile_tenant("acme").await;
    assert_eq!(secret_reason(&c).await.as_deref(), Some("SecretDeleted"));
    assert_eq!(
        c.log.creates_of("runjobs"),
        0,
        "never a rotation the spec did not ask for"
    );

    let spec = json!({"spec": {"credentials": {"onSecretLoss": "Rotate"}}});
    c.tenants()
        .patch("acme", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    c.reconcile_tenant("acme").await;
    assert_eq!(c.log.creates_of("runjobs"), 1);
    let rotate = c
        .runjobs()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|r| r.spec.action == RunAction::Rotate)
        .expect("a Rotate run");
    assert!(rotate.metadata.name.unwrap().starts_with("acme-rotate-"));
    assert_eq!(secret_reason(&c).await.as_deref(), Some("Remaking"));
}

/// The provisioner's report can reach the operator before the marker its ConfigMap watch has not
/// delivered yet: a miss in the cache is asked of the API, and the marker found there counts.
#[tokio::test]
async fn a_marker_the_cache_has_not_seen_is_asked_of_the_api() {
    let (c, _ch) = provisioned("Rotate").await;
    c.sync_stores().await;
    c.forget_markers();
    c.log.clear();
    let tenant = c.tenants().get("acme").await.unwrap();
    sentry_tenants::controller::tenant::reconcile(std::sync::Arc::new(tenant), c.ctx.clone())
        .await
        .unwrap();
    let asked = c
        .log
        .count(|r| r.method == Method::GET && r.path.contains("/configmaps/acme-clickhouse."));
    assert_eq!(asked, 1, "one get of the marker");
    assert_eq!(c.log.creates_of("runjobs"), 0);
    assert_eq!(secret_reason(&c).await.as_deref(), Some("Present"));
}
