//! What the overview's charts and its "needs attention" list show: the charts from the finished-run
//! counts kept beside the caches (`controller::finished_runs`), the list from the tenants and runs
//! the indexes say may need attention. Pure functions of those and the time, so tests pin their
//! answers and the bench measures them at scale.

use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;
use sentry_tenants_app::model::{ActionDurations, Attention, HourBucket};

use crate::controller::concerns::concerns;
use crate::controller::finished_runs::{Durations, hour_of};
use crate::crd::{RunJob, RunPhase, Tenant};

/// Hours the runs chart covers.
pub const HOURS: i64 = 24;
/// At most this many entries in the attention list (the total is shown beside it).
pub const ATTENTION_LIMIT: usize = 20;

/// The first second of the first of the chart's [`HOURS`] whole hours (the current hour is the last).
pub fn first_hour(now: Timestamp) -> i64 {
    hour_of(now) - (HOURS - 1) * 3600
}

/// The runs chart: how many runs finished in each hour from `first`, by outcome, oldest first.
pub fn runs_per_hour(counts: &[[usize; 2]], first: i64) -> Vec<HourBucket> {
    (0i64..)
        .zip(counts)
        .map(|(i, [succeeded, failed])| HourBucket {
            start: Timestamp::from_second(first + i * 3600)
                .expect("an hour in range")
                .to_string(),
            succeeded: *succeeded,
            failed: *failed,
        })
        .collect()
}

/// Median and 95th percentile (nearest rank) of how long each action's runs took, from how many
/// runs took each number of seconds, for the actions that have any.
pub fn durations(taken: &Durations) -> Vec<ActionDurations> {
    taken
        .iter()
        .map(|(action, histogram)| ActionDurations {
            action: action.as_str().to_owned(),
            runs: histogram.iter().map(|(_, n)| n).sum(),
            median_seconds: nearest_rank(histogram, 50),
            p95_seconds: nearest_rank(histogram, 95),
        })
        .collect()
}

/// The `p`th percentile, by the nearest-rank method, of the values a non-empty histogram counts
/// (value, how many), in ascending order of value.
pub fn nearest_rank(histogram: &[(i64, usize)], p: usize) -> i64 {
    let all: usize = histogram.iter().map(|(_, n)| n).sum();
    let rank = (p * all).div_ceil(100).max(1);
    let mut seen = 0;
    for (value, n) in histogram {
        seen += n;
        if seen >= rank {
            return *value;
        }
    }
    histogram.last().map_or(0, |(v, _)| *v)
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
    use crate::controller::FinishedRuns;
    use crate::controller::finished_runs::Finished;
    use crate::crd::{RunAction, RunRecord};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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
        let once = |values: std::ops::RangeInclusive<i64>| -> Vec<(i64, usize)> {
            values.map(|v| (v, 1)).collect()
        };
        let ten = once(1..=10);
        assert_eq!(nearest_rank(&ten, 50), 5);
        assert_eq!(nearest_rank(&ten, 95), 10);
        assert_eq!(nearest_rank(&[(7, 1)], 95), 7);
        let hundred = once(1..=100);
        assert_eq!(
            (nearest_rank(&hundred, 50), nearest_rank(&hundred, 95)),
            (50, 95)
        );
        // 5, 5, 5, 9: the second and the fourth.
        let repeated = [(5, 3), (9, 1)];
        assert_eq!(
            (nearest_rank(&repeated, 50), nearest_rank(&repeated, 95)),
            (5, 9)
        );
    }

    /// The finished-run counts of a tenant whose history holds `runs`.
    fn counted(runs: &[Finished]) -> FinishedRuns {
        let history: Vec<RunRecord> = runs
            .iter()
            .enumerate()
            .map(|(i, f)| RunRecord {
                name: format!("acme-suspend-{i}"),
                uid: format!("uid-{i}"),
                action: f.action,
                phase: f.phase,
                message: String::new(),
                started_at: f.started.map(Time),
                finished_at: Time(f.finished),
                log_tail: None,
                generation: None,
            })
            .collect();
        let status = serde_json::json!({ "history": history });
        let counts = FinishedRuns::default();
        let acme = tenant("acme", status, None);
        counts.tenant_event(&kube::runtime::watcher::Event::Apply((*acme).clone()));
        counts
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
        let first = first_hour(now);
        let hours = runs_per_hour(&counted(&finished).per_hour("ns", first, HOURS), first);
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
        let d = durations(&counted(&finished).durations("ns"));
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
