//! Write accounting: a no-op reconcile writes nothing, and a run's whole life costs a bounded number of
//! writes. Counted by the recording layer around the client, so every request is seen.

use std::collections::BTreeMap;

use jiff::SignedDuration;
use sentry_tenants::controller::runjob;
use sentry_tenants::crd::{RunAction, TenantPhase};
use sentry_tenants_tests::{Cluster, PROVISION_RUN_WRITES};

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

    let writes = c.log.writes();
    let summary: Vec<String> = writes
        .iter()
        .map(|w| format!("{} {}", w.method, w.path))
        .collect();
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for w in &writes {
        *kinds.entry(w.kind()).or_default() += 1;
    }
    let expected: BTreeMap<String, usize> = PROVISION_RUN_WRITES
        .iter()
        .map(|(kind, n)| ((*kind).to_owned(), *n))
        .collect();
    assert_eq!(kinds, expected, "{summary:#?}");
    assert_eq!(writes.len(), 10, "{summary:#?}");
    assert_eq!(c.log.creates_of("jobs"), 1);
    let events = c.log.events().len();
    assert!(
        events <= 5,
        "JobCreated, RunSucceeded ×2, RunCleanedUp (+ at most one more): {events}"
    );
}

/// The watch can lag the reconciler's own write: a reconcile of the run as it was before its status
/// was patched computes the same status again and must not send it a second time (the real control
/// plane's write budget test saw two identical Running patches).
#[tokio::test]
async fn a_reconcile_from_a_copy_older_than_its_own_status_write_sends_nothing_again() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, RUN).await;
    c.settle().await;
    c.job_running(RUN).await;
    c.sync_stores().await;
    let before_the_write = std::sync::Arc::new(c.runjobs().get(RUN).await.unwrap());
    let status_writes = |c: &Cluster| {
        c.log
            .count(|r| r.kind() == "patch runjobs/status" && r.path.contains(RUN))
    };
    let ctx = std::sync::Arc::clone(&c.ctx);
    c.log.clear();
    runjob::reconcile(
        std::sync::Arc::clone(&before_the_write),
        std::sync::Arc::clone(&ctx),
    )
    .await
    .unwrap();
    assert_eq!(status_writes(&c), 1, "Running written");
    runjob::reconcile(before_the_write, ctx).await.unwrap();
    assert_eq!(status_writes(&c), 1, "not again from the same old copy");
    // Once the cache has the write, the next change is sent as usual.
    c.job_succeeded(RUN).await;
    c.settle().await;
    assert_eq!(status_writes(&c), 2, "Succeeded written");
}
