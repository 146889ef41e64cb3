//! The Tenant rules, function by function.

use super::history::*;
use super::next_run::*;
use super::secret_loss;
use super::status::*;
use super::*;
use crate::controller::attempts::next_attempt;
use crate::controller::attempts::retry_delay;
use crate::crd::{RUNJOB_FINALIZER, RunPhase, RunRecord, TenantPhase, TenantStatus};
use TenantPhase::*;

fn runs(in_flight: bool, latest_failed: bool) -> ProvisionRuns {
    ProvisionRuns {
        in_flight,
        latest_failed,
    }
}

/// Every combination of the three inputs, with the phase the rule list demands.
#[test]
fn phase_table_covers_every_combination() {
    let db = Some("tenant_acme");
    let cases = [
        // suspended, database, in_flight, latest_failed => phase
        (false, None, false, false, Pending),
        (false, None, false, true, Failed),
        (false, None, true, false, Provisioning),
        (false, None, true, true, Provisioning),
        (false, db, false, false, Active),
        (false, db, false, true, Active),
        (false, db, true, false, Active),
        (false, db, true, true, Active),
        (true, None, false, false, Suspended),
        (true, None, false, true, Suspended),
        (true, None, true, false, Suspended),
        (true, None, true, true, Suspended),
        (true, db, false, false, Suspended),
        (true, db, false, true, Suspended),
        (true, db, true, false, Suspended),
        (true, db, true, true, Suspended),
    ];
    for (suspended, database, in_flight, failed, want) in cases {
        assert_eq!(
            phase(suspended, database, runs(in_flight, failed)),
            want,
            "suspended={suspended} db={database:?} in_flight={in_flight} failed={failed}"
        );
    }
}

#[test]
fn never_active_without_a_database_name() {
    for db in [None, Some("")] {
        for in_flight in [false, true] {
            for failed in [false, true] {
                assert_ne!(phase(false, db, runs(in_flight, failed)), Active);
            }
        }
    }
}

#[test]
fn unsuspending_a_provisioned_tenant_returns_straight_to_active() {
    let db = Some("tenant_acme");
    assert_eq!(phase(true, db, runs(false, false)), Suspended);
    assert_eq!(phase(false, db, runs(false, false)), Active);
    // Even when the history's latest provision attempt failed, the database decides.
    assert_eq!(phase(false, db, runs(false, true)), Active);
}

fn record(name: &str, phase: RunPhase, finished_at: &str) -> RunRecord {
    let action = match name.rsplit('-').nth(1) {
        Some("suspend") => RunAction::Suspend,
        Some("resume") => RunAction::Resume,
        Some("deliver") => RunAction::Deliver,
        Some("rotate") => RunAction::Rotate,
        _ => RunAction::Provision,
    };
    RunRecord {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        action,
        phase,
        message: String::new(),
        started_at: None,
        finished_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            finished_at.parse().unwrap(),
        ),
        log_tail: None,
        generation: Some(1),
    }
}

#[test]
fn a_run_serial_is_the_number_its_name_ends_with() {
    assert_eq!(serial("acme-suspend-41"), 41);
    assert_eq!(serial("acme-provision-1"), 1);
    assert_eq!(serial("made-by-hand"), 0);
}

/// Kubernetes times have whole seconds: of two runs finished in the same second, the later attempt
/// (higher serial) decides, wherever the two are listed.
#[test]
fn runs_finished_in_the_same_second_are_ordered_by_serial() {
    let at = "2026-12-01T12:00:00Z";
    for history in [
        [
            record("acme-provision-2", RunPhase::Succeeded, at),
            record("acme-provision-1", RunPhase::Failed, at),
        ],
        [
            record("acme-provision-1", RunPhase::Failed, at),
            record("acme-provision-2", RunPhase::Succeeded, at),
        ],
    ] {
        assert!(!provision_runs(&[], &history).latest_failed, "{history:?}");
    }
    let history = [
        record("acme-provision-3", RunPhase::Failed, at),
        record("acme-provision-2", RunPhase::Succeeded, at),
    ];
    assert!(provision_runs(&[], &history).latest_failed);
    // A later second beats a higher serial.
    let history = [
        record("acme-provision-1", RunPhase::Failed, "2026-12-01T12:00:01Z"),
        record("acme-provision-2", RunPhase::Succeeded, at),
    ];
    assert!(provision_runs(&[], &history).latest_failed);
}

/// A provisioned tenant at generation 1 whose provisioner last reported `access_locked`.
fn provisioned(suspended: bool, access_locked: bool, history: Vec<RunRecord>) -> Tenant {
    let mut tenant = Tenant::new(
        "acme",
        crate::crd::TenantSpec {
            suspended,
            ..Default::default()
        },
    );
    tenant.metadata.namespace = Some("tenants".into());
    tenant.metadata.uid = Some("uid-acme".into());
    tenant.metadata.generation = Some(1);
    tenant.status = Some(TenantStatus {
        click_house_database_name: Some("tenant_acme".into()),
        access_locked: Some(access_locked),
        history,
        ..Default::default()
    });
    tenant
}

/// Only Suspend/Resume runs can leave the lock unknown: a failed Provision retry after the lock
/// was reported says nothing about it.
#[test]
fn a_failed_provision_run_does_not_make_the_lock_unknown() {
    let at = "2026-12-01T12:00:00Z";
    let history = vec![
        record("acme-provision-2", RunPhase::Failed, "2026-12-01T12:00:05Z"),
        record("acme-resume-10", RunPhase::Succeeded, at),
    ];
    let tenant = provisioned(false, false, history);
    assert_eq!(enforced_lock(&tenant, &[]), Some(false));
    assert_eq!(
        lock_run_needed(&tenant, &[], at.parse().unwrap()),
        (RunAction::Resume, NextRun::Idle)
    );
}

