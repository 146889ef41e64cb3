//! The runs the rules ask for, decided together from (tenant, runs, now) before anything is written.

use std::sync::Arc;

use jiff::Timestamp;

use super::copies::{consent_wake, delivery_needed};
use super::next_run::{automatic_provision, limits_run_needed, lock_run_needed, new_run_job};
use super::observed::Observed;
use super::rotation::{rotation_wake, scheduled_rotation};
use super::secret_loss::{holds_other_runs, secret_rotation};
use crate::controller::attempts::NextRun;
use crate::crd::{RunAction, RunJob, Tenant};

/// What rules 4, 6, 5, 11, 10 and 9 ask of a live tenant now.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RunPlan {
    /// The runs to create, in rule order: (name, action).
    pub start: Vec<(String, RunAction)>,
    /// The soonest retry no watch event will announce: when to reconcile again.
    pub wake_at: Option<Timestamp>,
}

/// Rules 4 (Suspend/Resume), 6 (SetLimits), 5 (Provision), 11 (a Rotate that makes a deleted
/// Secret again), 10 (a scheduled Rotate) and 9 (Deliver), in that order; each decides with the
/// runs the ones before it start counted as created, as they will be (a Rotate writes the copies
/// too, so no Deliver starts beside it). While the Secret is deleted, 10 and 9 wait.
pub fn runs_needed(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    observed: &Observed,
    now: Timestamp,
) -> RunPlan {
    let mut runs = runs.to_vec();
    let mut plan = RunPlan::default();
    let mut decide = |action: RunAction, next: NextRun, runs: &mut Vec<Arc<RunJob>>| match next {
        NextRun::Start(name) => {
            runs.push(Arc::new(new_run_job(tenant, &name, action)));
            plan.start.push((name, action));
        }
        next => {
            plan.wake_at = plan.wake_at.into_iter().chain(next.retry_at()).min();
        }
    };
    let (lock_action, next) = lock_run_needed(tenant, &runs, now);
    decide(lock_action, next, &mut runs);
    let next = limits_run_needed(tenant, &runs, now);
    decide(RunAction::SetLimits, next, &mut runs);
    let next = automatic_provision(tenant, &runs, now);
    decide(RunAction::Provision, next, &mut runs);
    let next = secret_rotation(tenant, &runs, observed.secret, now);
    decide(RunAction::Rotate, next, &mut runs);
    if holds_other_runs(observed.secret) {
        return plan;
    }
    let next = scheduled_rotation(tenant, &runs, now);
    decide(RunAction::Rotate, next, &mut runs);
    let next = delivery_needed(tenant, &runs, &observed.consents, now);
    decide(RunAction::Deliver, next, &mut runs);
    plan.wake_at = (plan.wake_at.into_iter())
        .chain(consent_wake(&observed.consents, now))
        .chain(rotation_wake(tenant, now))
        .min();
    plan
}
