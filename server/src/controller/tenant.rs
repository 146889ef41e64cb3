//! The Tenant reconciler. Its rules:
//! 1. A tenant being deleted is left to garbage collection (its runs and Secret are owned by it).
//! 2. `status.phase` is a pure function of spec.suspended, the provisioner's report
//!    (`status.clickHouseDatabaseName`) and the tenant's runs — recomputed every time, never toggled.
//! 3. `Ready`, `Provisioned` and `AccessLocked` conditions follow the phase; transition times move only on flips.
//! 4. When `spec.suspended` differs from what ClickHouse enforces on a provisioned tenant — or nobody
//!    knows what it enforces, because the latest lock run failed after perhaps changing it — a
//!    Suspend/Resume RunJob is created for that generation: one at a time, a failed one retried up to
//!    [`MAX_LOCK_ATTEMPTS`] times, never more.
//! 5. Status is written only when it changed.
//!
//! It never claims Active on its own and never talks to ClickHouse.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::{Context, Result, TENANT_CONTROLLER, apply_status, name_of};
use crate::crd::{
    ConditionStatus, RUNJOB_FINALIZER, RunAction, RunJob, RunJobSpec, RunPhase, RunRecord, Tenant,
    TenantPhase, TenantStatus, set_condition,
};
use crate::names::TenantName;

/// What the tenant's runs say about provisioning, reduced to what the phase needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProvisionRuns {
    /// A Provision run exists that has not finished.
    pub in_flight: bool,
    /// The most recently finished Provision run failed.
    pub latest_failed: bool,
}

/// The phase rule from ARCHITECTURE.md, in order. Never Active without a database name; un-suspending
/// a provisioned tenant lands straight on Active because nothing here remembers the previous phase.
pub fn phase(suspended: bool, database: Option<&str>, runs: ProvisionRuns) -> TenantPhase {
    if suspended {
        TenantPhase::Suspended
    } else if database.is_some_and(|db| !db.is_empty()) {
        TenantPhase::Active
    } else if runs.in_flight {
        TenantPhase::Provisioning
    } else if runs.latest_failed {
        TenantPhase::Failed
    } else {
        TenantPhase::Pending
    }
}

/// A finished run, from a live RunJob or from the history kept after cleanup.
struct Finished<'a> {
    name: &'a str,
    phase: RunPhase,
    message: &'a str,
    at: Option<Timestamp>,
}

/// Latest finished run of an action `of` accepts, considering both live RunJobs and the history on the
/// tenant.
fn latest_finished<'a>(
    runs: &'a [Arc<RunJob>],
    history: &'a [RunRecord],
    of: impl Fn(RunAction) -> bool,
) -> Option<Finished<'a>> {
    let live = runs.iter().filter(|r| of(r.spec.action)).filter_map(|r| {
        let status = r.status.as_ref()?;
        let phase = status.phase.filter(|p| p.is_finished())?;
        Some(Finished {
            name: r.metadata.name.as_deref().unwrap_or_default(),
            phase,
            message: status.message.as_deref().unwrap_or_default(),
            at: status.completion_time.as_ref().map(|t| t.0),
        })
    });
    let recorded = history.iter().filter(|h| of(h.action)).map(|h| Finished {
        name: &h.name,
        phase: h.phase,
        message: &h.message,
        at: Some(h.finished_at.0),
    });
    // Kubernetes times have whole seconds, so two runs can finish "at once"; the later run has the
    // higher serial (a lock run's serial grows with the generation, a Provision run's with each retry).
    live.chain(recorded).max_by_key(|f| (f.at, serial(f.name)))
}

/// The number a run's name ends with (`acme-suspend-41` → 41); 0 for a name made by hand without one.
fn serial(name: &str) -> u64 {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn latest_finished_provision<'a>(
    runs: &'a [Arc<RunJob>],
    history: &'a [RunRecord],
) -> Option<Finished<'a>> {
    latest_finished(runs, history, |a| a == RunAction::Provision)
}

fn is_lock_action(action: RunAction) -> bool {
    matches!(action, RunAction::Suspend | RunAction::Resume)
}

fn lock_run_in_flight(runs: &[Arc<RunJob>]) -> bool {
    runs.iter()
        .any(|r| is_lock_action(r.spec.action) && r.is_in_flight())
}