/// 15 s doubling per failure, capped at 5 minutes, the upper half jittered by the tenant's uid:
/// the same retry gets the same time on every reconcile, and tenants that failed together come
/// back spread out.
#[test]
fn the_retry_delay_doubles_to_five_minutes_and_is_the_same_on_every_reconcile() {
    let tenant = provisioned(false, false, vec![]);
    for (failures, step) in [
        (1, 15),
        (2, 30),
        (3, 60),
        (4, 120),
        (5, 240),
        (6, 300),
        (40, 300),
    ] {
        let delay = retry_delay(&tenant, RunAction::Provision, failures).as_secs_f64();
        let step = step as f64;
        assert!(
            (step / 2.0..=step).contains(&delay),
            "failure {failures}: {delay} s is outside [{}, {step}]",
            step / 2.0
        );
        assert_eq!(
            retry_delay(&tenant, RunAction::Provision, failures).as_secs_f64(),
            delay
        );
    }
    let spread: std::collections::BTreeSet<i64> = (0..100)
        .map(|i| {
            let mut t = tenant.clone();
            t.metadata.uid = Some(format!("uid-{i}"));
            retry_delay(&t, RunAction::Provision, 6).as_millis() as i64 / 1000
        })
        .collect();
    assert!(
        spread.len() > 50,
        "100 tenants retry in only {} distinct seconds",
        spread.len()
    );
}

/// Twelve failed attempts in a row (more than the old limit of four, and more than the ten serials
/// a generation once had): the next one is still scheduled, then started under a fresh name.
#[test]
fn attempts_never_run_out() {
    let history: Vec<RunRecord> = (0..12)
        .map(|i| {
            let at = format!("2026-12-01T12:{:02}:00Z", i * 4);
            record(&format!("acme-provision-{}", 10 + i), RunPhase::Failed, &at)
        })
        .collect();
    let tenant = provisioned(false, false, history);
    let last: Timestamp = "2026-12-01T12:44:00Z".parse().unwrap();
    let next = next_attempt(&tenant, &[], RunAction::Provision, last);
    let NextRun::RetryAt { attempt, at } = next else {
        panic!("{next:?}")
    };
    assert_eq!(attempt, 13);
    let wait = at.duration_since(last).as_secs();
    assert!((150..=300).contains(&wait), "{wait} s");
    assert_eq!(
        next_attempt(&tenant, &[], RunAction::Provision, at),
        NextRun::Start("acme-provision-22".into())
    );
}

/// A run being cleaned up is in the history and still live (its finalizer not yet removed) for a
/// moment: it is one attempt, not two, so the next attempt's number and time do not move.
#[test]
fn a_run_recorded_while_it_is_still_live_counts_once() {
    let at = "2026-12-01T12:00:00Z";
    let tenant = provisioned(
        false,
        false,
        vec![record("acme-provision-10", RunPhase::Failed, at)],
    );
    let mut live = new_run_job(&tenant, "acme-provision-10", RunAction::Provision);
    live.metadata.uid = Some("uid-acme-provision-10".into());
    live.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        at.parse().unwrap(),
    ));
    let now: Timestamp = "2026-12-01T12:00:01Z".parse().unwrap();
    let alone = next_attempt(&tenant, &[], RunAction::Provision, now);
    assert!(
        matches!(alone, NextRun::RetryAt { attempt: 2, .. }),
        "{alone:?}"
    );
    assert_eq!(
        next_attempt(&tenant, &[Arc::new(live)], RunAction::Provision, now),
        alone
    );
}

/// A run named like one of ours but without our generation label (made by hand with `kubectl`, or
/// before the label existed) is not an attempt: it delays nothing, and its serial is skipped.
#[test]
fn runs_without_the_generation_label_are_not_attempts() {
    let mut foreign = record(
        "acme-provision-10",
        RunPhase::Failed,
        "2026-12-01T12:00:00Z",
    );
    foreign.generation = None;
    let tenant = provisioned(false, false, vec![foreign]);
    let now = "2026-12-01T12:00:01Z".parse().unwrap();
    assert_eq!(
        next_attempt(&tenant, &[], RunAction::Provision, now),
        NextRun::Start("acme-provision-11".into())
    );
}

#[test]
fn a_failed_provision_is_described_with_its_run_and_message() {
    let at = "2026-12-01T12:00:00Z";
    let mut failed = record("acme-provision-1", RunPhase::Failed, at);
    let idle = NextRun::Idle;
    assert_eq!(
        failed_message(&[], std::slice::from_ref(&failed), &idle),
        "Provision run acme-provision-1 failed. Fix the cause, then click Retry"
    );
    failed.message = "ClickHouse refused the login".into();
    assert_eq!(
        failed_message(&[], std::slice::from_ref(&failed), &idle),
        "Provision run acme-provision-1 failed: ClickHouse refused the login. Fix the cause, then click Retry"
    );
    assert_eq!(
        failed_message(&[], &[], &idle),
        "Provision run failed. Fix the cause, then click Retry"
    );
    let retry = NextRun::RetryAt {
        attempt: 2,
        at: "2026-12-01T12:00:15Z".parse().unwrap(),
    };
    assert_eq!(
        failed_message(&[], &[failed], &retry),
        "Provision run acme-provision-1 failed: ClickHouse refused the login. Attempt 2 starts at 2026-12-01T12:00:15Z (retried until it succeeds)"
    );
}

/// Owned by its tenant (garbage-collected with it), finalized by the RunJob controller from birth,
/// and labelled so `kubectl get runjobs -l sentry.io/tenant=acme` finds a tenant's runs; in its
/// tenant's namespace (the run a create answered AlreadyExists for stands in for the stored one).
#[test]
fn a_new_run_is_owned_finalized_and_labelled() {
    let run = new_run_job(
        &provisioned(true, false, vec![]),
        "acme-suspend-10",
        RunAction::Suspend,
    );
    assert_eq!(
        run.metadata.namespace.as_deref(),
        Some("tenants"),
        "its tenant's namespace"
    );
    let owner = &run.metadata.owner_references.as_deref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Tenant", "acme", "uid-acme")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(
        run.metadata.finalizers,
        Some(vec![RUNJOB_FINALIZER.to_owned()])
    );
    let labels: Vec<(&str, &str)> = run
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("app.kubernetes.io/component", "run"),
            ("app.kubernetes.io/instance", "acme"),
            ("app.kubernetes.io/managed-by", "sentry-tenants"),
            ("app.kubernetes.io/name", "sentry-tenants"),
            ("app.kubernetes.io/part-of", "sentry-tenants"),
            ("app.kubernetes.io/version", env!("CARGO_PKG_VERSION")),
            ("sentry.io/action", "suspend"),
            ("sentry.io/generation", "1"),
            ("sentry.io/tenant", "acme"),
            ("sentry.io/tenant-uid", "uid-acme"),
        ]
    );
    assert_eq!(
        (run.spec.tenant.as_str(), run.spec.action),
        ("acme", RunAction::Suspend)
    );
}

