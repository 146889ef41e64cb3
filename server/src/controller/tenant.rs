//! The Tenant reconciler. Its rules:
//! 1. A tenant being deleted is left to garbage collection (its runs and Secret are owned by it).
//! 2. `status.phase` is a pure function of spec.suspended, the provisioner's report
//!    (`status.clickHouseDatabaseName`) and the tenant's runs — recomputed every time, never toggled.
//! 3. `Ready`, `Provisioned` and `AccessLocked` conditions follow the phase; transition times move only on flips.
//! 4. When `spec.suspended` differs from what ClickHouse enforces on a provisioned tenant — or nobody
//!    knows what it enforces, because the latest lock run failed after perhaps changing it — a
//!    Suspend/Resume RunJob is created for that generation: one at a time, a failed one retried after
//!    [`retry_delay`](super::attempts::retry_delay) (15 s doubling to 5 minutes, jittered) for as
//!    long as it stays out of step — never a silent give-up: the failure and the next attempt's time are on the `AccessLocked`
//!    condition meanwhile.
//! 5. An Automatic tenant that is not provisioned gets a Provision RunJob for its generation: one at a
//!    time, a failed one retried the same way, the reason and the next attempt's time on the
//!    `Provisioned` condition. A Manual tenant waits for a click or a RunJob.
//! 6. When `spec.limits` differs from what ClickHouse enforces on a provisioned tenant — or nobody
//!    knows, because the latest SetLimits run failed — a SetLimits RunJob is created for that
//!    generation, the same way (the failure on the `LimitsEnforced` condition). A change ClickHouse
//!    does not enforce (a display name) starts nothing.
//! 7. `status.syncedGeneration` is the newest generation whose suspension and limits ClickHouse is
//!    known to enforce; the `LimitsEnforced` condition says where the limits stand.
//! 8. Status is written only when it changed.
//!
//! It never claims Active on its own and never talks to ClickHouse.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::attempts::{NextRun, generation, next_attempt, what_next};
use super::reclaim::{self, Reclaim};
use super::{Context, Result, TENANT_CONTROLLER, apply_status, name_of, requeue_at};
use crate::crd::{
    ConditionStatus, ProvisioningPolicy, RUNJOB_FINALIZER, RunAction, RunJob, RunJobSpec, RunPhase,
    RunRecord, Tenant, TenantLimits, TenantPhase, TenantStatus, set_condition,
};

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

fn in_flight(runs: &[Arc<RunJob>], of: impl Fn(RunAction) -> bool) -> bool {
    runs.iter().any(|r| of(r.spec.action) && r.is_in_flight())
}

fn is_limits_action(action: RunAction) -> bool {
    action == RunAction::SetLimits
}

/// Whether the provisioner's last report of what `of`'s runs change can be trusted: none of them is
/// in flight and the latest did not fail. Either may have changed ClickHouse without a report reaching
/// the status (a pod lost between the statement and the status write); then only a run can settle it.
fn settled(tenant: &Tenant, runs: &[Arc<RunJob>], of: impl Fn(RunAction) -> bool + Copy) -> bool {
    let latest_failed =
        latest_finished(runs, tenant.history(), of).is_some_and(|f| f.phase == RunPhase::Failed);
    !in_flight(runs, of) && !latest_failed
}

/// What ClickHouse's login lock is, as far as the tenant can tell: the provisioner's last report
/// (`status.accessLocked`) once [`settled`], else unknown.
pub fn enforced_lock(tenant: &Tenant, runs: &[Arc<RunJob>]) -> Option<bool> {
    settled(tenant, runs, is_lock_action).then(|| tenant.access_locked())
}