/// What ClickHouse's login lock is, as far as the tenant can tell: the provisioner's last report
/// (`status.accessLocked`), unless a Suspend/Resume run is in flight or the latest one failed. Either
/// may have changed the lock without a report reaching the status (a pod lost between the statement and
/// the status write), so then the lock is unknown and only a run can settle it.
pub fn enforced_lock(tenant: &Tenant, runs: &[Arc<RunJob>]) -> Option<bool> {
    let in_flight = lock_run_in_flight(runs);
    let latest_failed = latest_finished(runs, tenant.history(), is_lock_action)
        .is_some_and(|f| f.phase == RunPhase::Failed);
    (!in_flight && !latest_failed).then(|| tenant.access_locked())
}

pub fn provision_runs(runs: &[Arc<RunJob>], history: &[RunRecord]) -> ProvisionRuns {
    ProvisionRuns {
        in_flight: runs
            .iter()
            .any(|r| r.spec.action == RunAction::Provision && r.is_in_flight()),
        latest_failed: latest_finished_provision(runs, history)
            .is_some_and(|f| f.phase == RunPhase::Failed),
    }
}

/// The part of the status this controller owns: phase, observedGeneration and conditions. Every other
/// field is left out (the provisioner and the RunJob controller write those); see [`owned_status`].
pub fn desired_status(tenant: &Tenant, runs: &[Arc<RunJob>], now: Timestamp) -> TenantStatus {
    let current = tenant.status.clone().unwrap_or_default();
    let database = current
        .click_house_database_name
        .as_deref()
        .filter(|d| !d.is_empty());
    let provision = provision_runs(runs, &current.history);
    let phase = phase(tenant.spec.suspended, database, provision);
    let generation = tenant.metadata.generation;

    let mut desired = owned_status(&current);
    desired.phase = Some(phase);
    desired.observed_generation = generation;

    let ready_message = match phase {
        TenantPhase::Active => format!("Database {} is ready", database.unwrap_or_default()),
        TenantPhase::Suspended => "Tenant is suspended".to_owned(),
        TenantPhase::Provisioning => "A Provision run is in progress".to_owned(),
        TenantPhase::Failed => failed_message(runs, &current.history),
        TenantPhase::Pending => "Not provisioned yet: start a Provision run".to_owned(),
    };
    let c = &mut desired.conditions;
    set_condition(
        c,
        "Ready",
        (phase == TenantPhase::Active).into(),
        phase.as_str(),
        &ready_message,
        generation,
        now,
    );

    let (provisioned, reason, message) = match (database, phase) {
        (Some(db), _) => (
            true,
            "DatabaseReady",
            format!("Provisioner reported database {db}"),
        ),
        (None, TenantPhase::Provisioning) => (
            false,
            "Provisioning",
            "A Provision run is in progress".to_owned(),
        ),
        (None, TenantPhase::Failed) => (
            false,
            "ProvisionFailed",
            failed_message(runs, &current.history),
        ),
        (None, _) => (
            false,
            "NotProvisioned",
            "No successful Provision run yet".to_owned(),
        ),
    };
    set_condition(
        c,
        "Provisioned",
        provisioned.into(),
        reason,
        &message,
        generation,
        now,
    );

    if database.is_some() {
        let suspended = tenant.spec.suspended;
        let enforced = enforced_lock(tenant, runs);
        // Out of step (or unknown) with no run in flight and none left to try: the attempts were used up.
        let gave_up = !lock_run_in_flight(runs) && next_lock_run(tenant, runs, enforced).is_none();
        let (reason, message) = match (enforced, suspended, gave_up) {
            (Some(true), true, _) => ("LoginsLocked", "ClickHouse logins are locked"),
            (Some(false), false, _) => ("LoginsAllowed", "ClickHouse logins are allowed"),
            (_, true, false) => (
                "Locking",
                "Suspended; a Suspend run is locking ClickHouse logins",
            ),
            (_, false, false) => (
                "Unlocking",
                "Resumed; a Resume run is unlocking ClickHouse logins",
            ),
            (_, true, true) => (
                "LockFailed",
                "Suspended, but locking ClickHouse logins failed on every attempt: see the run history, then resume and suspend again to retry",
            ),
            (_, false, true) => (
                "UnlockFailed",
                "Resumed, but unlocking ClickHouse logins failed on every attempt: see the run history, then suspend and resume again to retry",
            ),
        };
        // The status half says what was last reported; the reason says whether that is settled.
        let locked = current.access_locked.unwrap_or(false);
        set_condition(
            c,
            "AccessLocked",
            ConditionStatus::from(locked),
            reason,
            message,
            generation,
            now,
        );
    }
    desired
}