/// The plan takes every rule in turn: a provisioned tenant out of step with both its suspension and
/// its limits starts a Suspend and a SetLimits run at once, this generation's first attempts.
#[test]
fn a_plan_starts_each_run_the_rules_ask_for_in_rule_order() {
    let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
    let mut tenant = provisioned(true, false, Vec::new());
    tenant.spec.limits = Some(crate::crd::TenantLimits {
        max_concurrent_queries: Some(4),
        ..Default::default()
    });
    assert_eq!(
        runs_needed(&tenant, &[], &Observed::default(), now),
        RunPlan {
            start: vec![
                ("acme-suspend-10".to_owned(), RunAction::Suspend),
                ("acme-setlimits-10".to_owned(), RunAction::SetLimits),
            ],
            wake_at: None,
        }
    );
    // In step with both: nothing to start and nothing to wake for.
    let in_step = provisioned(false, false, Vec::new());
    assert_eq!(
        runs_needed(&in_step, &[], &Observed::default(), now),
        RunPlan::default()
    );
}

/// A Manual tenant waits for a click; an Automatic one gets its Provision run; after a failed one,
/// the plan starts nothing and wakes for the retry.
#[test]
fn a_plan_provisions_an_automatic_tenant_and_wakes_for_its_retry() {
    let now: Timestamp = "2026-12-01T12:00:00Z".parse().unwrap();
    let mut tenant = provisioned(false, false, Vec::new());
    tenant.status = None;
    tenant.spec.provisioning = crate::crd::ProvisioningPolicy::Manual;
    assert_eq!(
        runs_needed(&tenant, &[], &Observed::default(), now),
        RunPlan::default()
    );

    tenant.spec.provisioning = crate::crd::ProvisioningPolicy::Automatic;
    let plan = runs_needed(&tenant, &[], &Observed::default(), now);
    assert_eq!(
        plan.start,
        [("acme-provision-10".to_owned(), RunAction::Provision)]
    );

    let failed = record(
        "acme-provision-10",
        RunPhase::Failed,
        "2026-12-01T12:00:00Z",
    );
    tenant.status = Some(TenantStatus {
        history: vec![failed],
        ..Default::default()
    });
    let plan = runs_needed(&tenant, &[], &Observed::default(), now);
    assert!(plan.start.is_empty(), "{plan:?}");
    let wake = plan.wake_at.expect("a retry to wake for");
    assert!(
        wake > now && wake <= now + jiff::SignedDuration::from_secs(30),
        "{wake}"
    );
}

// Rule 9: copies of the credentials.

use crate::crd::{CopyState, CopyStatus, CredentialsCopy, CredentialsSpec, CredentialsStatus};

const NOW: &str = "2026-12-01T12:00:00Z";

fn entry() -> CredentialsCopy {
    CredentialsCopy {
        namespace: "app".into(),
        secret_name: "acme-db".into(),
        labels: Default::default(),
        annotations: Default::default(),
    }
}

/// A provisioned tenant asking for `entry()`, whose credentials hash `h1`, with `copies` reported.
fn with_copies(copies: Vec<CopyStatus>, history: Vec<RunRecord>) -> Tenant {
    let mut tenant = provisioned(false, false, history);
    tenant.spec.credentials = Some(CredentialsSpec {
        copies: vec![entry()],
        ..CredentialsSpec::default()
    });
    tenant.status.as_mut().unwrap().credentials = Some(CredentialsStatus {
        hash: "h1".into(),
        written_by: Some("uid-acme-provision-10".into()),
        rotated_at: None,
        secret_uid: None,
        copies,
    });
    tenant
}

/// The tenant's `status.credentials`, which the test tenant has.
fn credentials_report(tenant: &mut Tenant) -> &mut CredentialsStatus {
    let status = tenant.status.as_mut().expect("a status");
    status.credentials.as_mut().expect("a credentials report")
}

fn reported(state: CopyState, credentials_hash: Option<&str>) -> CopyStatus {
    CopyStatus {
        namespace: "app".into(),
        secret_name: "acme-db".into(),
        state,
        entry_hash: entry().entry_hash(),
        credentials_hash: credentials_hash.map(Into::into),
        message: format!("{state:?} said the provisioner"),
        at: jiff_time(NOW),
    }
}

fn jiff_time(at: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at.parse().unwrap())
}

fn consents(app: bool) -> Observed {
    Consents::from([("app".to_owned(), app)]).into()
}

fn condition(tenant: &Tenant, observed: &Observed) -> Option<(String, String, String)> {
    let status = desired_status(tenant, &[], observed, NOW.parse().unwrap());
    status
        .conditions
        .into_iter()
        .find(|c| c.type_ == DELIVERED)
        .map(|c| (c.status, c.reason, c.message))
}

/// Known answer: `printf '{"namespace":"app","secretName":"acme-db"}' | sha256sum` — the entry as
/// JSON, empty maps left out, so equal entries hash alike.
#[test]
fn an_entry_hashes_as_its_json() {
    assert_eq!(
        entry().entry_hash(),
        "5d77ed3eaa95e1d4939205a9999d4a39aa0e24a5caf1c7de8856dcdef03136bb"
    );
}

