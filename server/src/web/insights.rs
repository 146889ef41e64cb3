//! What the overview's charts and its "needs attention" list show, computed from the caches: the
//! tenants (their histories keep finished runs after cleanup) and the live RunJobs. Pure functions of
//! those and the time, so tests pin their answers and the bench measures them at 10,000 tenants.

use std::collections::HashSet;
use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;
use sentry_tenants_app::model::{ActionDurations, Attention, HourBucket};

use crate::controller::concerns::concerns;
use crate::crd::{RunAction, RunJob, RunPhase, Tenant};

/// Hours the runs chart covers.
pub const HOURS: i64 = 24;
/// At most this many entries in the attention list (the total is shown beside it).
pub const ATTENTION_LIMIT: usize = 20;

/// A finished run, from a live RunJob or a tenant's history (each counted once, by uid).
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub action: RunAction,
    pub phase: RunPhase,
    pub started: Option<Timestamp>,
    pub finished: Timestamp,
}

pub fn finished_runs(tenants: &[Arc<Tenant>], runs: &[Arc<RunJob>]) -> Vec<Finished> {
    let mut out = Vec::new();
    // Live runs first; a history record of one of them (recorded just before its cleanup) is skipped.
    let mut live = HashSet::new();
    for r in runs {
        let Some(status) = &r.status else { continue };
        let (Some(phase), Some(done)) = (status.phase, &status.completion_time) else {
            continue;
        };
        if phase.is_finished() {
            live.insert(r.metadata.uid.as_deref().unwrap_or_default());
            out.push(Finished {
                action: r.spec.action,
                phase,
                started: status.start_time.as_ref().map(|t| t.0),
                finished: done.0,
            });
        }
    }
    for h in tenants.iter().flat_map(|t| t.history()) {
        if !live.contains(h.uid.as_str()) {
            out.push(Finished {
                action: h.action,
                phase: h.phase,
                started: h.started_at.as_ref().map(|t| t.0),
                finished: h.finished_at.0,
            });
        }
    }
    out
}

/// Runs finished in each of the last [`HOURS`] whole hours (the last one is the current hour, so
/// far), by outcome, oldest first.
pub fn runs_per_hour(finished: &[Finished], now: Timestamp) -> Vec<HourBucket> {
    let this_hour = now.as_second().div_euclid(3600) * 3600;
    let first = this_hour - (HOURS - 1) * 3600;
    let mut buckets: Vec<HourBucket> = (0..HOURS)
        .map(|i| HourBucket {
            start: Timestamp::from_second(first + i * 3600)
                .expect("an hour in range")
                .to_string(),
            succeeded: 0,
            failed: 0,
        })
        .collect();
    for f in finished {
        let offset = f.finished.as_second() - first;
        if !(0..HOURS * 3600).contains(&offset) {
            continue;
        }
        let bucket = &mut buckets[(offset / 3600) as usize];
        match f.phase {
            RunPhase::Failed => bucket.failed += 1,
            _ => bucket.succeeded += 1,
        }
    }
    buckets
}

/// Median and 95th percentile (nearest rank) of how long each action's runs took, for the actions
/// that have any, in [`RunAction::ALL`] order.
pub fn durations(finished: &[Finished]) -> Vec<ActionDurations> {
    let mut by_action: Vec<Vec<i64>> = vec![Vec::new(); RunAction::ALL.len()];
    for f in finished {
        let (Some(started), Some(i)) = (
            f.started,
            RunAction::ALL.iter().position(|a| *a == f.action),
        ) else {
            continue;
        };
        by_action[i].push(f.finished.duration_since(started).as_secs().max(0));
    }
    RunAction::ALL
        .iter()
        .zip(by_action)
        .filter(|(_, seconds)| !seconds.is_empty())
        .map(|(action, mut seconds)| {
            seconds.sort_unstable();
            ActionDurations {
                action: action.as_str().to_owned(),
                runs: seconds.len(),
                median_seconds: nearest_rank(&seconds, 50),
                p95_seconds: nearest_rank(&seconds, 95),
            }
        })
        .collect()
}

