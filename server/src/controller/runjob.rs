//! The RunJob reconciler. Each rule answers a bug named in the seed review:
//! 0. Of a sharded install, a run is reconciled by its tenant's shard, or by the main operator when
//!    its tenant is gone ([`super::shards`]).
//! 1. Deletion first: the Job is deleted in the Foreground, the finalizer removed once the Job and its
//!    pods are gone (a run stopped before it finished is kept in its tenant's history as failed), and
//!    the reconcile returns — nothing else runs for a RunJob that is going away.
//! 2. A RunJob carries our finalizer and is owned by its Tenant (our creators set both at birth).
//! 3. A run that has no Job yet fails with a clear message and no Job when its tenant is missing or
//!    being deleted (a Deprovision run: when its tenant is *not* being deleted); a run whose Job
//!    exists follows it to the end.
//! 4. Get-or-create: the Job's name is the RunJob's, AlreadyExists means "read it", and a Job not
//!    controlled by this RunJob is never adopted — no second Job, no AlreadyExists loop.
//! 5. Status follows the Job and is written only when it changed.
//! 6. Finished runs are cleaned up at `completionTime + ttlSecondsAfterFinished`: the outcome is
//!    recorded on the Tenant, then the RunJob is deleted; the controller requeues for that moment.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::job::build_job;
use super::slots::Admission;
use super::{
    Context, Result, is_controlled_by, name_of, patch_status_if_changed, replace_finalizers,
    requeue_at, write_params,
};
use crate::crd::HISTORY_LIMIT;
use crate::crd::{
    JobRef, RUNJOB_FINALIZER, RunAction, RunJob, RunJobStatus, RunPhase, RunRecord, Tenant,
    set_condition, to_k8s_time,
};

/// Lines of the pod's log kept with a finished run.
pub const LOG_TAIL_LINES: i64 = 20;
const LOG_TAIL_BYTES: i64 = 4096;

/// Rule 0's answer for a run.
enum Whose {
    /// Another operator's.
    Theirs,
    /// Ours (unsharded: every run; nothing looked up yet).
    Ours,
    /// Ours, decided on its tenant as looked up (kept for rule 3: one lookup, not two).
    OursWith(Option<Arc<Tenant>>),
}

/// Rule 0: a shard reconciles its tenants' runs; the main operator of a sharded install the runs whose
/// tenant is gone.
async fn whose(run: &RunJob, ctx: &Context) -> Result<Whose> {
    if !ctx.sharding.is_sharded() {
        return Ok(Whose::Ours);
    }
    let tenant = ctx.find_tenant(&run.spec.tenant).await?;
    Ok(if ctx.sharding.reconciles_runs_of(tenant.as_deref()) {
        Whose::OursWith(tenant)
    } else {
        Whose::Theirs
    })
}