/// Without consent nothing starts, the condition names the namespace and the command that consents,
/// and the tenant looks again in a minute; with consent the Deliver run starts.
#[test]
fn a_copy_waits_for_consent_and_starts_nothing_meanwhile() {
    let now: Timestamp = NOW.parse().unwrap();
    let tenant = with_copies(vec![], vec![]);
    assert_eq!(copies::namespaces_to_ask(&tenant), ["app"]);
    let plan = runs_needed(&tenant, &[], &consents(false), now);
    assert_eq!(
        plan,
        RunPlan {
            start: vec![],
            wake_at: Some(now + CONSENT_RECHECK),
        }
    );
    assert_eq!(
        condition(&tenant, &consents(false)),
        Some((
            "False".into(),
            "AwaitingConsent".into(),
            "Waiting for consent to app/acme-db: the namespace's owner runs `sentry-tenants grant-credentials app -n tenants`".into()
        ))
    );
    let plan = runs_needed(&tenant, &[], &consents(true), now);
    assert_eq!(
        plan.start,
        [("acme-deliver-1".to_owned(), RunAction::Deliver)]
    );
    assert_eq!(plan.wake_at, None);
}

/// A report counts for the entry of its namespace *and* name: a copy delivered under another name in
/// the same namespace (or the same name elsewhere) leaves the entry out of date, and is itself to be
/// removed.
#[test]
fn a_copy_report_counts_for_its_namespace_and_name_together() {
    let elsewhere = |namespace: &str, name: &str| CopyStatus {
        namespace: namespace.into(),
        secret_name: name.into(),
        ..reported(CopyState::Delivered, Some("h1"))
    };
    for other in [elsewhere("app", "old-name"), elsewhere("other", "acme-db")] {
        let place = format!("{}/{}", other.namespace, other.secret_name);
        let tenant = with_copies(vec![other], vec![]);
        let stale: Vec<(String, String, bool)> = out_of_date(&tenant)
            .into_iter()
            .map(|c| (c.namespace, c.secret_name, c.removed))
            .collect();
        let (namespace, name) = place.split_once('/').unwrap();
        assert_eq!(
            stale,
            [
                ("app".to_owned(), "acme-db".to_owned(), false),
                (namespace.to_owned(), name.to_owned(), true),
            ],
            "{place}"
        );
    }
}

/// Only a tenant that is provisioned and not being deleted has namespaces to ask about and gets a
/// Deliver run; a run that writes no credentials (Suspend, SetLimits) in flight does not hold a
/// Deliver run back.
#[test]
fn consent_is_asked_for_provisioned_live_tenants_and_only_credential_writers_hold_a_delivery() {
    let now: Timestamp = NOW.parse().unwrap();
    let tenant = with_copies(vec![], vec![]);
    let mut deleting = tenant.clone();
    deleting.metadata.deletion_timestamp = Some(jiff_time(NOW));
    assert!(copies::namespaces_to_ask(&deleting).is_empty());
    let mut unprovisioned = tenant.clone();
    unprovisioned
        .status
        .as_mut()
        .unwrap()
        .click_house_database_name = None;
    assert!(copies::namespaces_to_ask(&unprovisioned).is_empty());
    for quiet in [&deleting, &unprovisioned] {
        assert_eq!(
            delivery_needed(quiet, &[], &consents(true).consents, now),
            NextRun::Idle
        );
    }

    for action in RunAction::ALL {
        let run = Arc::new(new_run_job(&tenant, "acme-other-1", action));
        let held = delivery_needed(&tenant, &[run], &consents(true).consents, now) == NextRun::Idle;
        let writer = matches!(
            action,
            RunAction::Provision | RunAction::Rotate | RunAction::Revoke | RunAction::Deliver
        );
        assert_eq!(held, writer, "{action:?} in flight");
    }
}

/// Delivered for this entry and these credentials: nothing to do, the condition says so. Written
/// for other credentials (a rotation since) or with another entry: out of date.
#[test]
fn a_copy_is_current_only_for_its_entry_and_the_credentials_on_file() {
    let now: Timestamp = NOW.parse().unwrap();
    let current = with_copies(vec![reported(CopyState::Delivered, Some("h1"))], vec![]);
    assert!(out_of_date(&current).is_empty());
    assert!(copies::namespaces_to_ask(&current).is_empty());
    assert_eq!(
        delivery_needed(&current, &[], &consents(true).consents, now),
        NextRun::Idle
    );
    assert_eq!(
        condition(&current, &Observed::default()),
        Some((
            "True".into(),
            "Delivered".into(),
            "Copies up to date: app/acme-db".into()
        ))
    );

    let rotated = with_copies(vec![reported(CopyState::Delivered, Some("h0"))], vec![]);
    assert_eq!(out_of_date(&rotated).len(), 1);
    let mut relabelled = current.clone();
    relabelled.spec.credentials.as_mut().unwrap().copies[0]
        .labels
        .insert("team".into(), crate::crd::LabelValue("a".into()));
    assert_eq!(out_of_date(&relabelled).len(), 1);
    for tenant in [rotated, relabelled] {
        assert!(matches!(
            delivery_needed(&tenant, &[], &consents(true).consents, now),
            NextRun::Start(_)
        ));
    }
}

/// A Secret of that name that is not ours needs a person: not retried by itself, said on the
/// condition with the provisioner's message.
#[test]
fn a_conflict_is_reported_and_not_retried() {
    let now: Timestamp = NOW.parse().unwrap();
    let tenant = with_copies(vec![reported(CopyState::Conflict, None)], vec![]);
    assert_eq!(
        delivery_needed(&tenant, &[], &consents(true).consents, now),
        NextRun::Idle
    );
    assert_eq!(
        condition(&tenant, &consents(true)),
        Some((
            "False".into(),
            "Conflict".into(),
            "Conflict said the provisioner".into()
        ))
    );
}

