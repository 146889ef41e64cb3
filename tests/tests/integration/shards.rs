//! Rule 0 of a sharded install against the in-memory API: what the main operator and a shard each
//! write, or do not, for a tenant and its runs. (The real-cluster test, `cluster::shards`, proves the
//! same with pods, Leases and the audit log.)

use http::Method;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use sentry_tenants::crd::{RunAction, RunPhase};
use sentry_tenants_tests::{Cluster, status_body};

async fn label(c: &Cluster, tenant: &str, shard: &str) {
    let patch = serde_json::json!({"metadata": {"labels": {"sentry.io/shard": shard}}});
    c.tenants()
        .patch(tenant, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

async fn orphan_run(c: &Cluster, name: &str) {
    let run: sentry_tenants::crd::RunJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
        "metadata": {"name": name},
        "spec": {"tenant": "gone", "action": "Provision"},
    }))
    .unwrap();
    c.runjobs().create(&Default::default(), &run).await.unwrap();
}

fn shard_label(t: &sentry_tenants::crd::Tenant) -> Option<&str> {
    t.labels().get("sentry.io/shard").map(String::as_str)
}

/// Unlabelled `b` (FNV-1a 0xaf63df4c8601f1a5, odd) goes to the second of two shards, in one patch that
/// carries the resourceVersion it was decided on; nothing else is written: no status, no finalizer.
#[tokio::test]
async fn the_main_operator_labels_an_unlabelled_tenant_and_nothing_else() {
    let c = Cluster::sharded(&["a", "b"], None).await;
    let created = c.create_tenant("b").await;
    c.log.clear();
    c.reconcile_tenant("b").await;
    let t = c.tenant("b").await;
    assert_eq!(shard_label(&t), Some("b"));
    assert!(t.status.is_none() && t.finalizers().is_empty(), "{t:?}");
    let writes = c.log.writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert_eq!(writes[0].kind(), "patch tenants");
    assert_eq!(
        writes[0].body["metadata"]["resourceVersion"],
        created.resource_version().unwrap().as_str()
    );
    // Labelled now: the main operator has nothing more to do with it.
    c.log.clear();
    c.reconcile_tenant("b").await;
    assert!(c.log.writes().is_empty());
}

/// Someone labelled the tenant between the read and the write: the 409 ends the reconcile quietly (the
/// watch brings the tenant back), and nothing else is written.
#[tokio::test]
async fn a_label_set_meanwhile_wins_over_the_main_operators() {
    let c = Cluster::sharded(&["a", "b"], None).await;
    c.create_tenant("b").await;
    c.intercept.set(|method, path, _, _| {
        (*method == Method::PATCH && path.ends_with("/tenants/b")).then(|| {
            (
                409,
                status_body(409, "Conflict", "the object has been modified"),
            )
        })
    });
    c.log.clear();
    c.reconcile_tenant("b").await;
    assert_eq!(shard_label(&c.tenant("b").await), None);
    assert_eq!(c.log.writes().len(), 1, "the one refused patch");
}

/// The tenant deleted between the read and the write (404): nothing to label, the reconcile ends
/// quietly. Any other refusal (a 500) is an error, retried by the controller's backoff.
#[tokio::test]
async fn a_tenant_gone_meanwhile_ends_the_labelling_and_a_failure_is_an_error() {
    let c = Cluster::sharded(&["a", "b"], None).await;
    c.create_tenant("b").await;
    c.intercept.set(|method, path, _, _| {
        (*method == Method::PATCH && path.ends_with("/tenants/b"))
            .then(|| (404, status_body(404, "NotFound", "tenants \"b\" not found")))
    });
    c.reconcile_tenant("b").await;
    c.intercept.refuse(Method::PATCH, "/tenants/b");
    assert!(c.try_reconcile_tenant("b").await.is_err());
    assert_eq!(shard_label(&c.tenant("b").await), None);
}

/// A label naming no shard: the main operator says so in a Warning Event, and writes nothing else.
#[tokio::test]
async fn the_main_operator_reports_a_label_naming_no_shard() {
    let c = Cluster::sharded(&["a", "b"], None).await;
    c.create_tenant("zed").await;
    label(&c, "zed", "c").await;
    c.log.clear();
    c.reconcile_tenant("zed").await;
    assert!(c.log.writes().is_empty(), "{:#?}", c.log.writes());
    let events = c.log.events();
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "UnknownShard" && e["type"] == "Warning"),
        "{events:#?}"
    );
}

/// Shard a reconciles the tenant labelled `a` (its status written, its finalizer added) and writes
/// nothing for one labelled `b` or for an unlabelled one.
#[tokio::test]
async fn a_shard_reconciles_its_own_tenants_only() {
    let c = Cluster::sharded(&["a", "b"], Some("a")).await;
    for (name, shard) in [("mine", Some("a")), ("theirs", Some("b")), ("new", None)] {
        c.create_tenant(name).await;
        if let Some(shard) = shard {
            label(&c, name, shard).await;
        }
    }
    c.log.clear();
    for name in ["theirs", "new"] {
        c.reconcile_tenant(name).await;
    }
    assert!(c.log.writes().is_empty(), "{:#?}", c.log.writes());
    c.reconcile_tenant("mine").await;
    let mine = c.tenant("mine").await;
    assert!(mine.status.is_some() && !mine.finalizers().is_empty());
}

/// A run goes with its tenant's label: shard b leaves shard a's run alone; a run whose tenant is gone
/// is the main operator's, which fails it, and no shard touches it.
#[tokio::test]
async fn a_run_is_reconciled_by_its_tenants_shard_and_an_orphan_by_the_main() {
    let b = Cluster::sharded(&["a", "b"], Some("b")).await;
    b.create_tenant("acme").await;
    label(&b, "acme", "a").await;
    b.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    b.log.clear();
    b.reconcile_run("acme-provision-1").await;
    assert!(b.log.writes().is_empty(), "{:#?}", b.log.writes());

    // A run someone made for a tenant that does not exist.
    orphan_run(&b, "gone-provision-1").await;
    b.log.clear();
    b.reconcile_run("gone-provision-1").await;
    assert!(b.log.writes().is_empty(), "a shard leaves an orphan alone");

    let main = Cluster::sharded(&["a", "b"], None).await;
    orphan_run(&main, "gone-provision-1").await;
    main.reconcile_run("gone-provision-1").await;
    let run = main.runjobs().get("gone-provision-1").await.unwrap();
    assert_eq!(run.status.and_then(|s| s.phase), Some(RunPhase::Failed));
}