pub async fn reconcile(run: Arc<RunJob>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.is_leader() {
        return Ok(Action::await_change());
    }
    let looked_up = match whose(&run, &ctx).await? {
        Whose::Theirs => return Ok(Action::await_change()),
        Whose::Ours => None,
        Whose::OursWith(tenant) => Some(tenant),
    };
    let _timer = ctx.metrics.reconcile_timer("runjob");
    // Rule 1.
    if run.meta().deletion_timestamp.is_some() {
        return finalize(&run, &ctx).await;
    }
    let tenant = match looked_up {
        Some(tenant) => tenant,
        None => ctx.find_tenant(&run.spec.tenant).await?,
    };
    // Rule 2.
    ensure_finalizer_and_owner(&run, tenant.as_deref(), &ctx).await?;
    // Rule 6.
    if run.is_finished() {
        return cleanup_when_due(&run, tenant.as_deref(), &ctx).await;
    }
    let now = ctx.clock.now();
    // A run whose Job exists follows it to the end, whatever happened to its tenant meanwhile: its pod
    // may be changing ClickHouse, and a tenant's Deprovision run waits for that to finish.
    let started = run.status.as_ref().is_some_and(|s| s.job_ref.is_some());
    let problem = (!started)
        .then(|| tenant_problem(&run, tenant.as_deref()))
        .flatten();
    let mut poll = Duration::from_secs(5);
    let desired = match problem {
        // Rule 3.
        Some(problem) => failed(&run, &problem, now),
        // Rules 4 and 5.
        None => match get_or_create_job(&run, &ctx).await? {
            JobLookup::Ours(job) => status_from_job(&run, &job, now),
            JobLookup::Foreign(job) => waiting_for_foreign_job(&run, &job),
            JobLookup::Queued => {
                // A freed slot wakes the queue's head; the poll is only the safety net.
                poll = QUEUED_POLL;
                queued(&run, ctx.slots.cap())
            }
            JobLookup::Vanished => failed(&run, "its Job was deleted before it finished", now),
        },
    };
    let desired = with_pod_outcome(&run, desired, &ctx).await;
    let name = name_of(run.as_ref())?;
    let runs = ctx.runjobs();
    let patch = patch_status_if_changed(&runs, &name, run.status.as_ref(), &desired);
    if ctx.sent_status.send(run.as_ref(), &desired, patch).await? {
        announce_transition(&run, tenant.as_deref(), &desired, &ctx).await;
        if desired.phase.is_some_and(RunPhase::is_finished) {
            // Its slot is free: the oldest queued run takes it.
            wake_queued(&ctx);
        }
    }
    Ok(match desired.cleanup_at.as_ref() {
        Some(at) => requeue_at(at.0, ctx.clock.now()),
        None if desired.phase == Some(RunPhase::Pending) && desired.job_ref.is_none() => {
            // Waiting for a foreign Job to go away (nothing else will wake us), or for a slot, in
            // case one freed in a way no reconcile saw (a Job deleted by hand).
            Action::requeue(poll)
        }
        None => Action::await_change(),
    })
}

/// How often a queued run looks for a free slot by itself.
const QUEUED_POLL: Duration = Duration::from_secs(30);