/// An entry the spec no longer names is deleted by a Deliver run, where the namespace consents.
#[test]
fn a_copy_no_longer_asked_for_is_removed() {
    let now: Timestamp = NOW.parse().unwrap();
    let mut tenant = with_copies(vec![reported(CopyState::Delivered, Some("h1"))], vec![]);
    tenant.spec.credentials = None;
    let stale = out_of_date(&tenant);
    assert_eq!(stale.len(), 1);
    assert!(stale[0].removed);
    assert!(matches!(
        delivery_needed(&tenant, &[], &consents(true).consents, now),
        NextRun::Start(_)
    ));
    // Gone from the report: no copy, no condition.
    credentials_report(&mut tenant).copies.clear();
    assert_eq!(condition(&tenant, &Observed::default()), None);
}

/// A run that writes copies finished, but the tenant does not show its report yet (the cache is
/// behind): wait for it rather than start another from the older picture.
#[test]
fn no_deliver_run_while_the_newest_report_is_not_seen() {
    let now: Timestamp = NOW.parse().unwrap();
    let done = record(
        "acme-deliver-3",
        RunPhase::Succeeded,
        "2026-12-01T11:59:00Z",
    );
    let behind = with_copies(vec![], vec![done]);
    assert_eq!(
        delivery_needed(&behind, &[], &consents(true).consents, now),
        NextRun::Idle
    );
    let mut seen = behind.clone();
    let report = credentials_report(&mut seen);
    report.written_by = Some("uid-acme-deliver-3".into());
    assert_eq!(
        delivery_needed(&seen, &[], &consents(true).consents, now),
        NextRun::Start("acme-deliver-4".into())
    );
}

/// A Rotate applied by hand beside a Deliver run, both finished in the same second (Kubernetes
/// times have whole seconds): the report of either is as new as can be told, and a copy out of date
/// afterwards still gets its Deliver run.
#[test]
fn a_report_of_a_run_finished_in_the_same_second_as_the_newest_is_not_behind() {
    let now: Timestamp = NOW.parse().unwrap();
    let at = "2026-12-01T11:59:00Z";
    let history = vec![
        record("acme-deliver-1", RunPhase::Succeeded, at),
        record("acme-rotate-1", RunPhase::Succeeded, at),
    ];
    for written_by in ["uid-acme-deliver-1", "uid-acme-rotate-1"] {
        let mut tenant = with_copies(vec![], history.clone());
        credentials_report(&mut tenant).written_by = Some(written_by.into());
        assert_eq!(
            delivery_needed(&tenant, &[], &consents(true).consents, now),
            NextRun::Start("acme-deliver-2".into()),
            "{written_by}"
        );
    }
    let earlier = record(
        "acme-deliver-1",
        RunPhase::Succeeded,
        "2026-12-01T11:58:59Z",
    );
    let mut behind = with_copies(vec![], vec![earlier, history[1].clone()]);
    credentials_report(&mut behind).written_by = Some("uid-acme-deliver-1".into());
    assert_eq!(
        delivery_needed(&behind, &[], &consents(true).consents, now),
        NextRun::Idle,
        "a second earlier is behind"
    );
}

/// Failed Deliver runs are retried after the usual backoff, counted since the last success; one
/// run that writes copies at a time.
#[test]
fn a_failed_deliver_run_is_retried_after_its_backoff_and_never_beside_another_writer() {
    let failed_at: Timestamp = "2026-12-01T11:59:58Z".parse().unwrap();
    let history = vec![
        record("acme-deliver-2", RunPhase::Failed, "2026-12-01T11:59:58Z"),
        record(
            "acme-deliver-1",
            RunPhase::Succeeded,
            "2026-12-01T11:00:00Z",
        ),
    ];
    let mut tenant = with_copies(vec![reported(CopyState::Failed, None)], history);
    credentials_report(&mut tenant).written_by = Some("uid-acme-deliver-2".into());
    let at = failed_at + retry_delay(&tenant, RunAction::Deliver, 1);
    assert_eq!(
        delivery_needed(&tenant, &[], &consents(true).consents, NOW.parse().unwrap()),
        NextRun::RetryAt { attempt: 2, at }
    );
    assert_eq!(
        condition(&tenant, &consents(true)),
        Some((
            "False".into(),
            "DeliveryFailed".into(),
            format!(
                "app/acme-db: Failed said the provisioner. Attempt 2 starts at {}",
                at.strftime("%Y-%m-%dT%H:%M:%SZ")
            )
        ))
    );
    assert_eq!(
        delivery_needed(&tenant, &[], &consents(true).consents, at),
        NextRun::Start("acme-deliver-3".into())
    );
    let rotating = Arc::new(new_run_job(&tenant, "acme-rotate-1", RunAction::Rotate));
    assert_eq!(
        delivery_needed(&tenant, &[rotating], &consents(true).consents, at),
        NextRun::Idle
    );
}

/// A tenant that asks for no copy and has none shows no condition about them.
#[test]
fn no_copies_no_condition() {
    let tenant = provisioned(false, false, vec![]);
    assert_eq!(condition(&tenant, &Observed::default()), None);
}

// Rule 10: rotation on a schedule.

use super::rotation::rotation_wake;
use crate::crd::RotationSchedule;

/// A provisioned tenant rotated every hour (overlap 5m), whose password last changed at `rotated`.
fn on_schedule(rotated: &str, history: Vec<RunRecord>) -> Tenant {
    let mut tenant = provisioned(false, false, history);
    tenant.spec.credentials = Some(CredentialsSpec {
        copies: vec![],
        rotation: Some(RotationSchedule {
            every: "1h".into(),
            overlap: Some("5m".into()),
        }),
        ..CredentialsSpec::default()
    });
    tenant.status.as_mut().unwrap().credentials = Some(CredentialsStatus {
        hash: "h1".into(),
        written_by: Some("uid-acme-provision-10".into()),
        rotated_at: Some(jiff_time(rotated)),
        secret_uid: None,
        copies: vec![],
    });
    tenant
}

