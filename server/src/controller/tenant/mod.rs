//! The Tenant reconciler. Its rules:
//! 0. Of a sharded install (`--shards`), a shard reconciles only the tenants labelled for it; the main
//!    operator gives an unlabelled tenant its shard label and does nothing else ([`super::shards`]).
//! 1. A tenant being deleted waits for its runs in flight, gets its Deprovision run (its
//!    `reclaimPolicy` carried out in ClickHouse), and is released once that succeeded ([`reclaim`]).
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
//! 9. A provisioned tenant whose copy of its credentials (`spec.credentials.copies`) is out of date —
//!    never written, written for other credentials or another entry, or no longer asked for — in a
//!    namespace that consents now gets a Deliver run: one run that writes copies at a time, a failed
//!    one retried as in rule 4. A copy whose namespace has not consented starts nothing: the
//!    `CredentialsDelivered` condition names the namespace and the command that consents, and the
//!    tenant looks again every minute. A conflicting Secret (not ours) waits for a person.
//! 10. A provisioned tenant with `spec.credentials.rotation` gets a Rotate run once `every` has
//!     passed since its password last changed (`status.credentials.rotatedAt`): one run that writes
//!     the credentials at a time, a failed one retried as in rule 4; the `CredentialsRotation`
//!     condition says when it last changed and when it is next due.
//! 11. A provisioned tenant whose credentials Secret was deleted — the marker ConfigMap the
//!     provisioner wrote beside it, owned by it, gone with it — says so on the `CredentialsSecret`
//!     condition. With `spec.credentials.onSecretLoss: Rotate` it gets a Rotate run, which makes
//!     the Secret again with a new password (one run that writes the credentials at a time, a
//!     failed one retried as in rule 4); with `Report`, the default, a person starts it. Meanwhile
//!     rules 9 and 10 start nothing (there is nothing to copy; a rotation would make the Secret).
//!
//! It never claims Active on its own and never talks to ClickHouse.
//!
//! The rules are pure functions of (tenant, its runs, what was observed, now), one file per part:
//! `plan.rs` (which runs to start, rules 4–6 and 9–11, built on `next_run.rs`, `copies.rs`,
//! `rotation.rs` and `secret_loss.rs`), `status.rs` (rules 2, 3, 7), `reclaim.rs` (rule 1), over
//! the facts `history.rs` reads from the runs. `observed.rs` asks first what else they need: the
//! namespaces' consents (`controller::consent`), the Secret's marker. [`reconcile`] below only
//! carries out what they decide: create the runs, write the status if it changed (rule 8), wake for
//! the soonest retry.

mod copies;
mod history;
mod next_run;
mod observed;
mod plan;
pub mod reclaim;
mod rotation;
mod secret_loss;
mod status;

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::attempts::NextRun;
use super::shards::{self, Duty};
use super::{Context, Result, TENANT_CONTROLLER, apply_status, name_of, requeue_at};
use crate::crd::{RunAction, RunJob, Tenant};
pub use copies::{CONSENT_RECHECK, Consents, delivery_needed, out_of_date, writes_copies};
pub use history::{ProvisionRuns, enforced_limits, enforced_lock, provision_runs};
pub use next_run::{automatic_provision, limits_run_needed, lock_run_needed, new_run_job};
pub use observed::Observed;
pub use plan::{RunPlan, runs_needed};
use reclaim::Reclaim;
pub use rotation::{rotation_due, scheduled_rotation};
pub use secret_loss::{SecretState, secret_rotation, secret_state, watched_marker};
pub use status::{desired_status, owned_status, phase};

/// One reconcile of a Tenant: read its runs, let the rules decide, carry it out.
pub async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.is_leader() {
        return Ok(Action::await_change());
    }
    // Rule 0: this shard's tenants only; the main operator of a sharded install only labels them.
    match ctx.sharding.duty_for(&tenant) {
        Duty::Reconcile => {}
        Duty::Assign(shard) => return shards::assign(&tenant, &shard, &ctx).await,
        Duty::Unknown(shard) => return shards::report_unknown(&tenant, &shard, &ctx).await,
        Duty::None => return Ok(Action::await_change()),
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
    // Rule 9 needs to know whether the namespaces of out-of-date copies consent, rule 11 whether
    // the credentials Secret is still there.
    let observed = observed::observe(&tenant, &ctx).await?;
    // Rules 4, 6, 5, 11, 10, 9: decided together, then carried out.
    let plan = runs_needed(&tenant, &runs, &observed, now);
    // No run is made for a tenant before it carries the reclaim finalizer: a deletion meanwhile would
    // leave what the run created in ClickHouse behind.
    let finalized = reclaim::ensure_finalizer(&tenant, &ctx).await?;
    if finalized {
        for (run_name, action) in &plan.start {
            runs.extend(create_run(&tenant, run_name, *action, &ctx).await?);
        }
    }
    // Rules 2, 3, 7, 8, counting the runs just made.
    write_status(&tenant, &runs, &observed, now, &ctx).await?;
    // The retries no watch event will announce: the reconciler wakes for the soonest.
    Ok(match plan.wake_at {
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
    write_status(tenant, &runs, &Observed::default(), now, ctx).await?;
    Ok(reclaim::next_wake(&step, now))
}

/// Rules 2, 3, 7 and 8: the owned part of the status, written only when it changed.
async fn write_status(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    observed: &Observed,
    now: Timestamp,
    ctx: &Context,
) -> Result<()> {
    let desired = desired_status(tenant, runs, observed, now);
    let current = tenant.status.as_ref().map(owned_status).unwrap_or_default();
    if desired != current {
        let name = name_of(tenant)?;
        let apply = async {
            let written = apply_status(&ctx.tenants(), &name, TENANT_CONTROLLER, &desired).await?;
            Ok(Some(written))
        };
        ctx.sent_status.send(tenant, &desired, apply).await?;
    }
    Ok(())
}

/// Creates a run the rules asked for; returns it so this reconcile's status already counts it. When a
/// previous reconcile or another replica made it first (the outcome we wanted, which the run cache
/// has not shown yet), the run as we would have made it is returned all the same — started, not
/// finished: a status computed without it would say the tenant still waits for a run it has, and
/// be written only to be taken back. The next reconcile sees the run itself. (Not read back: that
/// would take a `get` on runjobs the operator's Role does not otherwise need.)
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
            ctx.run_event(tenant, &created, EventType::Normal, "RunCreated", note)
                .await;
            Ok(Some(Arc::new(created)))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(Arc::new(run))),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests;