/// Rule 1: stop the Job, keep the run's outcome, and drop the finalizer once the Job is gone. The Job is
/// deleted in the Foreground (the batch/v1 default, Orphan, would leave its pods running): it stays,
/// marked deleted, until the garbage collector has deleted its pods. Until then the run stays too,
/// unfinished — its pod may still be changing ClickHouse, and a deleted tenant's Deprovision run waits
/// for it (see `reclaim`).
async fn finalize(run: &RunJob, ctx: &Context) -> Result<Action> {
    if !run.finalizers().iter().any(|f| f == RUNJOB_FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = name_of(run)?;
    let job = lookup_job(&name, ctx).await?;
    if let Some(job_uid) = owned_job_uid(run, job.as_deref()) {
        let ours = job.filter(|j| j.uid().as_deref() == Some(job_uid.as_str()));
        if let Some(job) = ours.as_deref().filter(|j| !is_deleted(j))
            && !run.is_finished()
        {
            keep_outcome_of_job(run, job, ctx).await?;
        }
        if job_stopping(&name, &job_uid, ours.as_deref(), ctx).await? {
            // The Job's deletion wakes this run: it owns the Job.
            return Ok(Action::await_change());
        }
        keep_outcome(run, outcome(run, ctx.clock.now()), ctx).await?;
    }
    let remaining = super::without(run.finalizers(), RUNJOB_FINALIZER);
    replace_finalizers(&ctx.runjobs(), run, remaining).await?;
    ctx.sent_status.forget(&run.uid().unwrap_or_default());
    if !run.is_finished() {
        // A run deleted before it finished gives its slot back.
        wake_queued(ctx);
    }
    Ok(Action::await_change())
}

/// Deletes `job` — the Job `job_uid` this run created, as the cache or the API has it — and says
/// whether it is still there: being deleted, its pods not gone yet. The uid precondition makes sure the
/// DELETE reaches the Job this run created, never a same-named other (409: that one is not ours, and
/// ours is gone).
async fn job_stopping(name: &str, job_uid: &str, job: Option<&Job>, ctx: &Context) -> Result<bool> {
    match job {
        None => return Ok(false),
        Some(job) if is_deleted(job) => return Ok(true),
        Some(_) => {}
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(job_uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::foreground()
    };
    match ctx.jobs().delete(name, &params).await {
        // The apiserver answers with the object while it waits for the garbage collector, with a
        // Status once the object is gone.
        Ok(answer) => Ok(answer.left().is_some_and(|job| is_deleted(&job))),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// What a deleted run that made a Job leaves in its tenant's history: its outcome once it finished;
/// before that, failed — its pod was stopped, and may have changed ClickHouse first, so the tenant
/// must not forget it (a deleted tenant's Deprovision run comes for a Provision run stopped midway as
/// for one that failed, see `reclaim`).
fn outcome(run: &RunJob, now: Timestamp) -> RunJobStatus {
    match run.status.as_ref() {
        Some(status) if run.is_finished() => status.clone(),
        _ => failed(run, STOPPED, now),
    }
}

/// A Job that finished before its run said so (the run was deleted before its reconcile copied the
/// Job's status) gives the run its outcome, kept before the Job is deleted: afterwards only "stopped"
/// could be told.
async fn keep_outcome_of_job(run: &RunJob, job: &Job, ctx: &Context) -> Result<()> {
    let from_job = status_from_job(run, job, ctx.clock.now());
    if !from_job.phase.is_some_and(RunPhase::is_finished) {
        return Ok(());
    }
    let from_job = with_pod_outcome(run, from_job, ctx).await;
    keep_outcome(run, from_job, ctx).await
}

/// Keeps `outcome` as the run's record in its tenant's history, unless the tenant has one already
/// (rule 6 writes it before deleting a run; a run deleted otherwise — by hand, or by the garbage
/// collector with its tenant — would lose it). The cache may not show a record just written: a tenant
/// without it is read again from the API before anything is written.
async fn keep_outcome(run: &RunJob, outcome: RunJobStatus, ctx: &Context) -> Result<()> {
    let uid = run.uid().unwrap_or_default();
    let recorded = |t: &Tenant| t.history().iter().any(|h| h.uid == uid);
    let cached = ctx.find_tenant(&run.spec.tenant).await?;
    let Some(cached) = cached.filter(|t| run.is_for(t)) else {
        return Ok(());
    };
    if recorded(&cached) {
        return Ok(());
    }
    // `record_in_history` writes nothing when the current copy has the record.
    let current = ctx.tenants().get_opt(&name_of(cached.as_ref())?).await?;
    let Some(tenant) = current.filter(|t| run.is_for(t)) else {
        return Ok(());
    };
    let mut kept = run.clone();
    kept.status = Some(outcome);
    record_in_history(&tenant, &kept, ctx).await
}

/// Why a run deleted before it finished failed.
pub const STOPPED: &str = "deleted before it finished; its pod was stopped";

fn is_deleted(job: &Job) -> bool {
    job.metadata.deletion_timestamp.is_some()
}

/// The uid of the Job this run controls, if one exists: from the status, else the Job the cache or the
/// API has under the run's name, if the run controls it.
fn owned_job_uid(run: &RunJob, job: Option<&Job>) -> Option<String> {
    if let Some(job_ref) = run.status.as_ref().and_then(|s| s.job_ref.as_ref()) {
        return Some(job_ref.uid.clone());
    }
    let run_uid = run.uid().unwrap_or_default();
    job.filter(|j| is_controlled_by(*j, &run_uid))
        .and_then(|j| j.uid())
}

/// Rule 2, for RunJobs made by hand: one patch adds what is missing, none when nothing is.
async fn ensure_finalizer_and_owner(
    run: &RunJob,
    tenant: Option<&Tenant>,
    ctx: &Context,
) -> Result<()> {
    let has_finalizer = run.finalizers().iter().any(|f| f == RUNJOB_FINALIZER);
    // Only a run of this very tenant is tied to it (a leftover of an earlier same-named one is not).
    let tenant = tenant.filter(|t| run.is_for(t));
    let tenant_uid = tenant.and_then(|t| t.uid());
    // A Deprovision run names its tenant by a label: an owner reference would let a foreground
    // deletion of the tenant delete the run meant to release it.
    let tie = if run.spec.action == RunAction::Deprovision {
        Tie::Label
    } else {
        Tie::Owner
    };
    let tied = tenant_uid.as_deref().is_none_or(|uid| match tie {
        Tie::Owner => run.owner_references().iter().any(|o| o.uid == uid),
        Tie::Label => {
            run.labels()
                .get(crate::labels::TENANT_UID)
                .map(String::as_str)
                == Some(uid)
        }
    });
    if has_finalizer && tied {
        return Ok(());
    }
    let mut finalizers = run.finalizers().to_vec();
    if !has_finalizer {
        finalizers.push(RUNJOB_FINALIZER.to_owned());
    }
    let mut metadata = json!({
        "resourceVersion": run.resource_version(),
        "finalizers": finalizers,
    });
    if !tied && let Some(tenant) = tenant {
        match tie {
            Tie::Owner => {
                let mut owners = run.owner_references().to_vec();
                owners.extend(tenant.owner_ref(&()));
                metadata["ownerReferences"] = json!(owners);
            }
            Tie::Label => {
                metadata["labels"] = json!({ crate::labels::TENANT_UID: tenant.uid() });
            }
        }
    }
    let patch = json!({ "metadata": metadata });
    ctx.runjobs()
        .patch(&name_of(run)?, &write_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// How a run is tied to its tenant.
enum Tie {
    Owner,
    Label,
}

/// Rule 3: why this run cannot start, if it cannot. A Deprovision run is the one run that needs its
/// tenant being deleted.
fn tenant_problem(run: &RunJob, tenant: Option<&Tenant>) -> Option<String> {
    let namespace = run.namespace().unwrap_or_default();
    let name = &run.spec.tenant;
    let deprovision = run.spec.action == RunAction::Deprovision;
    match tenant {
        None => Some(format!(
            "tenant {name:?} does not exist in namespace {namespace:?}"
        )),
        Some(t) if !run.is_for(t) => Some(format!(
            "the tenant {name:?} this run was made for was deleted (a new tenant has its name)"
        )),
        Some(t) => match (t.meta().deletion_timestamp.is_some(), deprovision) {
            (true, false) => Some(format!("tenant {name:?} is being deleted")),
            (false, true) => Some(format!(
                "tenant {name:?} is not being deleted: a Deprovision run only carries out the reclaim policy of a deleted Tenant"
            )),
            _ => None,
        },
    }
}

enum JobLookup {
    /// The Job this RunJob controls.
    Ours(Arc<Job>),
    /// A same-named Job controlled by something else (e.g. an older RunJob's, still terminating).
    Foreign(Arc<Job>),
    /// The run had created a Job, and it is gone before the run finished.
    Vanished,
    /// No Job yet, and none may be made now: the runs in flight are at the cap (see `slots`).
    Queued,
}

/// Rule 4. Never a blind create: a re-reconcile, a restart or a second replica finds the Job by name.
async fn get_or_create_job(run: &RunJob, ctx: &Context) -> Result<JobLookup> {
    let run_uid = run.uid().unwrap_or_default();
    let name = name_of(run)?;
    let classify = |job: Arc<Job>| {
        if is_controlled_by(job.as_ref(), &run_uid) {
            JobLookup::Ours(job)
        } else {
            JobLookup::Foreign(job)
        }
    };
    let created_before = run.status.as_ref().is_some_and(|s| s.job_ref.is_some());
    if let Some(job) = ctx
        .stores
        .jobs
        .get(&ObjectRef::new(&name).within(&ctx.config.shared.namespace))
    {
        return Ok(classify(job));
    }
    if created_before {
        return Ok(match ctx.jobs().get_opt(&name).await? {
            Some(job) => classify(Arc::new(job)),
            None => JobLookup::Vanished,
        });
    }
    if ctx.slots.admit(run, &ctx.stores) == Admission::Wait {
        return Ok(JobLookup::Queued);
    }
    match ctx
        .jobs()
        .create(&PostParams::default(), &build_job(run, &ctx.config))
        .await
    {
        Ok(job) => {
            ctx.metrics.jobs_created.inc();
            ctx.event(
                run,
                EventType::Normal,
                "JobCreated",
                format!("Created Job {name}"),
            )
            .await;
            Ok(JobLookup::Ours(Arc::new(job)))
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Ok(classify(Arc::new(ctx.jobs().get(&name).await?)))
        }
        Err(e) => Err(e.into()),
    }
}

/// A Job from the cache, or from the API when the cache has not seen it (yet).
async fn lookup_job(name: &str, ctx: &Context) -> Result<Option<Arc<Job>>> {
    Ok(super::cached_or_fetched(
        &ctx.stores.jobs,
        &ctx.jobs(),
        &ctx.config.shared.namespace,
        name,
    )
    .await?)
}

/// Rule 5: the RunJob's status as a function of its Job.
pub fn status_from_job(run: &RunJob, job: &Job, now: Timestamp) -> RunJobStatus {
    let mut status = run.status.clone().unwrap_or_default();
    status.job_ref = Some(JobRef {
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
    });
    let job_status = job.status.clone().unwrap_or_default();
    status.start_time = job_status.start_time.clone();
    if let Some(done) = super::job::succeeded(job) {
        let at = done
            .last_transition_time
            .or(job_status.completion_time.clone())
            .map_or(now, |t| t.0);
        return finished(
            status,
            run,
            RunPhase::Succeeded,
            "Run succeeded".to_owned(),
            at,
        );
    }
    if let Some(fail) = super::job::failed(job) {
        let at = fail.last_transition_time.map_or(now, |t| t.0);
        let reason = fail.reason.unwrap_or_else(|| "Failed".into());
        let message = match fail.message {
            Some(m) if !m.is_empty() => format!("Job failed ({reason}): {m}"),
            _ => format!("Job failed ({reason})"),
        };
        return finished(status, run, RunPhase::Failed, message, at);
    }
    let running = job_status.active.unwrap_or(0) > 0;
    let (phase, message) = if running {
        (RunPhase::Running, "Job is running")
    } else {
        (RunPhase::Pending, "Job is waiting for its pod")
    };
    status.phase = Some(phase);
    status.message = Some(message.to_owned());
    set_finished_condition(&mut status, run, false, phase.as_str(), message, now);
    status
}

fn finished(
    mut status: RunJobStatus,
    run: &RunJob,
    phase: RunPhase,
    message: String,
    at: Timestamp,
) -> RunJobStatus {
    let at = to_k8s_time(at);
    let ttl = SignedDuration::from_secs(i64::from(run.spec.ttl_seconds_after_finished));
    status.phase = Some(phase);
    status.cleanup_at = Some(to_k8s_time(at.0.checked_add(ttl).unwrap_or(at.0)));
    status.completion_time = Some(at.clone());
    set_finished_condition(&mut status, run, true, phase.as_str(), &message, at.0);
    status.message = Some(message);
    status
}

fn set_finished_condition(
    status: &mut RunJobStatus,
    run: &RunJob,
    done: bool,
    reason: &str,
    msg: &str,
    now: Timestamp,
) {
    set_condition(
        &mut status.conditions,
        "Finished",
        done.into(),
        reason,
        msg,
        run.meta().generation,
        now,
    );
}

/// Rule 3's outcome, and the outcome of a Job that vanished: Failed, with the reason as the message.
fn failed(run: &RunJob, message: &str, now: Timestamp) -> RunJobStatus {
    finished(
        run.status.clone().unwrap_or_default(),
        run,
        RunPhase::Failed,
        format!("Run failed: {message}"),
        now,
    )
}

/// Pending without a Job: the stable message says why, so waiting writes nothing more.
fn queued(run: &RunJob, cap: usize) -> RunJobStatus {
    let mut status = run.status.clone().unwrap_or_default();
    status.phase = Some(RunPhase::Pending);
    status.message = Some(format!(
        "queued: {cap} runs are in flight, the most --max-concurrent-runs allows; runs start oldest first as others finish"
    ));
    status
}

/// Reconciles the queued runs that may take the slots free now.
fn wake_queued(ctx: &Context) {
    ctx.slots
        .wake_next(&ctx.config.shared.namespace, &ctx.stores);
}

fn waiting_for_foreign_job(run: &RunJob, job: &Job) -> RunJobStatus {
    let mut status = run.status.clone().unwrap_or_default();
    status.phase = Some(RunPhase::Pending);
    status.message = Some(format!(
        "waiting for Job {} (uid {}), which this RunJob does not control, to be deleted",
        job.name_any(),
        job.uid().unwrap_or_default()
    ));
    status
}

/// When a run has just finished, keep what its pod said: the termination message (the provisioner's
/// classified error) becomes the message, and the last log lines are kept. Best effort: a run whose pod
/// is already gone still finishes.
async fn with_pod_outcome(run: &RunJob, mut desired: RunJobStatus, ctx: &Context) -> RunJobStatus {
    let just_finished = desired.phase.is_some_and(RunPhase::is_finished) && !run.is_finished();
    let Some(job_ref) = desired.job_ref.as_ref().filter(|_| just_finished) else {
        return desired;
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.shared.namespace);
    let selector = format!("batch.kubernetes.io/job-name={}", job_ref.name);
    let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await else {
        return desired;
    };
    let Some(pod) = list
        .items
        .into_iter()
        .max_by_key(|p| p.metadata.creation_timestamp.clone())
    else {
        return desired;
    };
    let terminated_message = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty());
    if let (Some(msg), Some(RunPhase::Failed)) = (terminated_message, desired.phase) {
        desired.message = Some(msg);
    }
    let params = LogParams {
        tail_lines: Some(LOG_TAIL_LINES),
        limit_bytes: Some(LOG_TAIL_BYTES),
        ..LogParams::default()
    };
    // The log comes from the pod's node through the apiserver: a node that stopped answering must not
    // hold this reconcile (and with it a graceful shutdown) forever. The tail is a courtesy.
    let read = tokio::time::timeout(LOG_READ_TIMEOUT, pods.logs(&pod.name_any(), &params)).await;
    if let Ok(Ok(log)) = read {
        desired.log_tail = Some(log);
    }
    desired
}

/// How long a finished run waits for its pod's log tail before recording the run without it.
const LOG_READ_TIMEOUT: Duration = Duration::from_secs(10);

async fn announce_transition(
    run: &RunJob,
    tenant: Option<&Tenant>,
    desired: &RunJobStatus,
    ctx: &Context,
) {
    let before = run.phase();
    let Some(after) = desired
        .phase
        .filter(|p| Some(*p) != before && p.is_finished())
    else {
        return;
    };
    let message = desired.message.clone().unwrap_or_default();
    let (type_, reason) = match after {
        RunPhase::Succeeded => (EventType::Normal, "RunSucceeded"),
        _ => (EventType::Warning, "RunFailed"),
    };
    ctx.metrics
        .runs_finished
        .get_or_create(&crate::telemetry::PhaseLabel::new(after.as_str()))
        .inc();
    let note = format!(
        "{} run {}: {message}",
        run.spec.action.as_str(),
        run.name_any()
    );
    ctx.event(run, type_, reason, note.clone()).await;
    if let Some(tenant) = tenant {
        ctx.run_event(tenant, run, type_, reason, note).await;
    }
}

/// Rule 6.
async fn cleanup_when_due(run: &RunJob, tenant: Option<&Tenant>, ctx: &Context) -> Result<Action> {
    let now = ctx.clock.now();
    let due = cleanup_at(run, now);
    if now < due {
        return Ok(requeue_at(due, now));
    }
    // A run of an earlier tenant of the same name is no part of this one's history.
    let tenant = tenant.filter(|t| run.is_for(t));
    if let Some(tenant) = tenant {
        record_in_history(tenant, run, ctx).await?;
    }
    let name = name_of(run)?;
    match ctx
        .runjobs()
        .delete(&name, &DeleteParams::background())
        .await
    {
        Ok(_) => {
            ctx.metrics.cleanups.inc();
            if let Some(tenant) = tenant {
                let note = format!(
                    "Cleaned up finished {} run {name}",
                    run.spec.action.as_str()
                );
                ctx.run_event(tenant, run, EventType::Normal, "RunCleanedUp", note)
                    .await;
            }
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

/// When a finished run is deleted: `status.cleanupAt`, or (for a status written without one) its
/// completion time plus the TTL.
pub fn cleanup_at(run: &RunJob, now: Timestamp) -> Timestamp {
    let status = run.status.as_ref();
    if let Some(at) = status.and_then(|s| s.cleanup_at.as_ref()) {
        return at.0;
    }
    let done = status
        .and_then(|s| s.completion_time.as_ref())
        .map_or(now, |t| t.0);
    done.checked_add(SignedDuration::from_secs(i64::from(
        run.spec.ttl_seconds_after_finished,
    )))
    .unwrap_or(done)
}

/// Keeps the run's outcome on the Tenant before the RunJob goes. Idempotent by uid. The patch adds the
/// record in front and drops what falls past [`HISTORY_LIMIT`], without sending the other records (the
/// cache keeps them without their log tails, see [`super::slim_tenant`]); its resourceVersion makes a
/// patch computed from a stale copy a conflict, never a record dropped or a second copy.
pub async fn record_in_history(tenant: &Tenant, run: &RunJob, ctx: &Context) -> Result<()> {
    let record = run_record(run);
    if tenant.history().iter().any(|h| h.uid == record.uid) {
        return Ok(());
    }
    let mut ops = vec![json!({
        "op": "replace", "path": "/metadata/resourceVersion", "value": tenant.resource_version(),
    })];
    let kept = tenant.history().len();
    if tenant.status.is_none() {
        ops.push(json!({ "op": "add", "path": "/status", "value": { "history": [record] } }));
    } else if kept == 0 {
        ops.push(json!({ "op": "add", "path": "/status/history", "value": [record] }));
    } else {
        ops.push(json!({ "op": "add", "path": "/status/history/0", "value": record }));
        // Only the newest record keeps a log tail: the one before it gives its up (the cache marks a
        // tail it dropped with an empty one, so this knows it is there; the resourceVersion guards it).
        if tenant.history()[0].log_tail.is_some() {
            ops.push(json!({ "op": "remove", "path": "/status/history/1/logTail" }));
        }
        // After the add there are kept + 1; the oldest past the limit go, last index first.
        for index in (HISTORY_LIMIT..=kept).rev() {
            ops.push(json!({ "op": "remove", "path": format!("/status/history/{index}") }));
        }
    }
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).expect("well-formed JSON patch");
    match ctx
        .tenants()
        .patch_status(
            &name_of(tenant)?,
            &write_params(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A history record's message is cut to this many bytes (the whole message stays in the run's Event).
pub const HISTORY_MESSAGE_BYTES: usize = 256;
/// The newest record keeps the last this-many bytes of its pod's log; older records keep none.
pub const HISTORY_LOG_TAIL_BYTES: usize = 2048;

/// The outcome of `run` as its Tenant's history keeps it: sized so that a full history (with
/// [`HISTORY_LIMIT`] records of the longest messages) keeps the Tenant under 16 KiB in etcd, where every
/// watcher and every list of tenants pays for its bytes.
pub fn run_record(run: &RunJob) -> RunRecord {
    let status = run.status.clone().unwrap_or_default();
    RunRecord {
        name: run.name_any(),
        uid: run.uid().unwrap_or_default(),
        action: run.spec.action,
        phase: status.phase.unwrap_or(RunPhase::Failed),
        message: head(&status.message.unwrap_or_default(), HISTORY_MESSAGE_BYTES),
        started_at: status.start_time,
        finished_at: status
            .completion_time
            .unwrap_or_else(|| to_k8s_time(Timestamp::UNIX_EPOCH)),
        log_tail: status
            .log_tail
            .map(|log| tail(&log, HISTORY_LOG_TAIL_BYTES)),
        generation: run.made_for_generation(),
    }
}

/// The first `max` bytes of `text` (on a character boundary), "…" marking a cut.
fn head(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The last `max` bytes of `text` (on a character boundary), "…" marking a cut.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - (max - '…'.len_utf8());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_message_is_cut_at_its_head_on_a_character_boundary_with_a_mark() {
        assert_eq!(head("abcdef", 6), "abcdef");
        assert_eq!(head("abcdefgh", 6), "abc…");
        // "é" is two bytes: a cut that would fall inside one moves before it.
        assert_eq!(head("aéébbbb", 6), "aé…");
        assert_eq!(head("aaéébbb", 6), "aa…");
        assert!(head(&"x".repeat(1000), HISTORY_MESSAGE_BYTES).len() <= HISTORY_MESSAGE_BYTES);
    }

    #[test]
    fn a_kept_log_is_cut_at_its_tail_on_a_character_boundary_with_a_mark() {
        assert_eq!(tail("abcdef", 6), "abcdef");
        assert_eq!(tail("abcdefgh", 6), "…fgh");
        assert_eq!(tail("bbbbééa", 6), "…éa");
        assert_eq!(tail("bbbééaa", 6), "…aa");
    }
}