/// The limits ClickHouse enforces, as far as the tenant can tell: the provisioner's last report
/// (`status.appliedLimits`) once [`settled`], else unknown.
pub fn enforced_limits(tenant: &Tenant, runs: &[Arc<RunJob>]) -> Option<TenantLimits> {
    settled(tenant, runs, is_limits_action).then(|| tenant.applied_limits())
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
    let deleting = tenant.metadata.deletion_timestamp.is_some();
    let phase = if deleting {
        TenantPhase::Terminating
    } else {
        phase(tenant.spec.suspended, database, provision)
    };
    let generation = tenant.metadata.generation;

    let mut desired = owned_status(&current);
    desired.phase = Some(phase);
    desired.observed_generation = generation;

    let automatic = automatic_provision(tenant, runs, now);
    let failed = || failed_message(runs, &current.history, &automatic);
    let ready_message = match phase {
        TenantPhase::Active => format!("Database {} is ready", database.unwrap_or_default()),
        TenantPhase::Suspended => "Tenant is suspended".to_owned(),
        TenantPhase::Provisioning => "A Provision run is in progress".to_owned(),
        TenantPhase::Failed => failed(),
        TenantPhase::Terminating => format!(
            "Deleted; carrying out reclaimPolicy {} before it goes",
            tenant.spec.reclaim_policy.as_str()
        ),
        TenantPhase::Pending => match tenant.spec.provisioning {
            ProvisioningPolicy::Automatic => {
                "Not provisioned yet: the operator is starting a Provision run".to_owned()
            }
            ProvisioningPolicy::Manual => "Not provisioned yet: start a Provision run".to_owned(),
        },
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
            match automatic {
                NextRun::RetryAt { .. } | NextRun::Start(_) => "ProvisionRetrying",
                NextRun::Idle => "ProvisionFailed",
            },
            failed(),
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

    if deleting {
        let step = reclaim::reclaim_step(tenant, runs, now);
        let failure = latest_finished(runs, &current.history, |a| a == RunAction::Deprovision)
            .map(|f| describe_failure("Deprovision", &f))
            .unwrap_or_default();
        let (reason, message) = reclaim::reclaim_condition(tenant, &step, &failure);
        set_condition(
            c,
            "Reclaimed",
            (step == Reclaim::Release).into(),
            &reason,
            &message,
            generation,
            now,
        );
    }

    if database.is_some() {
        let suspended = tenant.spec.suspended;
        let enforced = enforced_lock(tenant, runs);
        let (action, next) = next_lock_run(tenant, runs, enforced, now);
        let (reason, message) = match (enforced, suspended, &next) {
            (Some(true), true, _) => ("LoginsLocked", "ClickHouse logins are locked".to_owned()),
            (Some(false), false, _) => {
                ("LoginsAllowed", "ClickHouse logins are allowed".to_owned())
            }
            (_, _, NextRun::RetryAt { .. }) => (
                if suspended {
                    "LockFailed"
                } else {
                    "UnlockFailed"
                },
                format!(
                    "{}, but {}: {}",
                    if suspended { "Suspended" } else { "Resumed" },
                    if suspended {
                        "locking ClickHouse logins failed"
                    } else {
                        "unlocking ClickHouse logins failed"
                    },
                    retry_message(runs, &current.history, action, is_lock_action, &next),
                ),
            ),
            (_, true, _) => (
                "Locking",
                "Suspended; a Suspend run is locking ClickHouse logins".to_owned(),
            ),
            (_, false, _) => (
                "Unlocking",
                "Resumed; a Resume run is unlocking ClickHouse logins".to_owned(),
            ),
        };
        // The status half says what was last reported; the reason says whether that is settled.
        let locked = current.access_locked.unwrap_or(false);
        set_condition(
            c,
            "AccessLocked",
            ConditionStatus::from(locked),
            reason,
            &message,
            generation,
            now,
        );

        let wanted = tenant.spec.limits();
        let limits = enforced_limits(tenant, runs);
        let next = next_limits_run(tenant, runs, limits.as_ref(), now);
        let (enforced, reason, message) = match (&limits, &next) {
            (Some(l), _) if *l == wanted => (
                true,
                "Enforced",
                format!("ClickHouse enforces {}", wanted.describe()),
            ),
            (_, NextRun::RetryAt { .. }) => (
                false,
                "ApplyFailed",
                format!(
                    "Applying {} failed: {}",
                    wanted.describe(),
                    retry_message(
                        runs,
                        &current.history,
                        RunAction::SetLimits,
                        is_limits_action,
                        &next
                    ),
                ),
            ),
            _ => (
                false,
                "Applying",
                format!("A SetLimits run is applying {}", wanted.describe()),
            ),
        };
        set_condition(
            c,
            "LimitsEnforced",
            enforced.into(),
            reason,
            &message,
            generation,
            now,
        );
        // Rule 7.
        if enforced && enforced_lock(tenant, runs) == Some(tenant.spec.suspended) {
            desired.synced_generation = generation;
        }
    }
    desired
}

/// The fields of `status` that the Tenant controller owns, and nothing else.
pub fn owned_status(status: &TenantStatus) -> TenantStatus {
    TenantStatus {
        phase: status.phase,
        observed_generation: status.observed_generation,
        conditions: status.conditions.clone(),
        synced_generation: status.synced_generation,
        ..TenantStatus::default()
    }
}

/// "<Action> run <name> failed[: <message>]".
fn describe_failure(action: &str, f: &Finished) -> String {
    if f.message.is_empty() {
        format!("{action} run {} failed", f.name)
    } else {
        format!("{action} run {} failed: {}", f.name, f.message)
    }
}

/// The latest failed Provision run and, for an Automatic tenant, what happens next.
fn failed_message(runs: &[Arc<RunJob>], history: &[RunRecord], automatic: &NextRun) -> String {
    let failed = latest_failure(runs, history, RunAction::Provision, |a| {
        a == RunAction::Provision
    });
    match automatic {
        NextRun::Idle => format!("{failed}. Fix the cause, then click Retry"),
        next => format!("{failed}. {}", what_next(next)),
    }
}

/// "<the latest failed run of `of`>. Attempt N starts at T" for a run the reconciler retries.
fn retry_message(
    runs: &[Arc<RunJob>],
    history: &[RunRecord],
    action: RunAction,
    of: impl Fn(RunAction) -> bool,
    next: &NextRun,
) -> String {
    let failed = latest_failure(runs, history, action, of);
    format!("{failed}. {}", what_next(next))
}

/// The latest failed run of `of`, described ("<Action> run <name> failed[: <message>]").
fn latest_failure(
    runs: &[Arc<RunJob>],
    history: &[RunRecord],
    action: RunAction,
    of: impl Fn(RunAction) -> bool,
) -> String {
    latest_finished(runs, history, of)
        .filter(|f| f.phase == RunPhase::Failed)
        .map(|f| describe_failure(action.as_str(), &f))
        .unwrap_or_else(|| format!("{} run failed", action.as_str()))
}

/// Rule 4: the Suspend/Resume run this tenant needs next, if any ([`NextRun::Idle`] when ClickHouse is
/// known to enforce spec.suspended ([`enforced_lock`]) or a lock run is in flight).
pub fn lock_run_needed(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    now: Timestamp,
) -> (RunAction, NextRun) {
    next_lock_run(tenant, runs, enforced_lock(tenant, runs), now)
}

/// [`lock_run_needed`], given the tenant's [`enforced_lock`] (computed once per reconcile).
fn next_lock_run(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    enforced: Option<bool>,
    now: Timestamp,
) -> (RunAction, NextRun) {
    let action = if tenant.spec.suspended {
        RunAction::Suspend
    } else {
        RunAction::Resume
    };
    let in_step = enforced == Some(tenant.spec.suspended);
    let next = next_sync_run(tenant, runs, in_step, action, is_lock_action, now);
    (action, next)
}

/// Rule 6: the SetLimits run this tenant needs next, if any; as for [`lock_run_needed`].
pub fn limits_run_needed(tenant: &Tenant, runs: &[Arc<RunJob>], now: Timestamp) -> NextRun {
    next_limits_run(tenant, runs, enforced_limits(tenant, runs).as_ref(), now)
}

fn next_limits_run(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    enforced: Option<&TenantLimits>,
    now: Timestamp,
) -> NextRun {
    let in_step = enforced == Some(&tenant.spec.limits());
    next_sync_run(
        tenant,
        runs,
        in_step,
        RunAction::SetLimits,
        is_limits_action,
        now,
    )
}

/// Rules 4 and 6: a provisioned tenant out of step with ClickHouse gets this generation's next
/// attempt at `action`, one at a time (no run of `of` in flight), a failed one retried after
/// [`retry_delay`](super::attempts::retry_delay) for as long as it stays out of step.
fn next_sync_run(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    in_step: bool,
    action: RunAction,
    of: impl Fn(RunAction) -> bool,
    now: Timestamp,
) -> NextRun {
    if !tenant.is_provisioned() || in_step || in_flight(runs, of) {
        return NextRun::Idle;
    }
    next_attempt(tenant, runs, action, now)
}

/// Rule 5: an Automatic tenant that is not provisioned gets its Provision run, one at a time, a
/// failed one retried after [`retry_delay`](super::attempts::retry_delay).
pub fn automatic_provision(tenant: &Tenant, runs: &[Arc<RunJob>], now: Timestamp) -> NextRun {
    if tenant.spec.provisioning != ProvisioningPolicy::Automatic
        || tenant.is_provisioned()
        || provision_runs(runs, tenant.history()).in_flight
    {
        return NextRun::Idle;
    }
    next_attempt(tenant, runs, RunAction::Provision, now)
}

/// A new RunJob for `tenant`, owned by it and carrying the RunJob controller's finalizer from birth
/// (so the controller needs no extra write to add it).
pub fn new_run_job(tenant: &Tenant, name: &str, action: RunAction) -> RunJob {
    let owner = tenant
        .controller_owner_ref(&())
        .expect("a stored tenant has a name and uid");
    // A Deprovision run must outlive a foreground deletion of its tenant (see `reclaim`).
    let owners = (action != RunAction::Deprovision).then(|| vec![owner]);
    RunJob {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: tenant.namespace(),
            owner_references: owners,
            finalizers: Some(vec![RUNJOB_FINALIZER.to_owned()]),
            labels: Some({
                let mut labels = crate::labels::for_tenant("run", &tenant.name_any());
                labels.insert(
                    "sentry.io/action".to_owned(),
                    action.as_str().to_lowercase(),
                );
                labels.insert(
                    crate::labels::TENANT_UID.to_owned(),
                    tenant.uid().unwrap_or_default(),
                );
                labels.insert(
                    crate::labels::GENERATION.to_owned(),
                    generation(tenant).to_string(),
                );
                labels
            }),
            ..ObjectMeta::default()
        },
        spec: RunJobSpec::new(&tenant.name_any(), action),
        status: None,
    }
}

