//! Rule 1 of the Tenant reconciler: deletion with a reclaim policy.
//!
//! Every live Tenant carries [`TENANT_FINALIZER`]. When one is deleted:
//! - a tenant no run ever touched ClickHouse for (never provisioned, no Provision run live or
//!   recorded) is released at once;
//! - otherwise its runs finish first — or, deleted before they finished, are gone: a run being deleted
//!   keeps its finalizer until its Job and the Job's pods are gone, and a Provision pod still running
//!   could create the user after a Deprovision dropped it — then a `Deprovision` run carries out `spec.reclaimPolicy` — one at a
//!   time, a failed one retried like every reconciler-made run (15 s doubling to 5 minutes, jittered,
//!   with no limit on attempts), the reason and the next attempt's time on the `Reclaimed` condition —
//!   and the finalizer goes only once one succeeded.
//!
//! A Deprovision run is not owned by its Tenant: a foreground deletion would have the garbage
//! collector delete it before it ran. It names its Tenant by uid in a label instead.

use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::controller::attempts::{NextRun, next_attempt, what_next};
use crate::controller::{Context, Result, replace_finalizers, requeue_at, without};
use crate::crd::{RunAction, RunJob, TENANT_FINALIZER, Tenant};

/// What a deleted tenant waits for, or may do, now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reclaim {
    /// Nothing (left) to do in ClickHouse: remove the finalizer.
    Release,
    /// A run of another action has not finished (it may be stopping: deleted, its pod not gone yet);
    /// the Deprovision run starts after it.
    WaitForRun(String),
    /// The Deprovision run in flight.
    InFlight(String),
    /// The next Deprovision attempt.
    Next(NextRun),
}

pub(super) fn carries_finalizer(tenant: &Tenant) -> bool {
    tenant.finalizers().iter().any(|f| f == TENANT_FINALIZER)
}

/// Whether any run may have changed ClickHouse for this tenant: it was provisioned, or a Provision
/// run exists or is recorded (a failed one may have created the user before it failed).
fn touched_clickhouse(tenant: &Tenant, runs: &[Arc<RunJob>]) -> bool {
    tenant.is_provisioned()
        || runs.iter().any(|r| r.spec.action == RunAction::Provision)
        || tenant
            .history()
            .iter()
            .any(|h| h.action == RunAction::Provision)
}

/// What deleting `tenant` needs now; `runs` are this tenant's (see [`RunJob::is_for`]).
pub fn reclaim_step(tenant: &Tenant, runs: &[Arc<RunJob>], now: Timestamp) -> Reclaim {
    if !touched_clickhouse(tenant, runs) {
        return Reclaim::Release;
    }
    // Not `is_in_flight`: a run deleted before it finished is still here while its pod may run.
    let unfinished = |deprovision: bool| {
        runs.iter()
            .find(|r| (r.spec.action == RunAction::Deprovision) == deprovision && !r.is_finished())
            .map(|r| r.name_any())
    };
    if let Some(run) = unfinished(false) {
        return Reclaim::WaitForRun(run);
    }
    if let Some(run) = unfinished(true) {
        return Reclaim::InFlight(run);
    }
    match next_attempt(tenant, runs, RunAction::Deprovision, now) {
        NextRun::Idle => Reclaim::Release,
        next => Reclaim::Next(next),
    }
}

/// The `Reclaimed` condition of a tenant being deleted: (reason, message).
pub fn reclaim_condition(tenant: &Tenant, step: &Reclaim, last_failure: &str) -> (String, String) {
    let policy = tenant.spec.reclaim_policy.as_str();
    let (reason, message) = match step {
        Reclaim::Release => ("Reclaimed", format!("reclaimPolicy {policy} carried out")),
        Reclaim::WaitForRun(run) => (
            "WaitingForRun",
            format!(
                "Run {run} has not finished; the Deprovision run (reclaimPolicy {policy}) starts once it has, or once it and its pod are gone"
            ),
        ),
        Reclaim::InFlight(run) | Reclaim::Next(NextRun::Start(run)) => (
            "Deprovisioning",
            format!("Deprovision run {run} is carrying out reclaimPolicy {policy}"),
        ),
        Reclaim::Next(next @ (NextRun::RetryAt { .. } | NextRun::Idle)) => (
            "DeprovisionRetrying",
            format!(
                "{last_failure}. {}: fix the cause (or remove the finalizer {TENANT_FINALIZER} to delete the Tenant \
                 without carrying out reclaimPolicy {policy})",
                what_next(next)
            ),
        ),
    };
    (reason.to_owned(), message)
}

/// A live tenant gets the finalizer before any run is made for it. Returns whether it carries it: not
/// when this copy of the tenant is out of date (a conflict), and a newer one is on its way.
pub async fn ensure_finalizer(tenant: &Tenant, ctx: &Context) -> Result<bool> {
    if carries_finalizer(tenant) {
        return Ok(true);
    }
    let mut finalizers = tenant.finalizers().to_vec();
    finalizers.push(TENANT_FINALIZER.to_owned());
    match replace_finalizers(&ctx.tenants(), tenant, finalizers).await {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes our finalizer (and only ours); the apiserver then deletes the Tenant, and the garbage
/// collector what it owns.
pub async fn release(tenant: &Tenant, ctx: &Context) -> Result<Action> {
    let remaining = without(tenant.finalizers(), TENANT_FINALIZER);
    replace_finalizers(&ctx.tenants(), tenant, remaining).await?;
    ctx.sent_status.forget(&tenant.uid().unwrap_or_default());
    Ok(Action::await_change())
}

/// `name`, or the first name after it with a higher serial that no run in `taken` has.
pub fn unclaimed(name: &str, taken: &[String]) -> String {
    let (prefix, serial) = name
        .rsplit_once('-')
        .expect("a run name ends with its serial");
    let mut serial: u64 = serial.parse().expect("a run name ends with its serial");
    loop {
        let candidate = format!("{prefix}-{serial}");
        if !taken.contains(&candidate) {
            return candidate;
        }
        serial += 1;
    }
}

/// When to wake up for a deleted tenant: at a retry's time, else on the next change.
pub fn next_wake(step: &Reclaim, now: Timestamp) -> Action {
    match step {
        Reclaim::Next(NextRun::RetryAt { at, .. }) => requeue_at(*at, now),
        _ => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_unclaimed_name_skips_the_serials_other_runs_hold() {
        let taken = [
            "acme-deprovision-20".to_owned(),
            "acme-deprovision-21".to_owned(),
        ];
        assert_eq!(
            super::unclaimed("acme-deprovision-20", &taken),
            "acme-deprovision-22"
        );
        assert_eq!(
            super::unclaimed("acme-deprovision-30", &taken),
            "acme-deprovision-30"
        );
    }
}
