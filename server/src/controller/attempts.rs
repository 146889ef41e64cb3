//! A tenant's attempts at one action, counted per generation: the next run's name, and when the next
//! attempt starts after a failed one. The Tenant reconciler's rules and its deletion (`reclaim`) share
//! them, and so does a click on the dashboard (it names the same run the reconciler would).

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use crate::crd::{ProvisioningPolicy, RunAction, RunJob, RunPhase, Tenant};
use crate::names::TenantName;

/// The serials of the runs the reconciler makes for generation `g` start at `g × 10` (so a name says
/// which spec it was made for while a generation has had fewer than ten attempts); every further
/// attempt takes the next serial free of the tenant's runs and history.
pub const FIRST_SERIAL_PER_GENERATION: u64 = 10;

/// One run of an action made for the tenant's current generation, live or recorded in its history.
pub struct Attempt {
    pub phase: Option<RunPhase>,
    /// When it finished (or, for a run deleted before it finished, when it was deleted).
    pub ended: Option<Timestamp>,
}

pub fn generation(tenant: &Tenant) -> u64 {
    tenant.metadata.generation.unwrap_or(1).max(0) as u64
}

/// The runs of `action` made for the tenant's current generation — by their
/// [`crate::labels::GENERATION`] label, or the history's `generation` once cleaned up. `runs` are
/// already this tenant's by uid ([`RunJob::is_for`]).
pub fn generation_attempts(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    action: RunAction,
) -> Vec<Attempt> {
    let generation = Some(generation(tenant));
    // A run being cleaned up is recorded before it is gone: count it once.
    let recorded_uid = |r: &RunJob| {
        let uid = r.metadata.uid.as_deref();
        tenant.history().iter().any(|h| Some(h.uid.as_str()) == uid)
    };
    let live = runs
        .iter()
        .filter(|r| r.spec.action == action && r.made_for_generation() == generation)
        .filter(|r| !recorded_uid(r))
        .map(|r| {
            let ended = r
                .status
                .as_ref()
                .and_then(|s| s.completion_time.as_ref())
                .or(r.metadata.deletion_timestamp.as_ref());
            Attempt {
                phase: r.phase(),
                ended: ended.map(|t| t.0),
            }
        });
    let recorded = tenant
        .history()
        .iter()
        .filter(|h| h.action == action && h.generation == generation)
        .map(|h| Attempt {
            phase: Some(h.phase),
            ended: Some(h.finished_at.0),
        });
    live.chain(recorded).collect()
}

/// The name of the next run of `action`: one past the highest serial among the tenant's live runs
/// and its history, and never below `first`. Two callers that see the same runs name the same run, so
/// a reconcile that races a click (or a reconcile that has not yet seen its own run) collides on
/// AlreadyExists instead of starting a second one.
fn next_run_name(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    action: RunAction,
    first: u64,
) -> Option<String> {
    let name = tenant.name_any();
    let prefix = format!("{name}-{}-", action.as_str().to_ascii_lowercase());
    let serial = |n: &str| n.strip_prefix(&prefix).and_then(|s| s.parse::<u64>().ok());
    let highest = runs
        .iter()
        .filter_map(|r| r.metadata.name.as_deref().and_then(serial))
        .chain(tenant.history().iter().filter_map(|h| serial(&h.name)))
        .max()
        .unwrap_or(0);
    let tenant_name = TenantName::parse(&name).ok()?;
    Some(tenant_name.run_job(action.as_str(), (highest + 1).max(first)))
}

/// How long after the `failures`th failed attempt in a row the next one starts: 15 s, doubling per
/// failure up to 5 minutes, of which the upper half is jittered. The jitter is a hash of the tenant's
/// uid, the action and the count, so every reconcile (and every replica) computes the same time for
/// one retry, while tenants that failed together in one outage come back spread out.
pub fn retry_delay(tenant: &Tenant, action: RunAction, failures: u64) -> SignedDuration {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    (tenant.uid().unwrap_or_default(), action.as_str(), failures).hash(&mut hasher);
    let jitter = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    let failures = u32::try_from(failures).unwrap_or(u32::MAX);
    let delay = super::backoff::delay(RETRY_BASE, failures, jitter);
    SignedDuration::try_from(delay).expect("a retry delay is minutes, not centuries")
}

/// The first retry's step: it starts 7.5 to 15 s after the failure.
const RETRY_BASE: std::time::Duration = std::time::Duration::from_secs(15);

/// The next run of an action the reconciler makes and retries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextRun {
    /// Nothing to start: not needed, in flight, or this generation's run succeeded.
    Idle,
    /// Start this run now.
    Start(String),
    /// The previous attempt failed; attempt number `attempt` (from 1) starts at `at`.
    RetryAt { attempt: u64, at: Timestamp },
}

impl NextRun {
    /// When the reconciler has to look again by itself (no watch event will say so).
    pub fn retry_at(&self) -> Option<Timestamp> {
        match self {
            NextRun::RetryAt { at, .. } => Some(*at),
            _ => None,
        }
    }
}

/// This generation's next attempt at `action`: the first at once, a failed one retried after
/// [`retry_delay`], with no limit on attempts — an outage of any length ends with the tenant in step,
/// while every failure stays visible on its condition; [`NextRun::Idle`] once one succeeded.
pub fn next_attempt(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    action: RunAction,
    now: Timestamp,
) -> NextRun {
    let attempts = generation_attempts(tenant, runs, action);
    if attempts
        .iter()
        .any(|a| a.phase == Some(RunPhase::Succeeded))
    {
        return NextRun::Idle;
    }
    let tried = attempts.len() as u64;
    let retry_at = attempts
        .iter()
        .filter_map(|a| a.ended)
        .max()
        .map(|ended| ended + retry_delay(tenant, action, tried))
        .filter(|at| *at > now);
    let first = generation(tenant) * FIRST_SERIAL_PER_GENERATION;
    match (retry_at, next_run_name(tenant, runs, action, first)) {
        (Some(at), _) => NextRun::RetryAt {
            attempt: tried + 1,
            at,
        },
        (None, Some(name)) => NextRun::Start(name),
        (None, None) => NextRun::Idle,
    }
}

/// What the reconciler does next about a failed run, for a condition's message.
pub fn what_next(next: &NextRun) -> String {
    match next {
        NextRun::RetryAt { attempt, at } => format!(
            "Attempt {attempt} starts at {} (retried until it succeeds)",
            at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
        NextRun::Start(_) => "The next attempt is starting".to_owned(),
        NextRun::Idle => "Nothing is retried".to_owned(),
    }
}

/// The name for a new run of `action` someone starts (a click): one past the highest serial among the
/// tenant's live runs and its history, so a retry after a failure gets a fresh name while two clicks
/// racing for the same name collide on AlreadyExists (and start one run). For an Automatic tenant's
/// Provision it is never below this generation's first serial, so a click racing the reconciler names
/// the same run.
pub fn next_run_by_hand(tenant: &Tenant, runs: &[Arc<RunJob>], action: RunAction) -> String {
    let first = match (action, tenant.spec.provisioning) {
        (RunAction::Provision, ProvisioningPolicy::Automatic) => {
            generation(tenant) * FIRST_SERIAL_PER_GENERATION
        }
        _ => 0,
    };
    next_run_name(tenant, runs, action, first).expect("stored tenants have valid names")
}
