//! Rule 10: the credentials rotated on a schedule (`spec.credentials.rotation`). A Rotate run when
//! `every` has passed since the password last changed; the previous password keeps working for the
//! schedule's `overlap` (the provisioner reads it), so no application breaks while it rereads.

use std::sync::Arc;

use jiff::Timestamp;

use super::copies::{report_behind, reported, writes_copies};
use super::history::{in_flight, latest_failure, retried_since_success};
use crate::controller::attempts::{NextRun, what_next};
use crate::crd::{ConditionStatus, RunAction, RunJob, Tenant};

/// When the password last changed: the provisioner's report, else — credentials made before
/// reports said so, or taken over from a deleted tenant of this name — when the Tenant was created.
pub fn last_rotation(tenant: &Tenant) -> Option<Timestamp> {
    reported(tenant)
        .and_then(|r| r.rotated_at.as_ref())
        .or(tenant.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
}

/// When the next scheduled rotation is due, for a provisioned tenant with a schedule.
pub fn rotation_due(tenant: &Tenant) -> Option<Timestamp> {
    let every = tenant.spec.rotation_schedule()?.period()?;
    (tenant.is_provisioned() && tenant.metadata.deletion_timestamp.is_none())
        .then(|| last_rotation(tenant))
        .flatten()
        .map(|last| last + every)
}

/// Rule 10: a Rotate run once the rotation is due — one run that writes the credentials at a time,
/// none while the tenant does not yet show the newest such run's report (its `rotatedAt` would be
/// the old one), a failed one retried after the usual backoff.
pub fn scheduled_rotation(tenant: &Tenant, runs: &[Arc<RunJob>], now: Timestamp) -> NextRun {
    let Some(due) = rotation_due(tenant) else {
        return NextRun::Idle;
    };
    if now < due || in_flight(runs, writes_copies) || report_behind(tenant, runs) {
        return NextRun::Idle;
    }
    retried_since_success(tenant, runs, RunAction::Rotate, now)
}

/// When the reconciler wakes for the next rotation: its due time, while it is ahead.
pub fn rotation_wake(tenant: &Tenant, now: Timestamp) -> Option<Timestamp> {
    rotation_due(tenant).filter(|due| *due > now)
}

/// The `CredentialsRotation` condition, for a tenant with a schedule: when the password last
/// changed and when it is next due, or why the due rotation has not happened.
pub fn rotation_condition(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    now: Timestamp,
) -> Option<(ConditionStatus, &'static str, String)> {
    let schedule = tenant.spec.rotation_schedule()?;
    let time = |t: Timestamp| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let Some(due) = rotation_due(tenant) else {
        return Some((
            ConditionStatus::False,
            "NotProvisioned",
            format!(
                "Rotated every {} once the tenant is provisioned",
                schedule.every
            ),
        ));
    };
    let last = last_rotation(tenant).map(time).unwrap_or_default();
    if now < due {
        return Some((
            ConditionStatus::True,
            "Scheduled",
            format!(
                "Password last changed at {last}; the next rotation (every {}) is due at {}",
                schedule.every,
                time(due)
            ),
        ));
    }
    Some(match scheduled_rotation(tenant, runs, now) {
        next @ NextRun::RetryAt { .. } => (
            ConditionStatus::False,
            "RotationFailed",
            format!(
                "{}. {}",
                latest_failure(runs, tenant.history(), RunAction::Rotate, |a| {
                    a == RunAction::Rotate
                }),
                what_next(&next)
            ),
        ),
        _ => (
            ConditionStatus::False,
            "Rotating",
            format!("The rotation due at {} is under way", time(due)),
        ),
    })
}