pub async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.is_leader() {
        return Ok(Action::await_change());
    }
    let _timer = ctx.metrics.reconcile_timer("tenant");
    let name = name_of(tenant.as_ref())?;
    let all_runs = ctx.runs_of(&name);
    let mut runs: Vec<Arc<RunJob>> = all_runs
        .iter()
        .filter(|r| r.is_for(&tenant))
        .cloned()
        .collect();
    let now = ctx.clock.now();

    // Rule 1.
    if tenant.meta().deletion_timestamp.is_some() {
        let taken: Vec<String> = all_runs.iter().map(|r| r.name_any()).collect();
        return reconcile_deleting(&tenant, runs, &taken, &ctx).await;
    }
    // No run is made for a tenant before it carries the reclaim finalizer: a deletion meanwhile would
    // leave what the run created in ClickHouse behind.
    let finalized = reclaim::ensure_finalizer(&tenant, &ctx).await?;
    // The retries no watch event will announce: the reconciler wakes for the soonest.
    let mut retries = Vec::new();

    // Rule 4.
    match lock_run_needed(&tenant, &runs, now) {
        (action, NextRun::Start(run_name)) if finalized => {
            runs.extend(create_run(&tenant, &run_name, action, &ctx).await?);
        }
        (_, next) => retries.extend(next.retry_at()),
    }
    // Rule 6.
    match limits_run_needed(&tenant, &runs, now) {
        NextRun::Start(run_name) if finalized => {
            runs.extend(create_run(&tenant, &run_name, RunAction::SetLimits, &ctx).await?);
        }
        next => retries.extend(next.retry_at()),
    }
    // Rule 5.
    match automatic_provision(&tenant, &runs, now) {
        NextRun::Start(run_name) if finalized => {
            runs.extend(create_run(&tenant, &run_name, RunAction::Provision, &ctx).await?);
        }
        next => retries.extend(next.retry_at()),
    }

    // Rules 2, 3, 7, 8.
    write_status(&tenant, &runs, now, &ctx).await?;
    Ok(match retries.into_iter().min() {
        Some(at) => requeue_at(at, now),
        None => Action::await_change(),
    })
}