/// Before it is due nothing starts and the reconciler wakes for it; once due, one Rotate run,
/// which keeps the previous password for the schedule's overlap.
#[test]
fn a_scheduled_rotation_starts_when_due_and_wakes_for_it_before() {
    let tenant = on_schedule("2026-12-01T11:30:00Z", vec![]);
    let due: Timestamp = "2026-12-01T12:30:00Z".parse().unwrap();
    let now: Timestamp = NOW.parse().unwrap();
    assert_eq!(
        runs_needed(&tenant, &[], &Observed::default(), now),
        RunPlan {
            start: vec![],
            wake_at: Some(due),
        }
    );
    assert_eq!(
        condition_of(&tenant, ROTATION, now),
        Some((
            "True".into(),
            "Scheduled".into(),
            "Password last changed at 2026-12-01T11:30:00Z; the next rotation (every 1h) is due at 2026-12-01T12:30:00Z".into()
        ))
    );
    assert_eq!(
        runs_needed(&tenant, &[], &Observed::default(), due).start,
        [("acme-rotate-1".to_owned(), RunAction::Rotate)]
    );
    // At the due time itself: no wake for a time already reached (it would requeue at once), and
    // the condition no longer says it is ahead.
    assert_eq!(rotation_wake(&tenant, due), None);
    assert_eq!(
        rotation_wake(&tenant, due - jiff::SignedDuration::from_secs(1)),
        Some(due)
    );
    assert_eq!(
        condition_of(&tenant, ROTATION, due).map(|(_, reason, _)| reason),
        Some("Rotating".to_owned())
    );
    assert_eq!(
        tenant.spec.rotation_grace(),
        jiff::SignedDuration::from_mins(5)
    );
}

/// The due rotation is under way: nothing more starts beside it, nor after it until the tenant
/// shows its report (its `rotatedAt` is the old one until then); a failed one is retried after
/// its backoff, said on the condition.
#[test]
fn a_scheduled_rotation_waits_for_its_report_and_retries_a_failure() {
    let due: Timestamp = "2026-12-01T12:30:00Z".parse().unwrap();
    let tenant = on_schedule("2026-12-01T11:30:00Z", vec![]);
    let rotating = Arc::new(new_run_job(&tenant, "acme-rotate-1", RunAction::Rotate));
    assert_eq!(scheduled_rotation(&tenant, &[rotating], due), NextRun::Idle);

    let done = record("acme-rotate-1", RunPhase::Succeeded, "2026-12-01T12:30:05Z");
    let behind = on_schedule("2026-12-01T11:30:00Z", vec![done]);
    assert_eq!(scheduled_rotation(&behind, &[], due), NextRun::Idle);

    let failed = record("acme-rotate-1", RunPhase::Failed, "2026-12-01T12:30:05Z");
    let mut failing = on_schedule("2026-12-01T11:30:00Z", vec![failed]);
    credentials_report(&mut failing).written_by = Some("uid-acme-rotate-1".into());
    let ended: Timestamp = "2026-12-01T12:30:05Z".parse().unwrap();
    let at = ended + retry_delay(&failing, RunAction::Rotate, 1);
    assert_eq!(
        scheduled_rotation(&failing, &[], ended),
        NextRun::RetryAt { attempt: 2, at }
    );
    let (status, reason, message) = condition_of(&failing, ROTATION, ended).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RotationFailed")
    );
    assert!(
        message.starts_with("Rotate run acme-rotate-1 failed"),
        "{message}"
    );
    assert_eq!(
        scheduled_rotation(&failing, &[], at),
        NextRun::Start("acme-rotate-2".into())
    );
}

/// Credentials with no reported change count from the Tenant's creation; no schedule, no rule.
#[test]
fn a_schedule_counts_from_creation_without_a_report_and_nothing_without_a_schedule() {
    let mut tenant = on_schedule(NOW, vec![]);
    tenant.status.as_mut().unwrap().credentials = None;
    tenant.metadata.creation_timestamp = Some(jiff_time("2026-12-01T10:00:00Z"));
    assert_eq!(
        rotation_due(&tenant),
        Some("2026-12-01T11:00:00Z".parse().unwrap())
    );
    // Neither a tenant not yet provisioned nor one being deleted is rotated.
    let mut unprovisioned = tenant.clone();
    unprovisioned.status.as_mut().unwrap().history.clear();
    unprovisioned
        .status
        .as_mut()
        .unwrap()
        .click_house_database_name = None;
    assert!(!unprovisioned.is_provisioned());
    assert_eq!(rotation_due(&unprovisioned), None);
    let mut deleting = tenant.clone();
    deleting.metadata.deletion_timestamp = Some(jiff_time(NOW));
    assert_eq!(rotation_due(&deleting), None);
    let plain = provisioned(false, false, vec![]);
    assert_eq!(rotation_due(&plain), None);
    assert_eq!(condition_of(&plain, ROTATION, NOW.parse().unwrap()), None);
}

fn condition_of(tenant: &Tenant, type_: &str, now: Timestamp) -> Option<(String, String, String)> {
    desired_status(tenant, &[], &Observed::default(), now)
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

// Rule 11: a deleted credentials Secret.

use crate::crd::OnSecretLoss;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// A provisioned tenant whose provisioner reported Secret `acme-clickhouse` with uid `s1` (its
/// marker written), copies asked for and delivered, a rotation every hour last done at `NOW`.
fn watched(on_loss: OnSecretLoss, history: Vec<RunRecord>) -> Tenant {
    let mut tenant = with_copies(vec![reported(CopyState::Delivered, Some("h1"))], history);
    let spec = tenant.spec.credentials.as_mut().unwrap();
    spec.on_secret_loss = on_loss;
    spec.rotation = Some(RotationSchedule {
        every: "1h".into(),
        overlap: None,
    });
    let status = tenant.status.as_mut().unwrap();
    status.click_house_secret_ref = Some(crate::crd::SecretRef {
        name: "acme-clickhouse".into(),
    });
    let report = status.credentials.as_mut().unwrap();
    report.secret_uid = Some("s1".into());
    report.rotated_at = Some(jiff_time(NOW));
    tenant
}

/// A marker owned by the Secret whose uid is `owner` (none: its owner reference stripped).
fn marker(owner: Option<&str>) -> ConfigMap {
    let mut marker = ConfigMap::default();
    marker.metadata.owner_references = owner.map(|uid| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "acme-clickhouse".into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }]
    });
    marker
}