/// The `p`th percentile of sorted, non-empty `values` by the nearest-rank method.
pub fn nearest_rank(sorted: &[i64], p: usize) -> i64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// What someone should look at, most urgent first: tenants whose provisioning, locking, limits or
/// deletion gave up or is stuck, or whose credentials Secret was deleted, and runs whose latest attempt failed (still listed, not yet cleaned
/// up). Returns the first [`ATTENTION_LIMIT`] and how many there are in all.
pub fn attention(
    tenants: &[Arc<Tenant>],
    runs: &[Arc<RunJob>],
    now: Timestamp,
) -> (Vec<Attention>, usize) {
    let mut out: Vec<(u8, Attention)> = Vec::new();
    for t in tenants {
        out.extend(tenant_attention(t, now));
    }
    for r in runs {
        let Some(status) = &r.status else { continue };
        if status.phase == Some(RunPhase::Failed) {
            let name = r.name_any();
            out.push((
                3,
                Attention {
                    tenant: r.spec.tenant.clone(),
                    what: format!("{} run failed", r.spec.action.as_str()),
                    detail: status.message.clone().unwrap_or_default(),
                    href: format!("/runs/{name}"),
                },
            ));
        }
    }
    out.sort_by(|a, b| (a.0, &a.1.tenant).cmp(&(b.0, &b.1.tenant)));
    let total = out.len();
    (
        out.into_iter()
            .take(ATTENTION_LIMIT)
            .map(|(_, a)| a)
            .collect(),
        total,
    )
}