/// Rule 1: a tenant being deleted waits for its runs, gets its Deprovision run, and is released once
/// that succeeded (see [`reclaim`]).
async fn reconcile_deleting(
    tenant: &Tenant,
    mut runs: Vec<Arc<RunJob>>,
    taken: &[String],
    ctx: &Context,
) -> Result<Action> {
    if !reclaim::carries_finalizer(tenant) {
        return Ok(Action::await_change());
    }
    let now = ctx.clock.now();
    let step = reclaim::reclaim_step(tenant, &runs, now);
    match &step {
        Reclaim::Release => return reclaim::release(tenant, ctx).await,
        Reclaim::Next(NextRun::Start(run_name)) => {
            // An earlier tenant of this name may have left its Deprovision run (it has no owner to
            // go with): this one's takes the next free serial.
            let run_name = reclaim::unclaimed(run_name, taken);
            runs.extend(create_run(tenant, &run_name, RunAction::Deprovision, ctx).await?);
        }
        _ => {}
    }
    write_status(tenant, &runs, now, ctx).await?;
    Ok(reclaim::next_wake(&step, now))
}

/// Rules 2, 3, 7 and 8: the owned part of the status, written only when it changed.
async fn write_status(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    now: Timestamp,
    ctx: &Context,
) -> Result<()> {
    let desired = desired_status(tenant, runs, now);
    let current = tenant.status.as_ref().map(owned_status).unwrap_or_default();
    if desired != current {
        apply_status(
            &ctx.tenants(),
            &name_of(tenant)?,
            TENANT_CONTROLLER,
            &desired,
        )
        .await?;
    }
    Ok(())
}

/// Creates a run the rules asked for; returns it so this reconcile's status already counts it (`None`
/// when a previous reconcile or another replica made it first, which is the outcome we wanted).
async fn create_run(
    tenant: &Tenant,
    name: &str,
    action: RunAction,
    ctx: &Context,
) -> Result<Option<Arc<RunJob>>> {
    let run = new_run_job(tenant, name, action);
    match ctx.runjobs().create(&PostParams::default(), &run).await {
        Ok(created) => {
            let note = format!("Created {} run {name}", action.as_str());
            ctx.event(tenant, EventType::Normal, "RunCreated", note)
                .await;
            Ok(Some(Arc::new(created)))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::attempts::retry_delay;
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
        live.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at.parse().unwrap()),
        );
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
}
