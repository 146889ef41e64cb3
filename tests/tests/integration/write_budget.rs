//! Write accounting: a no-op reconcile writes nothing, and a run's whole life costs a bounded number of
//! writes. Counted by the recording layer around the client, so every request is seen.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use kube::ResourceExt;
use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use sentry_tenants::controller::{runjob, tenant};
use sentry_tenants::crd::{ProvisioningPolicy, RunAction, RunPhase, TENANT_FINALIZER, TenantPhase};
use sentry_tenants_tests::{AUTOMATIC_TENANT_WRITES, Cluster, PROVISION_RUN_WRITES};

const RUN: &str = "acme-provision-1";

/// Reconciles both objects again and returns the writes that caused.
async fn noop_writes(c: &Cluster) -> usize {
    c.log.clear();
    c.reconcile_tenant("acme").await;
    if c.run(RUN).await.is_some() {
        c.reconcile_run(RUN).await;
    }
    c.log.writes().len() + c.log.events().len()
}

#[tokio::test]
async fn noop_reconcile_makes_zero_writes_at_every_stage_of_a_run() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    assert_eq!(noop_writes(&c).await, 0, "fresh tenant");

    c.create_run("acme", RunAction::Provision, RUN).await;
    c.settle().await;
    assert_eq!(noop_writes(&c).await, 0, "run pending");

    c.job_running(RUN).await;
    c.settle().await;
    assert_eq!(noop_writes(&c).await, 0, "run running");

    c.job_succeeded(RUN).await;
    c.report_provisioned("acme").await;
    c.settle().await;
    assert_eq!(
        noop_writes(&c).await,
        0,
        "run finished, waiting for cleanup"
    );

    c.clock.advance(SignedDuration::from_secs(300));
    c.settle().await;
    assert_eq!(noop_writes(&c).await, 0, "after cleanup");
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
}

#[tokio::test]
async fn a_run_from_creation_to_cleanup_costs_ten_named_writes() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    c.create_run("acme", RunAction::Provision, RUN).await;
    c.log.clear();

    c.settle().await;
    c.job_running(RUN).await;
    c.settle().await;
    c.job_succeeded(RUN).await;
    c.report_provisioned("acme").await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(300));
    c.settle().await;
    assert!(c.run(RUN).await.is_none());

    let writes = assert_writes_by_kind(&c, PROVISION_RUN_WRITES);
    assert_eq!(writes, 10);
    assert_eq!(c.log.creates_of("jobs"), 1);
    let events = c.log.events().len();
    assert!(
        events <= 5,
        "JobCreated, RunSucceeded ×2, RunCleanedUp (+ at most one more): {events}"
    );
}

/// The watch can lag the reconciler's own write: a reconcile of the run from a copy older than its
/// status write computes the same status again and must not send it a second time — also when the
/// copy is a newer one than the write was computed from (a person's edit of the run in between).
#[tokio::test]
async fn a_reconcile_from_a_copy_older_than_its_own_status_write_sends_nothing_again() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, RUN).await;
    c.settle().await;
    c.job_running(RUN).await;
    c.sync_stores().await;
    let computed_from = Arc::new(c.runjobs().get(RUN).await.unwrap());
    // A label a person adds: a new version of the run, its generation (and so the status) unchanged.
    let label = serde_json::json!({"metadata": {"labels": {"team": "data"}}});
    let edited = c
        .runjobs()
        .patch(RUN, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let status_writes = |c: &Cluster| {
        c.log
            .count(|r| r.kind() == "patch runjobs/status" && r.path.contains(RUN))
    };
    c.log.clear();
    runjob::reconcile(computed_from.clone(), Arc::clone(&c.ctx))
        .await
        .unwrap();
    assert_eq!(status_writes(&c), 1, "Running written");
    runjob::reconcile(computed_from, Arc::clone(&c.ctx))
        .await
        .unwrap();
    assert_eq!(status_writes(&c), 1, "not again from the same old copy");
    runjob::reconcile(Arc::new(edited), Arc::clone(&c.ctx))
        .await
        .unwrap();
    assert_eq!(
        status_writes(&c),
        1,
        "nor from the edit made before the write"
    );
    // Once the cache has the write, the next change is sent as usual.
    c.job_succeeded(RUN).await;
    c.settle().await;
    assert_eq!(status_writes(&c), 2, "Succeeded written");
}