fn lost() -> Observed {
    Observed {
        consents: Consents::from([("app".to_owned(), true)]),
        secret: SecretState::Deleted,
    }
}

fn secret_condition_of(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    observed: &Observed,
) -> Option<(String, String, String)> {
    desired_status(tenant, runs, observed, NOW.parse().unwrap())
        .conditions
        .into_iter()
        .find(|c| c.type_ == "CredentialsSecret")
        .map(|c| (c.status, c.reason, c.message))
}

/// The marker looked for is named by the reported Secret and uid; the Secret is there while a
/// marker it owns is, gone when the marker is gone, owned by another Secret of the name (made again
/// by hand), or orphaned; unknown without a reported uid.
#[test]
fn the_secret_is_there_while_a_marker_it_owns_is() {
    let tenant = watched(OnSecretLoss::Report, vec![]);
    assert_eq!(
        secret_loss::watched_marker(&tenant).as_deref(),
        Some("acme-clickhouse.s1")
    );
    assert_eq!(
        secret_state(&tenant, Some(&marker(Some("s1")))),
        SecretState::Present
    );
    assert_eq!(secret_state(&tenant, None), SecretState::Deleted);
    assert_eq!(
        secret_state(&tenant, Some(&marker(Some("s2")))),
        SecretState::Deleted
    );
    assert_eq!(
        secret_state(&tenant, Some(&marker(None))),
        SecretState::Deleted
    );

    let mut unreported = tenant.clone();
    credentials_report(&mut unreported).secret_uid = None;
    assert_eq!(secret_loss::watched_marker(&unreported), None);
    assert_eq!(secret_state(&unreported, None), SecretState::Unknown);
    let mut deleting = tenant.clone();
    deleting.metadata.deletion_timestamp = Some(jiff_time(NOW));
    assert_eq!(secret_loss::watched_marker(&deleting), None);
}

/// Report (the default): the condition says what happened and what to do; no run starts — not the
/// Deliver the out-of-date copies would get, not the rotation that is due — and their conditions say
/// what they wait for.
#[test]
fn a_deleted_secret_is_reported_and_nothing_rotates_it_unasked() {
    let due: Timestamp = "2026-12-01T13:00:00Z".parse().unwrap();
    let mut tenant = watched(OnSecretLoss::Report, vec![]);
    credentials_report(&mut tenant).hash = "h2".into();
    assert_eq!(
        runs_needed(&tenant, &[], &lost().consents.into(), due).start,
        [("acme-rotate-1".to_owned(), RunAction::Rotate)],
        "with the Secret there: the due rotation (which writes the copies too)"
    );
    assert_eq!(runs_needed(&tenant, &[], &lost(), due), RunPlan::default());
    assert_eq!(
        secret_condition_of(&tenant, &[], &lost()),
        Some((
            "False".into(),
            "SecretDeleted".into(),
            "Secret acme-clickhouse was deleted. The password still works in ClickHouse, but nobody can read it: start a Rotate run (the Rotate button, or a RunJob) to make the Secret again with a new password, or set spec.credentials.onSecretLoss: Rotate".into()
        ))
    );
    let status = desired_status(&tenant, &[], &lost(), due);
    for held in [DELIVERED, ROTATION] {
        let c = status.conditions.iter().find(|c| c.type_ == held).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                "SecretDeleted",
                "Waiting until Secret acme-clickhouse is made again (see the CredentialsSecret condition)"
            ),
            "{held}"
        );
    }
    // What is so stays said: the copies hold the credentials on file, the next rotation is ahead.
    let settled = watched(OnSecretLoss::Report, vec![]);
    let status = desired_status(&settled, &[], &lost(), NOW.parse().unwrap());
    let reason = |type_: &str| {
        let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (c.status.clone(), c.reason.clone())
    };
    assert_eq!(reason(DELIVERED), ("True".into(), "Delivered".into()));
    assert_eq!(reason(ROTATION), ("True".into(), "Scheduled".into()));
    // A Rotate someone started is under way.
    let clicked = Arc::new(new_run_job(&tenant, "acme-rotate-1", RunAction::Rotate));
    assert_eq!(
        secret_condition_of(&tenant, &[clicked], &lost()).map(|c| c.1),
        Some("Remaking".into())
    );
    // Present: said so; unknown: the condition stays as it was.
    let present = Observed {
        secret: SecretState::Present,
        ..Observed::default()
    };
    assert_eq!(
        secret_condition_of(&tenant, &[], &present),
        Some((
            "True".into(),
            "Present".into(),
            "Secret acme-clickhouse holds the credentials".into()
        ))
    );
    let mut shown = tenant.clone();
    shown.status.as_mut().unwrap().conditions =
        desired_status(&tenant, &[], &lost(), due).conditions;
    assert_eq!(
        secret_condition_of(&shown, &[], &Observed::default()).map(|c| c.1),
        Some("SecretDeleted".into())
    );
    assert_eq!(
        secret_condition_of(&tenant, &[], &Observed::default()),
        None
    );
}

