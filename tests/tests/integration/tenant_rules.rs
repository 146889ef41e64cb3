//! Tenant reconciler rules against the in-memory API.

use http::Method;
use jiff::SignedDuration;
use kube::ResourceExt;
use sentry_tenants::crd::HISTORY_LIMIT;
use sentry_tenants::crd::{RunAction, TenantPhase};
use sentry_tenants_tests::Cluster;

fn condition<'a>(
    t: &'a sentry_tenants::crd::Tenant,
    type_: &str,
) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    t.status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_}"))
}

async fn active_tenant(name: &str) -> Cluster {
    let c = Cluster::new().await;
    c.create_tenant(name).await;
    c.report_provisioned(name).await;
    c.settle().await;
    assert_eq!(c.tenant(name).await.phase(), Some(TenantPhase::Active));
    c
}

fn runs_of(runs: &[sentry_tenants::crd::RunJob], action: RunAction) -> Vec<String> {
    runs.iter()
        .filter(|r| r.spec.action == action)
        .map(|r| r.name_any())
        .collect()
}

#[tokio::test]
async fn new_tenant_is_pending_with_ready_false_and_observed_generation() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    let t = c.tenant("acme").await;
    assert_eq!(t.phase(), Some(TenantPhase::Pending));
    let ready = condition(&t, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Pending")
    );
    assert_eq!(ready.observed_generation, t.metadata.generation);
    assert_eq!(condition(&t, "Provisioned").status, "False");
    assert_eq!(t.status.unwrap().observed_generation, t.metadata.generation);
}

#[tokio::test]
async fn suspending_a_provisioned_tenant_creates_one_suspend_run_once() {
    let c = active_tenant("acme").await;
    c.set_suspended("acme", true).await;
    for _ in 0..3 {
        c.settle().await;
    }
    let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
    assert_eq!(runs_of(&runs, RunAction::Suspend).len(), 1, "{runs:?}");
    assert_eq!(c.log.creates_of("runjobs"), 1);
    let t = c.tenant("acme").await;
    assert_eq!(t.phase(), Some(TenantPhase::Suspended));
    let locked = condition(&t, "AccessLocked");
    assert_eq!(
        (locked.status.as_str(), locked.reason.as_str()),
        ("False", "Locking")
    );

    // The run finishes and the provisioner reports the lock: nothing more is created, even after cleanup.
    let name = &runs_of(&runs, RunAction::Suspend)[0];
    c.job_succeeded(name).await;
    c.report_access_locked("acme", true).await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(301));
    c.settle().await;
    assert!(c.run(name).await.is_none(), "cleaned up");
    assert_eq!(c.log.creates_of("runjobs"), 1);
    assert_eq!(
        condition(&c.tenant("acme").await, "AccessLocked").reason,
        "LoginsLocked"
    );
}

/// An outage never makes the reconciler give up on a lock: each failed Suspend run is followed, after
/// a delay that grows to 5 minutes, by another, for as long as it takes (here seven attempts — more
/// than the three there used to be), and the `AccessLocked` condition says meanwhile that locking
/// failed and when the next attempt starts.
#[tokio::test]
async fn a_failed_suspend_run_is_retried_with_growing_delays_until_it_succeeds() {
    let c = active_tenant("acme").await;
    c.set_suspended("acme", true).await;
    let mut failed = Vec::new();
    for attempt in 1..=6 {
        c.settle().await;
        let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
        let in_flight: Vec<_> = runs
            .iter()
            .filter(|r| r.spec.action == RunAction::Suspend && r.is_in_flight())
            .collect();
        assert_eq!(in_flight.len(), 1, "attempt {attempt}: one at a time");
        let name = in_flight[0].name_any();
        assert!(!failed.contains(&name), "a fresh name per attempt");
        c.job_failed(&name, "BackoffLimitExceeded", "clickhouse unreachable")
            .await;
        failed.push(name.clone());
        c.settle().await;
        let waiting = condition(&c.tenant("acme").await, "AccessLocked").clone();
        assert_eq!(
            (waiting.status.as_str(), waiting.reason.as_str()),
            ("False", "LockFailed")
        );
        let next = format!("Attempt {} starts at", attempt + 1);
        assert!(
            waiting
                .message
                .contains(&format!("Suspend run {name} failed"))
                && waiting.message.contains(&next),
            "{}",
            waiting.message
        );
        assert_eq!(
            c.log.creates_of("runjobs"),
            attempt,
            "the next attempt waits for its time"
        );
        // Past the longest delay (5 minutes): the retry is due; the failed run is cleaned up into
        // the history, where it still counts.
        c.clock.advance(SignedDuration::from_secs(301));
    }
    c.settle().await;
    assert_eq!(c.log.creates_of("runjobs"), 7, "{failed:?}");
    let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
    let last = runs
        .iter()
        .find(|r| r.spec.action == RunAction::Suspend && r.is_in_flight())
        .expect("the seventh attempt")
        .name_any();
    c.job_succeeded(&last).await;
    c.report_access_locked("acme", true).await;
    c.settle().await;
    assert_eq!(
        condition(&c.tenant("acme").await, "AccessLocked").reason,
        "LoginsLocked"
    );
    assert_eq!(c.log.creates_of("runjobs"), 7);
}