/// The fields of `status` that the Tenant controller owns, and nothing else.
pub fn owned_status(status: &TenantStatus) -> TenantStatus {
    TenantStatus {
        phase: status.phase,
        observed_generation: status.observed_generation,
        conditions: status.conditions.clone(),
        ..TenantStatus::default()
    }
}

fn failed_message(runs: &[Arc<RunJob>], history: &[RunRecord]) -> String {
    match latest_finished_provision(runs, history) {
        Some(f) if f.message.is_empty() => format!("Provision run {} failed", f.name),
        Some(f) => format!("Provision run {} failed: {}", f.name, f.message),
        None => "Provision run failed".to_owned(),
    }
}

/// Rule 4: the Suspend/Resume run this tenant needs now, if any. `None` when ClickHouse is known to
/// enforce spec.suspended ([`enforced_lock`]), when a lock run is in flight, or when this generation's
/// run was already made (or tried [`MAX_LOCK_ATTEMPTS`] times).
pub fn lock_run_needed(tenant: &Tenant, runs: &[Arc<RunJob>]) -> Option<(RunAction, String)> {
    next_lock_run(tenant, runs, enforced_lock(tenant, runs))
}

/// [`lock_run_needed`], given the tenant's [`enforced_lock`] (computed once per reconcile).
fn next_lock_run(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    enforced: Option<bool>,
) -> Option<(RunAction, String)> {
    if !tenant.is_provisioned() || enforced == Some(tenant.spec.suspended) {
        return None;
    }
    if lock_run_in_flight(runs) {
        return None;
    }
    let action = if tenant.spec.suspended {
        RunAction::Suspend
    } else {
        RunAction::Resume
    };
    let tenant_name = TenantName::parse(&tenant.name_any()).ok()?;
    let generation = tenant.metadata.generation.unwrap_or(1).max(0) as u64;
    // This generation's earlier attempts, live or already cleaned up into the history.
    let prefix = format!("{tenant_name}-{}-", action.as_str().to_ascii_lowercase());
    let attempt_of = |name: &str| {
        let serial: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
        (serial / LOCK_ATTEMPTS_PER_GENERATION == generation).then_some(())
    };
    let live = runs
        .iter()
        .filter(|r| r.spec.action == action)
        .filter_map(|r| attempt_of(r.metadata.name.as_deref()?).map(|()| r.phase()));
    let recorded = tenant
        .history()
        .iter()
        .filter(|h| h.action == action)
        .filter_map(|h| attempt_of(&h.name).map(|()| Some(h.phase)));
    let outcomes: Vec<Option<RunPhase>> = live.chain(recorded).collect();
    if outcomes.contains(&Some(RunPhase::Succeeded)) {
        return None;
    }
    let attempts = outcomes.len() as u64;
    // A transient failure is retried; a permanent one stops after a few tries instead of looping.
    (attempts < MAX_LOCK_ATTEMPTS).then(|| {
        let serial = generation * LOCK_ATTEMPTS_PER_GENERATION + attempts;
        (action, tenant_name.run_job(action.as_str(), serial))
    })
}

/// Suspend/Resume attempts for one generation before the tenant reconciler gives up until the spec changes.
pub const MAX_LOCK_ATTEMPTS: u64 = 3;
/// Run serials are `generation × 10 + attempt`, so attempts of one generation sort together.
const LOCK_ATTEMPTS_PER_GENERATION: u64 = 10;