/// Rotate: one Rotate run, none beside another run that writes the credentials nor before the
/// tenant shows the newest one's report; a failed one retried after its backoff, the condition
/// saying why and when.
#[test]
fn with_on_secret_loss_rotate_a_deleted_secret_gets_a_rotate_run_retried_on_failure() {
    let now: Timestamp = NOW.parse().unwrap();
    let tenant = watched(OnSecretLoss::Rotate, vec![]);
    let plan = runs_needed(&tenant, &[], &lost(), now);
    assert_eq!(
        plan.start,
        [("acme-rotate-1".to_owned(), RunAction::Rotate)]
    );
    assert_eq!(
        secret_condition_of(&tenant, &[], &lost()).map(|c| c.1),
        Some("Remaking".into())
    );
    let delivering = Arc::new(new_run_job(&tenant, "acme-deliver-1", RunAction::Deliver));
    assert_eq!(
        secret_rotation(&tenant, &[delivering], SecretState::Deleted, now),
        NextRun::Idle
    );
    let done = record("acme-rotate-1", RunPhase::Succeeded, "2026-12-01T12:00:05Z");
    let behind = watched(OnSecretLoss::Rotate, vec![done]);
    assert_eq!(
        secret_rotation(&behind, &[], SecretState::Deleted, now),
        NextRun::Idle
    );
    assert_eq!(
        secret_rotation(&tenant, &[], SecretState::Present, now),
        NextRun::Idle
    );
    assert_eq!(
        secret_rotation(&tenant, &[], SecretState::Unknown, now),
        NextRun::Idle
    );

    let failed = record("acme-rotate-1", RunPhase::Failed, "2026-12-01T12:00:05Z");
    let mut failing = watched(OnSecretLoss::Rotate, vec![failed]);
    credentials_report(&mut failing).written_by = Some("uid-acme-rotate-1".into());
    let ended: Timestamp = "2026-12-01T12:00:05Z".parse().unwrap();
    let at = ended + retry_delay(&failing, RunAction::Rotate, 1);
    assert_eq!(
        secret_rotation(&failing, &[], SecretState::Deleted, ended),
        NextRun::RetryAt { attempt: 2, at }
    );
    assert_eq!(runs_needed(&failing, &[], &lost(), ended).wake_at, Some(at));
    let (status, reason, message) = secret_condition_of(&failing, &[], &lost()).unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RemakeFailed")
    );
    assert!(
        message.starts_with("Secret acme-clickhouse was deleted; making it again failed: Rotate run acme-rotate-1 failed. Attempt 2 starts at"),
        "{message}"
    );
    assert_eq!(
        secret_rotation(&failing, &[], SecretState::Deleted, at),
        NextRun::Start("acme-rotate-2".into())
    );
}

/// Rules 6 and 7 with limits the provisioner last reported other than the spec's and no SetLimits run
/// yet (the reconcile that would start it could not: its finalizer write conflicted): not enforced,
/// and the synced generation stays where it was.
#[test]
fn limits_reported_other_than_the_specs_are_neither_enforced_nor_synced() {
    let limits = |seconds| crate::crd::TenantLimits {
        max_execution_seconds: Some(seconds),
        ..Default::default()
    };
    let mut tenant = provisioned(false, false, vec![]);
    tenant.spec.limits = Some(limits(60));
    tenant.metadata.generation = Some(2);
    let status = tenant.status.as_mut().unwrap();
    status.applied_limits = Some(limits(30));
    status.synced_generation = Some(1);
    let now = "2026-12-01T12:00:00Z".parse().unwrap();
    let desired = desired_status(&tenant, &[], &Observed::default(), now);
    let enforced = desired
        .conditions
        .iter()
        .find(|c| c.type_ == "LimitsEnforced")
        .expect("a provisioned tenant says where its limits stand");
    assert_eq!(
        (enforced.status.as_str(), enforced.reason.as_str()),
        ("False", "Applying")
    );
    assert_eq!(desired.synced_generation, Some(1));
}

/// The finished RunJob, not yet cleaned up, that `record` would become.
fn live(record: &RunRecord) -> Arc<RunJob> {
    let mut run = RunJob::new(
        &record.name,
        crate::crd::RunJobSpec::new("acme", record.action),
    );
    run.metadata.uid = Some(record.uid.clone());
    run.status = Some(crate::crd::RunJobStatus {
        phase: Some(record.phase),
        completion_time: Some(record.finished_at.clone()),
        ..Default::default()
    });
    Arc::new(run)
}

/// As `a_report_of_a_run_finished_in_the_same_second_as_the_newest_is_not_behind`, with the runs not
/// cleaned up yet, beside an older run of another action: the reported run's time is read from its
/// own RunJob.
#[test]
fn a_reported_run_s_time_is_read_from_its_own_live_run() {
    let now: Timestamp = NOW.parse().unwrap();
    let at = "2026-12-01T11:59:00Z";
    let runs: Vec<Arc<RunJob>> = [
        record(
            "acme-provision-1",
            RunPhase::Succeeded,
            "2026-12-01T11:00:00Z",
        ),
        record("acme-deliver-1", RunPhase::Succeeded, at),
        record("acme-rotate-1", RunPhase::Succeeded, at),
    ]
    .iter()
    .map(live)
    .collect();
    for written_by in ["uid-acme-deliver-1", "uid-acme-rotate-1"] {
        let mut tenant = with_copies(vec![], vec![]);
        credentials_report(&mut tenant).written_by = Some(written_by.into());
        assert_eq!(
            delivery_needed(&tenant, &runs, &consents(true).consents, now),
            NextRun::Start("acme-deliver-2".into()),
            "{written_by}"
        );
    }
}

/// As `a_failed_deliver_run_is_retried_after_its_backoff_and_never_beside_another_writer`, with the
/// runs not cleaned up yet, beside a finished run of another action: the failures are counted from
/// the live Deliver runs.
#[test]
fn a_failed_live_deliver_run_is_retried_after_its_backoff() {
    let failed_at: Timestamp = "2026-12-01T11:59:58Z".parse().unwrap();
    let runs: Vec<Arc<RunJob>> = [
        record(
            "acme-provision-1",
            RunPhase::Succeeded,
            "2026-12-01T10:00:00Z",
        ),
        record(
            "acme-deliver-1",
            RunPhase::Succeeded,
            "2026-12-01T11:00:00Z",
        ),
        record("acme-deliver-2", RunPhase::Failed, "2026-12-01T11:59:58Z"),
    ]
    .iter()
    .map(live)
    .collect();
    let mut tenant = with_copies(vec![reported(CopyState::Failed, None)], vec![]);
    credentials_report(&mut tenant).written_by = Some("uid-acme-deliver-2".into());
    let at = failed_at + retry_delay(&tenant, RunAction::Deliver, 1);
    assert_eq!(
        delivery_needed(
            &tenant,
            &runs,
            &consents(true).consents,
            NOW.parse().unwrap()
        ),
        NextRun::RetryAt { attempt: 2, at }
    );
}