/// The same for a tenant's status: the run a reconcile made turns the tenant Provisioning once, also
/// when the next reconcile still sees the tenant as it was before that write.
#[tokio::test]
async fn a_tenant_reconcile_from_a_copy_older_than_its_own_status_write_sends_nothing_again() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    c.create_run("acme", RunAction::Provision, RUN).await;
    c.sync_stores().await;
    let before = Arc::new(c.tenant("acme").await);
    assert_eq!(before.phase(), Some(TenantPhase::Pending));
    let status_writes = |c: &Cluster| c.log.count(|r| r.kind() == "patch tenants/status");
    c.log.clear();
    tenant::reconcile(before.clone(), Arc::clone(&c.ctx))
        .await
        .unwrap();
    assert_eq!(status_writes(&c), 1, "Provisioning written");
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Provisioning)
    );
    tenant::reconcile(before, Arc::clone(&c.ctx)).await.unwrap();
    assert_eq!(
        status_writes(&c),
        1,
        "not again from the copy before the write"
    );
}

/// The flow of `kubectl apply` (or a GitOps tool) of an Automatic tenant: the reconciler makes its
/// Provision run, the run its Job, the provisioner reports; every write until the tenant is Active
/// and its run Succeeded, by kind (the cleanup 5 minutes later is the Manual flow's, above).
#[tokio::test]
async fn an_automatic_tenant_until_it_is_active_costs_the_named_writes() {
    let c = Cluster::new().await;
    c.log.clear();
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    c.settle().await;
    let runs = c.runs_of(RunAction::Provision).await;
    assert_eq!(runs.len(), 1, "one Provision run made");
    let run = runs[0].name_any();
    c.job_running(&run).await;
    c.settle().await;
    c.job_succeeded(&run).await;
    c.report_provisioned("acme").await;
    c.settle().await;
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
    let status = c.run(&run).await.and_then(|r| r.status).unwrap_or_default();
    assert_eq!(status.phase, Some(RunPhase::Succeeded));

    assert_writes_by_kind(&c, AUTOMATIC_TENANT_WRITES);
}

/// Asserts that the writes logged are exactly `table`'s, kind by kind (each listed if not); returns
/// how many there were.
fn assert_writes_by_kind(c: &Cluster, table: &[(&str, usize)]) -> usize {
    let writes = c.log.writes();
    let summary: Vec<String> = writes
        .iter()
        .map(|w| format!("{} {} {}", w.method, w.path, w.body))
        .collect();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for w in &writes {
        *kinds.entry(w.kind()).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = table
        .iter()
        .map(|(kind, n)| ((*kind).to_owned(), *n))
        .collect();
    assert_eq!(kinds, expected, "{summary:#?}");
    writes.len()
}

/// A tenant reconcile whose run cache has not shown yet the run an earlier reconcile made (what the
/// real control plane's bench saw): its create answers 409, the run is counted as made all the same,
/// and the status stays Provisioning — no Pending written only to be taken back.
#[tokio::test]
async fn a_tenant_reconcile_that_does_not_see_its_new_run_yet_writes_nothing_to_take_back() {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    // As the first reconcile leaves it: our finalizer on, no status yet.
    let finalizer = serde_json::json!({"metadata": {"finalizers": [TENANT_FINALIZER]}});
    c.tenants()
        .patch("acme", &PatchParams::default(), &Patch::Merge(&finalizer))
        .await
        .unwrap();
    c.sync_stores().await;
    let copy = Arc::new(c.tenant("acme").await);
    c.log.clear();
    tenant::reconcile(copy.clone(), Arc::clone(&c.ctx))
        .await
        .unwrap();
    assert_eq!(c.log.creates_of("runjobs"), 1, "the Provision run made");
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Provisioning)
    );
    // The caches are as they were: the tenant without its status, no run.
    tenant::reconcile(copy, Arc::clone(&c.ctx)).await.unwrap();
    let status_writes = c.log.count(|r| r.kind() == "patch tenants/status");
    assert_eq!(status_writes, 1, "Provisioning once, no Pending in between");
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Provisioning)
    );
    assert_eq!(c.runs_of(RunAction::Provision).await.len(), 1);
}
