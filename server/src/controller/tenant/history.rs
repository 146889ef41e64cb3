//! What a tenant's runs — live RunJobs and the history kept after their cleanup — say: the latest
//! finished run of an action, whether one is in flight, and what ClickHouse is known to enforce.
//! Facts only; the rules in `status.rs` and `next_run.rs` decide with them.

use std::sync::Arc;

use crate::crd::{RunAction, RunJob, RunPhase, RunRecord, Tenant, TenantLimits};
use jiff::Timestamp;

/// What the tenant's runs say about provisioning, reduced to what the phase needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProvisionRuns {
    /// A Provision run exists that has not finished.
    pub in_flight: bool,
    /// The most recently finished Provision run failed.
    pub latest_failed: bool,
}

/// A finished run, from a live RunJob or from the history kept after cleanup.
pub(super) struct Finished<'a> {
    pub(super) name: &'a str,
    pub(super) uid: &'a str,
    pub(super) phase: RunPhase,
    message: &'a str,
    pub(super) at: Option<Timestamp>,
}

/// Latest finished run of an action `of` accepts, considering both live RunJobs and the history on the
/// tenant.
pub(super) fn latest_finished<'a>(
    runs: &'a [Arc<RunJob>],
    history: &'a [RunRecord],
    of: impl Fn(RunAction) -> bool,
) -> Option<Finished<'a>> {
    let live = runs.iter().filter(|r| of(r.spec.action)).filter_map(|r| {
        let status = r.status.as_ref()?;
        let phase = status.phase.filter(|p| p.is_finished())?;
        Some(Finished {
            name: r.metadata.name.as_deref().unwrap_or_default(),
            uid: r.metadata.uid.as_deref().unwrap_or_default(),
            phase,
            message: status.message.as_deref().unwrap_or_default(),
            at: status.completion_time.as_ref().map(|t| t.0),
        })
    });
    let recorded = history.iter().filter(|h| of(h.action)).map(|h| Finished {
        name: &h.name,
        uid: &h.uid,
        phase: h.phase,
        message: &h.message,
        at: Some(h.finished_at.0),
    });
    // Kubernetes times have whole seconds, so two runs can finish "at once"; the later run has the
    // higher serial (a lock run's serial grows with the generation, a Provision run's with each retry).
    live.chain(recorded).max_by_key(|f| (f.at, serial(f.name)))
}

/// When the run `uid` finished, from a live RunJob or the history on the tenant.
pub(super) fn finished_at(
    runs: &[Arc<RunJob>],
    history: &[RunRecord],
    uid: &str,
) -> Option<Timestamp> {
    let live = runs.iter().find(|r| r.metadata.uid.as_deref() == Some(uid));
    let live = live.and_then(|r| r.status.as_ref()?.completion_time.as_ref());
    let recorded = history
        .iter()
        .find(|h| h.uid == uid)
        .map(|h| &h.finished_at);
    live.or(recorded).map(|t| t.0)
}

/// The number a run's name ends with (`acme-suspend-41` → 41); 0 for a name made by hand without one.
pub(super) fn serial(name: &str) -> u64 {
    name.rsplit('-')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub(super) fn latest_finished_provision<'a>(
    runs: &'a [Arc<RunJob>],
    history: &'a [RunRecord],
) -> Option<Finished<'a>> {
    latest_finished(runs, history, |a| a == RunAction::Provision)
}

pub(super) fn is_lock_action(action: RunAction) -> bool {
    matches!(action, RunAction::Suspend | RunAction::Resume)
}

pub(super) fn in_flight(runs: &[Arc<RunJob>], of: impl Fn(RunAction) -> bool) -> bool {
    runs.iter().any(|r| of(r.spec.action) && r.is_in_flight())
}

pub(super) fn is_limits_action(action: RunAction) -> bool {
    action == RunAction::SetLimits
}

/// Whether the provisioner's last report of what `of`'s runs change can be trusted: none of them is
/// in flight and the latest did not fail. Either may have changed ClickHouse without a report reaching
/// the status (a pod lost between the statement and the status write); then only a run can settle it.
pub(super) fn settled(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    of: impl Fn(RunAction) -> bool + Copy,
) -> bool {
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

/// "<Action> run <name> failed[: <message>]".
pub(super) fn describe_failure(action: &str, f: &Finished) -> String {
    if f.message.is_empty() {
        format!("{action} run {} failed", f.name)
    } else {
        format!("{action} run {} failed: {}", f.name, f.message)
    }
}

/// The latest failed run of `of`, described ("<Action> run <name> failed[: <message>]").
pub(super) fn latest_failure(
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

/// The next run of `action` that the reconciler starts by itself outside the per-generation
/// attempts (a Deliver, a scheduled Rotate): at once after a success, a failed one retried after
/// [`retry_delay`](crate::controller::attempts::retry_delay) counted from the failures since the
/// last run of it that succeeded.
pub(super) fn retried_since_success(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    action: RunAction,
    now: Timestamp,
) -> crate::controller::attempts::NextRun {
    use crate::controller::attempts::{NextRun, next_run_by_hand, retry_delay};
    let mut finished: Vec<(u64, RunPhase, Option<Timestamp>)> = runs
        .iter()
        .filter(|r| r.spec.action == action)
        .filter_map(|r| {
            let status = r.status.as_ref()?;
            let phase = status.phase.filter(|p| p.is_finished())?;
            let ended = status.completion_time.as_ref().map(|t| t.0);
            let name = r.metadata.name.as_deref().unwrap_or_default();
            Some((serial(name), phase, ended))
        })
        .chain(
            tenant
                .history()
                .iter()
                .filter(|h| h.action == action)
                .map(|h| (serial(&h.name), h.phase, Some(h.finished_at.0))),
        )
        .collect();
    finished.sort_by_key(|(serial, _, _)| std::cmp::Reverse(*serial));
    finished.dedup_by_key(|(serial, _, _)| *serial);
    let failed: Vec<_> = finished
        .iter()
        .take_while(|(_, phase, _)| *phase == RunPhase::Failed)
        .collect();
    let failures = failed.len() as u64;
    if let Some(ended) = failed.first().and_then(|(_, _, e)| *e) {
        let at = ended + retry_delay(tenant, action, failures);
        if at > now {
            return NextRun::RetryAt {
                attempt: failures + 1,
                at,
            };
        }
    }
    NextRun::Start(next_run_by_hand(tenant, runs, action))
}