#[tokio::test]
async fn resuming_returns_straight_to_active_and_creates_a_resume_run() {
    let c = active_tenant("acme").await;
    c.set_suspended("acme", true).await;
    c.settle().await;
    let suspend = runs_of(
        &c.runjobs().list(&Default::default()).await.unwrap().items,
        RunAction::Suspend,
    )
    .remove(0);
    c.job_succeeded(&suspend).await;
    c.report_access_locked("acme", true).await;
    c.settle().await;

    c.set_suspended("acme", false).await;
    c.settle().await;
    let t = c.tenant("acme").await;
    assert_eq!(
        t.phase(),
        Some(TenantPhase::Active),
        "not Provisioning, not Pending"
    );
    assert_eq!(condition(&t, "Ready").status, "True");
    let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
    assert_eq!(runs_of(&runs, RunAction::Resume).len(), 1);
}

#[tokio::test]
async fn unprovisioned_tenant_gets_no_lock_run_when_suspended() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.set_suspended("acme", true).await;
    c.settle().await;
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Suspended));
    assert_eq!(c.log.creates_of("runjobs"), 0);
}

#[tokio::test]
async fn ready_transition_time_moves_only_when_it_flips() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    let first = condition(&c.tenant("acme").await, "Ready")
        .last_transition_time
        .clone();
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    c.clock.advance(SignedDuration::from_secs(10));
    c.settle().await;
    let t = c.tenant("acme").await;
    assert_eq!(t.phase(), Some(TenantPhase::Provisioning));
    assert_eq!(
        condition(&t, "Ready").last_transition_time,
        first,
        "still False: time unchanged"
    );
    c.report_provisioned("acme").await;
    c.clock.advance(SignedDuration::from_secs(10));
    c.settle().await;
    let ready = condition(&c.tenant("acme").await, "Ready").clone();
    assert_eq!(ready.status, "True");
    assert_eq!(
        ready.last_transition_time.0,
        first.0 + SignedDuration::from_secs(20)
    );
}

#[tokio::test]
async fn history_is_bounded_newest_first_and_survives_cleanup() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let total = HISTORY_LIMIT + 3;
    for i in 1..=total {
        let name = format!("acme-provision-{i}");
        c.create_run("acme", RunAction::Provision, &name).await;
        c.settle().await;
        c.job_failed(&name, "BackoffLimitExceeded", &format!("attempt {i}"))
            .await;
        c.settle().await;
        c.clock.advance(SignedDuration::from_secs(301));
        c.settle().await;
        assert!(c.run(&name).await.is_none());
    }
    let t = c.tenant("acme").await;
    let history = t.history();
    assert_eq!(history.len(), HISTORY_LIMIT);
    assert_eq!(history[0].name, format!("acme-provision-{total}"));
    assert!(history[0].message.contains(&format!("attempt {total}")));
    // With every run cleaned up the tenant still knows the last attempt failed.
    assert_eq!(t.phase(), Some(TenantPhase::Failed));
    assert!(
        condition(&t, "Ready")
            .message
            .contains(&format!("acme-provision-{total} failed"))
    );
}

/// A suspended tenant whose Suspend run succeeded and was reported.
async fn locked_tenant(name: &str) -> Cluster {
    let c = active_tenant(name).await;
    let suspend = set_suspended_and_settle(&c, name, true).await;
    c.job_succeeded(&suspend).await;
    c.report_access_locked(name, true).await;
    c.settle().await;
    assert_eq!(
        condition(&c.tenant(name).await, "AccessLocked").reason,
        "LoginsLocked"
    );
    c
}

