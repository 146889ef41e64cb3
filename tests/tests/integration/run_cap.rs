//! The cap on runs in flight (`--max-concurrent-runs`) against the in-memory API: a burst of tenants
//! gets at most the cap of Jobs at once; the other runs wait `Pending` with a message that says why,
//! and start oldest first as slots free up — with no click and no run lost.

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use sentry_tenants::controller::job;
use sentry_tenants::crd::{ProvisioningPolicy, RunAction, RunPhase};
use sentry_tenants_tests::Cluster;

async fn unfinished_jobs(c: &Cluster) -> Vec<String> {
    let jobs: Vec<Job> = c.jobs().list(&Default::default()).await.unwrap().items;
    let mut names: Vec<String> = jobs
        .iter()
        .filter(|j| !job::finished(j))
        .map(|j| j.name_any())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_burst_of_tenants_never_has_more_runs_in_flight_than_the_cap() {
    let c = Cluster::with_max_concurrent_runs(2).await;
    let tenants = ["t1", "t2", "t3", "t4", "t5"];
    for t in tenants {
        c.create_tenant_with(t, ProvisioningPolicy::Automatic).await;
    }
    c.settle().await;
    let runs = c.runs_of(RunAction::Provision).await;
    assert_eq!(runs.len(), 5, "every tenant has its run");
    assert_eq!(
        unfinished_jobs(&c).await,
        ["t1-provision-10", "t2-provision-10"],
        "the oldest (then first by name) take the two slots"
    );
    for run in runs
        .iter()
        .filter(|r| !["t1", "t2"].contains(&r.spec.tenant.as_str()))
    {
        let status = run.status.as_ref().expect("a status says why it waits");
        assert_eq!(status.phase, Some(RunPhase::Pending));
        assert!(
            status
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("queued: 2 runs are in flight")),
            "{status:?}"
        );
    }

    // Each finished run frees a slot for the oldest waiting one; never more than two at once.
    let mut started = vec!["t1".to_owned(), "t2".to_owned()];
    while let Some(oldest) = started.first().cloned() {
        started.remove(0);
        c.job_succeeded(&format!("{oldest}-provision-10")).await;
        c.settle().await;
        let in_flight = unfinished_jobs(&c).await;
        assert!(in_flight.len() <= 2, "{in_flight:?}");
        for name in in_flight {
            let tenant = name.trim_end_matches("-provision-10").to_owned();
            if !started.contains(&tenant) {
                started.push(tenant);
            }
        }
    }
    let jobs: Vec<Job> = c.jobs().list(&Default::default()).await.unwrap().items;
    assert_eq!(jobs.len(), 5, "every run got its Job in the end: {jobs:?}");
    assert_eq!(c.log.creates_of("jobs"), 5, "one Job per run");
}

/// A run deleted before it finished gives its slot back at once: when its finalizer goes (its Job and
/// the Job's pods gone), the oldest waiting run is woken, not left to the 30 s poll.
#[tokio::test]
async fn a_run_deleted_before_it_finished_wakes_the_oldest_waiting_run() {
    let c = Cluster::with_max_concurrent_runs(1).await;
    let mut woken = c
        .ctx
        .slots
        .take_wake_ups()
        .expect("the in-memory cluster leaves the wake-ups to the test");
    let mut names = move || -> Vec<String> {
        std::iter::from_fn(|| woken.try_recv().ok())
            .map(|r| r.name)
            .collect()
    };
    for t in ["t1", "t2"] {
        c.create_tenant_with(t, ProvisioningPolicy::Automatic).await;
    }
    c.settle().await;
    assert_eq!(unfinished_jobs(&c).await, ["t1-provision-10"]);
    names();

    c.hold_job_deletion_for_its_pods("t1-provision-10").await;
    c.runjobs()
        .delete("t1-provision-10", &Default::default())
        .await
        .unwrap();
    c.reconcile_run("t1-provision-10").await;
    assert!(
        c.run("t1-provision-10").await.is_some(),
        "its pod is not gone yet"
    );
    assert_eq!(names(), Vec::<String>::new(), "the slot is not free yet");

    c.job_pods_gone("t1-provision-10").await;
    c.sync_stores().await;
    c.reconcile_run("t1-provision-10").await;
    assert!(c.run("t1-provision-10").await.is_none());
    assert_eq!(names(), ["t2-provision-10"]);
}