/// One tenant's entries, each with its urgency (lower first).
fn tenant_attention(t: &Tenant, now: Timestamp) -> Vec<(u8, Attention)> {
    let name = t.name_any();
    concerns(t, now)
        .into_iter()
        .map(|c| {
            let href = format!("/tenants/{name}");
            let (tenant, what, detail) = (name.clone(), c.what, c.detail);
            let attention = Attention {
                tenant,
                what,
                detail,
                href,
            };
            (c.urgency, attention)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn run(action: RunAction, phase: RunPhase, started: &str, finished: &str) -> Finished {
        Finished {
            action,
            phase,
            started: Some(at(started)),
            finished: at(finished),
        }
    }

    fn tenant(name: &str, status: serde_json::Value, deleted: Option<&str>) -> Arc<Tenant> {
        let mut t: Tenant = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {}, "status": status,
        }))
        .unwrap();
        if let Some(d) = deleted {
            t.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(d)));
        }
        Arc::new(t)
    }

    fn condition(type_: &str, reason: &str, message: &str, since: &str) -> serde_json::Value {
        serde_json::json!({"type": type_, "status": "False", "reason": reason, "message": message,
            "lastTransitionTime": since})
    }

    #[test]
    fn attention_lists_what_is_failing_or_stuck_most_urgent_first() {
        let now = at("2026-12-02T10:30:00Z");
        let tenants = [
            tenant(
                "slow",
                serde_json::json!({"phase": "Provisioning", "conditions": [
                condition("Ready", "Provisioning", "", "2026-12-02T10:10:00Z")]}),
                None,
            ),
            tenant(
                "fresh",
                serde_json::json!({"phase": "Provisioning", "conditions": [
                condition("Ready", "Provisioning", "", "2026-12-02T10:28:00Z")]}),
                None,
            ),
            tenant(
                "broken",
                serde_json::json!({"phase": "Failed", "conditions": [
                condition("Ready", "Failed", "Provision run broken-provision-13 failed: unreachable", "2026-12-02T10:00:00Z")]}),
                None,
            ),
            tenant(
                "locked",
                serde_json::json!({"phase": "Active", "conditions": [
                condition("AccessLocked", "LockFailed", "Suspend run locked-suspend-10 failed. Attempt 2 starts at …", "2026-12-02T10:00:00Z")]}),
                None,
            ),
            tenant(
                "gone",
                serde_json::json!({"phase": "Terminating", "conditions": [
                condition("Reclaimed", "DeprovisionRetrying", "Deprovision run gone-deprovision-10 failed. Attempt 2 starts at …", "2026-12-02T10:00:00Z")]}),
                Some("2026-12-02T10:15:00Z"),
            ),
            tenant(
                "capped",
                serde_json::json!({"phase": "Active", "conditions": [
                condition("LimitsEnforced", "ApplyFailed", "applying failed", "2026-12-02T10:00:00Z")]}),
                None,
            ),
            tenant(
                "lost",
                serde_json::json!({"phase": "Active", "conditions": [
                condition("CredentialsSecret", "SecretDeleted", "Secret lost-clickhouse was deleted. …", "2026-12-02T10:00:00Z")]}),
                None,
            ),
            tenant(
                "remaking",
                serde_json::json!({"phase": "Active", "conditions": [
                condition("CredentialsSecret", "Remaking", "a run is making it again", "2026-12-02T10:00:00Z")]}),
                None,
            ),
            tenant("fine", serde_json::json!({"phase": "Active"}), None),
        ];
        let run: RunJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
            "metadata": {"name": "fine-suspend-20", "namespace": "ns"},
            "spec": {"tenant": "fine", "action": "Suspend"},
            "status": {"phase": "Failed", "message": "clickhouse unreachable"},
        }))
        .unwrap();
        let (list, total) = attention(&tenants, &[Arc::new(run)], now);
        let seen: Vec<(&str, &str)> = list
            .iter()
            .map(|a| (a.tenant.as_str(), a.what.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("broken", "Provisioning failed"),
                ("gone", "Terminating for 15 min"),
                ("locked", "Logins not locked"),
                ("lost", "Credentials Secret deleted"),
                ("slow", "Provisioning for 20 min"),
                ("capped", "Limits not applied"),
                ("fine", "Suspend run failed"),
            ]
        );
        assert_eq!(total, 7);
        assert_eq!(
            list[0].detail,
            "Provision run broken-provision-13 failed: unreachable"
        );
        assert_eq!(list[0].href, "/tenants/broken");
        assert_eq!(list[6].href, "/runs/fine-suspend-20");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ten: Vec<i64> = (1..=10).collect();
        assert_eq!(nearest_rank(&ten, 50), 5);
        assert_eq!(nearest_rank(&ten, 95), 10);
        assert_eq!(nearest_rank(&[7], 95), 7);
        let hundred: Vec<i64> = (1..=100).collect();
        assert_eq!(
            (nearest_rank(&hundred, 50), nearest_rank(&hundred, 95)),
            (50, 95)
        );
    }

    #[test]
    fn runs_land_in_their_hour_and_old_ones_fall_out() {
        let now = at("2026-12-02T10:30:00Z");
        let finished = [
            run(
                RunAction::Provision,
                RunPhase::Succeeded,
                "2026-12-02T10:00:00Z",
                "2026-12-02T10:05:00Z",
            ),
            run(
                RunAction::Suspend,
                RunPhase::Failed,
                "2026-12-02T09:00:00Z",
                "2026-12-02T09:59:59Z",
            ),
            run(
                RunAction::Resume,
                RunPhase::Succeeded,
                "2026-12-01T11:00:00Z",
                "2026-12-01T11:00:00Z",
            ),
            run(
                RunAction::Resume,
                RunPhase::Succeeded,
                "2026-12-01T10:00:00Z",
                "2026-12-01T10:59:59Z",
            ),
        ];
        let hours = runs_per_hour(&finished, now);
        assert_eq!(hours.len(), 24);
        assert_eq!(hours[0].start, "2026-12-01T11:00:00Z");
        assert_eq!(hours[23].start, "2026-12-02T10:00:00Z");
        assert_eq!((hours[23].succeeded, hours[23].failed), (1, 0));
        assert_eq!((hours[22].succeeded, hours[22].failed), (0, 1));
        assert_eq!(hours[0].succeeded, 1, "the first hour's start is inside");
        let counted: usize = hours.iter().map(|h| h.succeeded + h.failed).sum();
        assert_eq!(counted, 3, "the run before the window is left out");
    }

    #[test]
    fn durations_are_per_action_in_a_fixed_order() {
        let mut finished: Vec<Finished> = (1..=20)
            .map(|s| {
                let end = format!("2026-12-02T10:00:{s:02}Z");
                run(
                    RunAction::Provision,
                    RunPhase::Succeeded,
                    "2026-12-02T10:00:00Z",
                    &end,
                )
            })
            .collect();
        finished.push(run(
            RunAction::Suspend,
            RunPhase::Failed,
            "2026-12-02T10:00:00Z",
            "2026-12-02T10:01:00Z",
        ));
        finished.push(Finished {
            started: None,
            ..run(
                RunAction::Rotate,
                RunPhase::Succeeded,
                "2026-12-02T10:00:00Z",
                "2026-12-02T10:00:00Z",
            )
        });
        let d = durations(&finished);
        assert_eq!(d.len(), 2, "Rotate had no start time: no duration");
        assert_eq!(
            (
                d[0].action.as_str(),
                d[0].runs,
                d[0].median_seconds,
                d[0].p95_seconds
            ),
            ("Provision", 20, 10, 19)
        );
        assert_eq!((d[1].action.as_str(), d[1].median_seconds), ("Suspend", 60));
    }
}