/// A locked tenant just resumed, with the name of its Resume run in flight.
async fn resuming_tenant(name: &str) -> (Cluster, String) {
    let c = locked_tenant(name).await;
    let resume = set_suspended_and_settle(&c, name, false).await;
    (c, resume)
}

/// Sets `spec.suspended`, lets the reconcilers settle, and returns the lock run they started.
async fn set_suspended_and_settle(c: &Cluster, name: &str, suspended: bool) -> String {
    c.set_suspended(name, suspended).await;
    c.settle().await;
    let action = if suspended {
        RunAction::Suspend
    } else {
        RunAction::Resume
    };
    in_flight(c, action)
        .await
        .unwrap_or_else(|| panic!("a {action:?} run"))
}

async fn in_flight(c: &Cluster, action: RunAction) -> Option<String> {
    c.runjobs()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|r| r.spec.action == action && r.is_in_flight())
        .map(|r| r.name_any())
}

/// A Resume run that failed may have unlocked ClickHouse before it failed (its pod lost between the
/// statement and the status write), so `accessLocked: true` no longer proves the lock: suspending again
/// is enforced by a Suspend run, and until it succeeds the tenant does not say its logins are locked.
#[tokio::test]
async fn after_a_failed_resume_suspending_again_is_enforced_by_a_run() {
    let (c, resume) = resuming_tenant("acme").await;
    c.job_failed(&resume, "BackoffLimitExceeded", "pod lost after the unlock")
        .await;
    c.set_suspended("acme", true).await;
    c.settle().await;

    let suspend = in_flight(&c, RunAction::Suspend)
        .await
        .expect("a Suspend run although the status still says locked");
    let t = c.tenant("acme").await;
    assert!(t.access_locked(), "the last report is kept as it was");
    assert_eq!(condition(&t, "AccessLocked").reason, "Locking");

    c.job_succeeded(&suspend).await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(301));
    c.settle().await;
    assert_eq!(
        condition(&c.tenant("acme").await, "AccessLocked").reason,
        "LoginsLocked"
    );
    assert_eq!(c.log.creates_of("runjobs"), 3, "Suspend, Resume, Suspend");
}

/// While a Resume run is in flight it may unlock ClickHouse at any moment: a suspension clicked
/// meanwhile is not shown as locked on the strength of the report from before the Resume, and once the
/// Resume has reported, a Suspend run follows.
#[tokio::test]
async fn a_suspension_during_a_resume_run_is_not_shown_locked_until_enforced() {
    let (c, resume) = resuming_tenant("acme").await;
    c.set_suspended("acme", true).await;
    c.settle().await;
    assert_eq!(
        condition(&c.tenant("acme").await, "AccessLocked").reason,
        "Locking"
    );
    assert_eq!(
        in_flight(&c, RunAction::Suspend).await,
        None,
        "one at a time"
    );

    c.job_succeeded(&resume).await;
    c.report_access_locked("acme", false).await;
    c.settle().await;
    assert!(in_flight(&c, RunAction::Suspend).await.is_some());
    assert_eq!(
        condition(&c.tenant("acme").await, "AccessLocked").reason,
        "Locking"
    );
}

/// The caches keep a tenant's history without its log tails (`slim_tenant`); recording a run from such a
/// copy adds its record in front and drops only the oldest, leaving every other record's log tail as it
/// was in the API.
#[tokio::test]
async fn recording_a_run_keeps_the_other_records_log_tails() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let earlier: Vec<serde_json::Value> = (0..HISTORY_LIMIT)
        .map(|i| {
            serde_json::json!({
                "name": format!("acme-suspend-{}", 90 - i), "uid": format!("uid-{i}"),
                "action": "Suspend", "phase": "Failed", "message": "earlier",
                "finishedAt": "2026-11-30T11:00:00Z", "logTail": format!("log of run {i}\n"),
            })
        })
        .collect();
    let patch = serde_json::json!({"status": {"history": earlier}});
    c.tenants()
        .patch_status(
            "acme",
            &Default::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();

    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    c.settle().await;
    c.job_succeeded("acme-provision-1").await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(301));
    c.settle().await;
    assert!(c.run("acme-provision-1").await.is_none(), "cleaned up");

    let history = c.tenant("acme").await.history().to_vec();
    assert_eq!(history.len(), HISTORY_LIMIT);
    assert_eq!(history[0].name, "acme-provision-1");
    for (i, record) in history[1..].iter().enumerate() {
        assert_eq!(
            record.uid,
            format!("uid-{i}"),
            "order kept, the oldest dropped"
        );
        // Only the newest record keeps a tail: the one it displaced gave its up, the others (written
        // before that rule) keep theirs until they roll off.
        let expected = (i > 0).then(|| format!("log of run {i}\n"));
        assert_eq!(record.log_tail, expected, "{}'s log tail", record.name);
    }
}