/// A new RunJob for `tenant`, owned by it and carrying the RunJob controller's finalizer from birth
/// (so the controller needs no extra write to add it).
pub fn new_run_job(tenant: &Tenant, name: &str, action: RunAction) -> RunJob {
    let owner = tenant
        .controller_owner_ref(&())
        .expect("a stored tenant has a name and uid");
    RunJob {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: tenant.namespace(),
            owner_references: Some(vec![owner]),
            finalizers: Some(vec![RUNJOB_FINALIZER.to_owned()]),
            labels: Some({
                let mut labels = crate::labels::for_tenant("run", &tenant.name_any());
                labels.insert(
                    "sentry.io/action".to_owned(),
                    action.as_str().to_lowercase(),
                );
                labels
            }),
            ..ObjectMeta::default()
        },
        spec: RunJobSpec::new(&tenant.name_any(), action),
        status: None,
    }
}

/// The name for a new Provision run: `<tenant>-provision-<n>`, one past the highest serial among the
/// tenant's live runs and its history, so a retry after a failure gets a fresh name while two clicks
/// racing for the same name collide on AlreadyExists (and start one run).
pub fn next_provision_run(tenant: &Tenant, runs: &[Arc<RunJob>]) -> String {
    let name = tenant.name_any();
    let prefix = format!("{name}-provision-");
    let serial = |n: &str| n.strip_prefix(&prefix).and_then(|s| s.parse::<u64>().ok());
    let highest = runs
        .iter()
        .filter_map(|r| r.metadata.name.as_deref().and_then(serial))
        .chain(tenant.history().iter().filter_map(|h| serial(&h.name)))
        .max()
        .unwrap_or(0);
    let tenant_name = TenantName::parse(&name).expect("stored tenants have valid names");
    tenant_name.run_job(RunAction::Provision.as_str(), highest + 1)
}

pub async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.is_leader() {
        return Ok(Action::await_change());
    }
    let _timer = ctx.metrics.reconcile_timer("tenant");
    // Rule 1.
    if tenant.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = name_of(tenant.as_ref())?;
    let runs = ctx.runs_of(&name);

    // Rule 4.
    if let Some((action, run_name)) = lock_run_needed(&tenant, &runs) {
        create_lock_run(&tenant, &run_name, action, &ctx).await?;
    }

    // Rules 2, 3, 5.
    let desired = desired_status(&tenant, &runs, ctx.clock.now());
    let current = tenant.status.as_ref().map(owned_status).unwrap_or_default();
    if desired != current {
        apply_status(&ctx.tenants(), &name, TENANT_CONTROLLER, &desired).await?;
    }
    Ok(Action::await_change())
}

async fn create_lock_run(
    tenant: &Tenant,
    name: &str,
    action: RunAction,
    ctx: &Context,
) -> Result<()> {
    let run = new_run_job(tenant, name, action);
    match ctx.runjobs().create(&PostParams::default(), &run).await {
        Ok(_) => {
            let note = format!("Created {} run {name}", action.as_str());
            ctx.event(tenant, EventType::Normal, "RunCreated", note)
                .await;
            Ok(())
        }
        // A previous reconcile (or another replica) made it: that is the outcome we wanted.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(lock_run_needed(&tenant, &[]), None);
    }

    #[test]
    fn a_failed_provision_is_described_with_its_run_and_message() {
        let at = "2026-12-01T12:00:00Z";
        let mut failed = record("acme-provision-1", RunPhase::Failed, at);
        assert_eq!(
            failed_message(&[], std::slice::from_ref(&failed)),
            "Provision run acme-provision-1 failed"
        );
        failed.message = "ClickHouse refused the login".into();
        assert_eq!(
            failed_message(&[], &[failed]),
            "Provision run acme-provision-1 failed: ClickHouse refused the login"
        );
        assert_eq!(failed_message(&[], &[]), "Provision run failed");
    }

    /// Owned by its tenant (garbage-collected with it), finalized by the RunJob controller from birth,
    /// and labelled so `kubectl get runjobs -l sentry.io/tenant=acme` finds a tenant's runs.
    #[test]
    fn a_new_run_is_owned_finalized_and_labelled() {
        let run = new_run_job(
            &provisioned(true, false, vec![]),
            "acme-suspend-10",
            RunAction::Suspend,
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
                ("sentry.io/tenant", "acme"),
            ]
        );
        assert_eq!(
            (run.spec.tenant.as_str(), run.spec.action),
            ("acme", RunAction::Suspend)
        );
    }
}
