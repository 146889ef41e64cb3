//! Rules 2, 3, 7 and 8: the part of the status the Tenant controller owns — phase, conditions,
//! observedGeneration, syncedGeneration — computed from (tenant, runs, consents, now), never toggled.

use std::sync::Arc;

use jiff::Timestamp;

use super::copies::delivery_condition;
use super::history::*;
use super::next_run::{automatic_provision, next_limits_run, next_lock_run};
use super::observed::Observed;
use super::reclaim::{self, Reclaim};
use super::rotation::rotation_condition;
use super::secret_loss::{held_condition, holds_other_runs, secret_condition};
use crate::controller::attempts::{NextRun, what_next};
use crate::crd::{
    ConditionStatus, ProvisioningPolicy, RunAction, RunJob, RunRecord, Tenant, TenantPhase,
    TenantStatus, set_condition,
};

/// Where the copies of the credentials stand (rule 9).
pub const DELIVERED: &str = "CredentialsDelivered";
/// When the credentials were last rotated and are next due (rule 10).
pub const ROTATION: &str = "CredentialsRotation";
/// Whether the credentials Secret is there (rule 11).
pub const SECRET: &str = "CredentialsSecret";

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

/// The part of the status this controller owns: phase, observedGeneration and conditions. Every other
/// field is left out (the provisioner and the RunJob controller write those); see [`owned_status`].
pub fn desired_status(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    observed: &Observed,
    now: Timestamp,
) -> TenantStatus {
    let none = TenantStatus::default();
    let current = tenant.status.as_ref().unwrap_or(&none);
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

    let mut desired = owned_status(current);
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

    // Rules 9's and 10's conditions, which say what they wait for while rule 11 holds their runs.
    let held = |condition| match holds_other_runs(observed.secret) {
        true => held_condition(tenant, condition),
        false => condition,
    };
    let delivery = delivery_condition(tenant, runs, &observed.consents, now);
    set_or_remove(c, DELIVERED, held(delivery), generation, now);
    set_or_remove(
        c,
        ROTATION,
        held(rotation_condition(tenant, runs, now)),
        generation,
        now,
    );
    // Rule 11's condition, left as it was while the Secret's state is unknown.
    if let Some(secret) = secret_condition(tenant, runs, observed.secret, now) {
        set_or_remove(c, SECRET, Some(secret), generation, now);
    } else if !tenant.is_provisioned() {
        set_or_remove(c, SECRET, None, generation, now);
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

/// Sets the condition `type_` as the rule decided, or removes it when the rule has none to say.
fn set_or_remove(
    conditions: &mut Vec<crate::crd::Condition>,
    type_: &str,
    decided: Option<(ConditionStatus, &'static str, String)>,
    generation: Option<i64>,
    now: Timestamp,
) {
    match decided {
        Some((status, reason, message)) => {
            set_condition(conditions, type_, status, reason, &message, generation, now)
        }
        None => conditions.retain(|condition| condition.type_ != type_),
    }
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

/// The latest failed Provision run and, for an Automatic tenant, what happens next.
pub(super) fn failed_message(
    runs: &[Arc<RunJob>],
    history: &[RunRecord],
    automatic: &NextRun,
) -> String {
    let failed = latest_failure(runs, history, RunAction::Provision, |a| {
        a == RunAction::Provision
    });
    match automatic {
        NextRun::Idle => format!("{failed}. Fix the cause, then click Retry"),
        next => format!("{failed}. {}", what_next(next)),
    }
}

/// "<the latest failed run of `of`>. Attempt N starts at T" for a run the reconciler retries.
pub(super) fn retry_message(
    runs: &[Arc<RunJob>],
    history: &[RunRecord],
    action: RunAction,
    of: impl Fn(RunAction) -> bool,
    next: &NextRun,
) -> String {
    let failed = latest_failure(runs, history, action, of);
    format!("{failed}. {}", what_next(next))
}
