//! What about a tenant needs a person: provisioning, locking, limits or deletion that gave up or is
//! stuck, a deleted credentials Secret. The dashboard's "needs attention" list shows these; the tenant
//! index keeps the tenants that have one now or will have one if nothing changes (a phase that becomes
//! stuck by lasting), so the list reads those and not the whole fleet.

use jiff::{SignedDuration, Timestamp};

use crate::crd::{Tenant, TenantPhase};

/// How long a tenant may sit Provisioning or Terminating before it is listed as stuck.
pub const STUCK_AFTER: SignedDuration = SignedDuration::from_mins(10);

/// One thing to look at, with its urgency (lower first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concern {
    pub urgency: u8,
    pub what: String,
    pub detail: String,
}

impl Concern {
    fn new(urgency: u8, what: String, detail: String) -> Self {
        Self {
            urgency,
            what,
            detail,
        }
    }
}

/// Whether `t` has a concern now, or will have one if nothing about it changes.
pub fn may_concern(t: &Tenant) -> bool {
    !concerns(t, Timestamp::MAX).is_empty()
}

/// `t`'s concerns at `now`.
pub fn concerns(t: &Tenant, now: Timestamp) -> Vec<Concern> {
    let condition = |type_: &str| {
        t.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
    };
    let mut out = Vec::new();
    let since = |at: Timestamp| now.duration_since(at);
    match t.phase() {
        Some(TenantPhase::Failed) => {
            let detail = condition("Ready").map(|c| c.message.clone());
            out.push(Concern::new(
                0,
                "Provisioning failed".into(),
                detail.unwrap_or_default(),
            ));
        }
        Some(TenantPhase::Provisioning) => {
            let entered = condition("Ready").map(|c| c.last_transition_time.0);
            if let Some(at) = entered.filter(|at| since(*at) > STUCK_AFTER) {
                out.push(Concern::new(
                    1,
                    format!("Provisioning for {}", minutes(since(at))),
                    "A Provision run has not finished: see its pod".into(),
                ));
            }
        }
        Some(TenantPhase::Terminating) => {
            let reclaimed = condition("Reclaimed");
            let failed = reclaimed.is_some_and(|c| c.reason == "DeprovisionRetrying");
            let deleted = t.metadata.deletion_timestamp.as_ref().map(|d| d.0);
            let stuck = deleted.is_some_and(|at| since(at) > STUCK_AFTER);
            if failed || stuck {
                let what = match deleted {
                    Some(at) => format!("Terminating for {}", minutes(since(at))),
                    None => "Terminating".into(),
                };
                let detail = reclaimed.map(|c| c.message.clone()).unwrap_or_default();
                out.push(Concern::new(if failed { 0 } else { 1 }, what, detail));
            }
        }
        _ => {}
    }
    if let Some(c) = condition("AccessLocked")
        && matches!(c.reason.as_str(), "LockFailed" | "UnlockFailed")
    {
        let what = if c.reason == "LockFailed" {
            "Logins not locked"
        } else {
            "Logins not unlocked"
        };
        out.push(Concern::new(0, what.into(), c.message.clone()));
    }
    if let Some(c) = condition("LimitsEnforced")
        && c.reason == "ApplyFailed"
    {
        out.push(Concern::new(
            2,
            "Limits not applied".into(),
            c.message.clone(),
        ));
    }
    // An application that restarts now finds no credentials to read.
    if let Some(c) = condition("CredentialsSecret")
        && matches!(c.reason.as_str(), "SecretDeleted" | "RemakeFailed")
    {
        out.push(Concern::new(
            0,
            "Credentials Secret deleted".into(),
            c.message.clone(),
        ));
    }
    out
}

fn minutes(d: SignedDuration) -> String {
    format!("{} min", d.as_secs() / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant in `phase` whose `Ready` condition changed at `since`, deleted at `deleted`.
    fn tenant(phase: TenantPhase, since: &str, deleted: Option<&str>) -> Tenant {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "namespace": "ns", "deletionTimestamp": deleted},
            "spec": {},
            "status": {"phase": phase.as_str(), "conditions": [
                {"type": "Ready", "status": "False", "reason": "Waiting", "message": "",
                 "lastTransitionTime": since},
            ]},
        }))
        .unwrap()
    }

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    fn whats(t: &Tenant, now: &str) -> Vec<(u8, String)> {
        concerns(t, at(now))
            .into_iter()
            .map(|c| (c.urgency, c.what))
            .collect()
    }

    #[test]
    fn provisioning_is_a_concern_only_after_ten_minutes() {
        let t = tenant(TenantPhase::Provisioning, "2026-12-05T10:00:00Z", None);
        assert!(whats(&t, "2026-12-05T10:05:00Z").is_empty());
        assert!(
            whats(&t, "2026-12-05T10:10:00Z").is_empty(),
            "ten minutes exactly"
        );
        assert_eq!(
            whats(&t, "2026-12-05T10:10:01Z"),
            [(1, "Provisioning for 10 min".to_owned())]
        );
        assert!(may_concern(&t), "it will be one if nothing changes");
    }

    #[test]
    fn a_deleted_tenant_is_a_concern_only_after_ten_minutes_terminating() {
        let t = tenant(
            TenantPhase::Terminating,
            "2026-12-05T10:00:00Z",
            Some("2026-12-05T10:00:00Z"),
        );
        assert!(whats(&t, "2026-12-05T10:05:00Z").is_empty());
        assert!(
            whats(&t, "2026-12-05T10:10:00Z").is_empty(),
            "ten minutes exactly"
        );
        assert_eq!(
            whats(&t, "2026-12-05T10:11:00Z"),
            [(1, "Terminating for 11 min".to_owned())]
        );
    }

    /// A Deprovision run that fails is a concern at once, the most urgent kind, with its message.
    #[test]
    fn a_failing_deprovision_is_a_concern_before_ten_minutes() {
        let mut t = tenant(
            TenantPhase::Terminating,
            "2026-12-05T10:00:00Z",
            Some("2026-12-05T10:00:00Z"),
        );
        let conditions = &mut t.status.as_mut().unwrap().conditions;
        conditions.push(
            serde_json::from_value(serde_json::json!({
                "type": "Reclaimed", "status": "False", "reason": "DeprovisionRetrying",
                "message": "ClickHouse refused DROP USER", "lastTransitionTime": "2026-12-05T10:00:30Z",
            }))
            .unwrap(),
        );
        let found = concerns(&t, at("2026-12-05T10:01:00Z"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (
                found[0].urgency,
                found[0].what.as_str(),
                found[0].detail.as_str()
            ),
            (0, "Terminating for 1 min", "ClickHouse refused DROP USER")
        );
    }

    #[test]
    fn an_active_tenant_never_is() {
        let t = tenant(TenantPhase::Active, "2026-12-05T10:00:00Z", None);
        assert!(whats(&t, "2026-12-06T10:00:00Z").is_empty());
        assert!(!may_concern(&t));
    }
}
