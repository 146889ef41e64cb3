//! Rules 4, 5 and 6: the run a tenant needs next — Suspend/Resume, SetLimits, Provision — or when the
//! next attempt at one is due; and the RunJob such a run is.

use std::sync::Arc;

use jiff::Timestamp;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::history::*;
use crate::controller::attempts::{NextRun, generation, next_attempt};
use crate::crd::{
    ProvisioningPolicy, RUNJOB_FINALIZER, RunAction, RunJob, RunJobSpec, Tenant, TenantLimits,
};

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
pub(super) fn next_lock_run(
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

pub(super) fn next_limits_run(
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
pub(super) fn next_sync_run(
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