/// A full history of the longest outcomes — 4 KiB termination messages, 4 KiB log tails, the most a
/// pod gives — keeps the Tenant (managedFields, conditions and all) under 16 KiB as stored: messages
/// are cut to 256 bytes, and only the newest record keeps a log tail (its last 2 KiB).
#[tokio::test]
async fn a_tenant_with_a_full_history_of_the_longest_outcomes_stays_under_16_kib() {
    let c = active_tenant("acme").await;
    for i in 0..HISTORY_LIMIT + 5 {
        c.sync_stores().await;
        let cached = c
            .ctx
            .stores
            .tenants
            .get(&kube::runtime::reflector::ObjectRef::new("acme").within(sentry_tenants_tests::NS))
            .expect("cached");
        let mut run: sentry_tenants::crd::RunJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
            "metadata": {"name": format!("acme-setlimits-{}", 1000 + i), "namespace": sentry_tenants_tests::NS,
                         "uid": format!("0f6e7a52-5d1c-4a8e-9d3b-{:012}", i),
                         "labels": {"sentry.io/generation": "1234567"}},
            "spec": {"tenant": "acme", "action": "SetLimits"},
        }))
        .unwrap();
        run.status = Some(sentry_tenants::crd::RunJobStatus {
            phase: Some(sentry_tenants::crd::RunPhase::Failed),
            message: Some("é".repeat(2048)),
            log_tail: Some(format!("{}\nthe last line", "x".repeat(4096))),
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                c.clock.now(),
            )),
            completion_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                c.clock.now(),
            )),
            ..Default::default()
        });
        sentry_tenants::controller::runjob::record_in_history(&cached, &run, &c.ctx)
            .await
            .unwrap();
    }
    let stored = c.tenant("acme").await;
    let history = stored.history();
    assert_eq!(history.len(), HISTORY_LIMIT);
    let bytes = serde_json::to_vec(&stored).unwrap().len();
    assert!(bytes < 16 * 1024, "{bytes} bytes");
    assert!(
        history[0]
            .log_tail
            .as_deref()
            .is_some_and(|t| t.ends_with("the last line") && t.len() <= 2048)
    );
    assert!(history[1..].iter().all(|h| h.log_tail.is_none()));
    assert!(
        history
            .iter()
            .all(|h| h.message.len() <= 256 && h.message.ends_with('…'))
    );
}

/// Rule 4's run already exists (made by another replica, or by a reconcile that saw a stale cache):
/// that is the outcome wanted, so the same reconcile goes on to write the tenant's status.
#[tokio::test]
async fn a_lock_run_that_already_exists_does_not_stop_the_status_write() {
    let c = active_tenant("acme").await;
    c.set_suspended("acme", true).await;
    c.intercept.answer_status(
        Method::POST,
        "/runjobs",
        409,
        "AlreadyExists",
        "runjobs.sentry.io \"acme-suspend-20\" already exists",
    );
    c.reconcile_tenant("acme").await;
    let t = c.tenant("acme").await;
    assert_eq!(
        t.status.as_ref().unwrap().observed_generation,
        t.metadata.generation
    );
    assert_eq!(condition(&t, "AccessLocked").reason, "Locking");
    assert_eq!(c.log.creates_of("runjobs"), 0);
}

/// Any other refusal is the reconcile's error (retried with backoff by the controller), and nothing
/// announces a run that was not made.
#[tokio::test]
async fn a_lock_run_the_api_refuses_fails_the_reconcile() {
    let c = active_tenant("acme").await;
    c.set_suspended("acme", true).await;
    c.intercept.refuse(Method::POST, "/runjobs");
    let result = c.try_reconcile_tenant("acme").await;
    assert!(result.is_err(), "a refused create must fail the reconcile");
    let announced = c.log.events().iter().any(|e| e["reason"] == "RunCreated");
    assert!(!announced, "{:?}", c.log.events());
    // Once the API answers again, the next reconcile makes the run.
    c.intercept.clear();
    c.reconcile_tenant("acme").await;
    assert_eq!(c.log.creates_of("runjobs"), 1);
}
