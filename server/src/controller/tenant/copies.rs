//! Rule 9: copies of the credentials where the tenant's applications run. Facts and decisions from
//! (tenant, runs, consents, now); the provisioner writes the copies and reports them in
//! `status.credentials`, this only decides when a Deliver run is due and what the
//! `CredentialsDelivered` condition says.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use super::history::{finished_at, in_flight, latest_finished, retried_since_success};
use crate::controller::attempts::NextRun;
use crate::crd::{
    ConditionStatus, CopyState, CopyStatus, CredentialsStatus, RunAction, RunJob, RunPhase, Tenant,
};

/// Whether each namespace consents to copies now, as the operator last asked the apiserver; a
/// namespace not in the map was not asked (nothing of it is out of date).
pub type Consents = BTreeMap<String, bool>;

/// How often a tenant waiting for a namespace's consent looks again: consent is a RoleBinding,
/// which the operator does not watch (it may not list RoleBindings), so it has to ask.
pub const CONSENT_RECHECK: SignedDuration = SignedDuration::from_secs(60);

/// The runs that write the credentials Secret or its copies, and report `status.credentials`.
pub fn writes_copies(action: RunAction) -> bool {
    matches!(
        action,
        RunAction::Provision | RunAction::Rotate | RunAction::Revoke | RunAction::Deliver
    )
}

/// A copy that is not as the spec wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfDate {
    pub namespace: String,
    pub secret_name: String,
    /// The spec no longer asks for it: it is to be deleted.
    pub removed: bool,
    /// What the provisioner last reported of it (`None`: never tried).
    pub state: Option<CopyState>,
    /// Its last report's message.
    pub message: String,
}

pub(super) fn reported(tenant: &Tenant) -> Option<&CredentialsStatus> {
    tenant.status.as_ref()?.credentials.as_ref()
}

/// The copies that are not as the spec asks: a spec entry with no report of being delivered for
/// this entry and these credentials, and a reported copy the spec no longer names.
pub fn out_of_date(tenant: &Tenant) -> Vec<OutOfDate> {
    let report = reported(tenant);
    let hash = report.map(|r| r.hash.as_str()).unwrap_or_default();
    let copies: &[CopyStatus] = report.map(|r| r.copies.as_slice()).unwrap_or_default();
    let find = |namespace: &str, name: &str| {
        copies
            .iter()
            .find(|c| c.namespace == namespace && c.secret_name == name)
    };
    let wanted = tenant.spec.credential_copies();
    let stale = wanted.iter().filter_map(|entry| {
        let last = find(&entry.namespace, &entry.secret_name);
        let current = last.is_some_and(|c| {
            c.state == CopyState::Delivered
                && c.entry_hash == entry.entry_hash()
                && c.credentials_hash.as_deref() == Some(hash)
                && !hash.is_empty()
        });
        (!current).then(|| OutOfDate {
            namespace: entry.namespace.clone(),
            secret_name: entry.secret_name.clone(),
            removed: false,
            state: last.map(|c| c.state),
            message: last.map(|c| c.message.clone()).unwrap_or_default(),
        })
    });
    let removed = copies
        .iter()
        .filter(|c| {
            !wanted
                .iter()
                .any(|w| w.namespace == c.namespace && w.secret_name == c.secret_name)
        })
        .map(|c| OutOfDate {
            namespace: c.namespace.clone(),
            secret_name: c.secret_name.clone(),
            removed: true,
            state: Some(c.state),
            message: c.message.clone(),
        });
    stale.chain(removed).collect()
}

/// The namespaces whose consent rule 9 needs to know now: those of out-of-date copies of a
/// provisioned tenant that is not being deleted.
pub fn namespaces_to_ask(tenant: &Tenant) -> Vec<String> {
    if !tenant.is_provisioned() || tenant.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let mut namespaces: Vec<String> = out_of_date(tenant)
        .into_iter()
        .map(|c| c.namespace)
        .collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
}

/// A conflict needs a person (a Secret of that name that is not ours): not retried by itself for
/// the entry and credentials it was found with; a Deliver click tries again.
fn needs_a_person(copy: &OutOfDate) -> bool {
    copy.state == Some(CopyState::Conflict) && !copy.removed
}

/// Rule 9: a provisioned tenant, not being deleted, with a copy out of date in a namespace that
/// consents gets a Deliver run — one run that writes copies at a time, and none while the tenant
/// does not yet show the report of the newest such run that finished (the cache can be behind the
/// run). A failed Deliver run is retried after [`retry_delay`], counted from the last that
/// succeeded; a copy without consent waits for it, which no watch event announces: the reconciler
/// looks again after [`CONSENT_RECHECK`].
pub fn delivery_needed(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    consents: &Consents,
    now: Timestamp,
) -> NextRun {
    if !tenant.is_provisioned() || tenant.metadata.deletion_timestamp.is_some() {
        return NextRun::Idle;
    }
    let due: Vec<OutOfDate> = out_of_date(tenant)
        .into_iter()
        .filter(|c| !needs_a_person(c))
        .filter(|c| consents.get(&c.namespace) == Some(&true))
        .collect();
    if due.is_empty() || in_flight(runs, writes_copies) || report_behind(tenant, runs) {
        return NextRun::Idle;
    }
    retried_since_success(tenant, runs, RunAction::Deliver, now)
}

/// Whether the newest finished run that writes copies succeeded without the tenant showing its
/// report yet. A tenant whose report names no run (written by hand, or before reports named their
/// run) is taken as it is. Kubernetes times have whole seconds: a report of a run that finished in
/// the same second as the newest is as new as can be told (two such runs, a Rotate applied by hand
/// beside a Deliver, would otherwise leave the tenant waiting for the other's report forever).
pub(super) fn report_behind(tenant: &Tenant, runs: &[Arc<RunJob>]) -> bool {
    let Some(written_by) = reported(tenant).and_then(|r| r.written_by.as_deref()) else {
        return false;
    };
    let Some(newest) = latest_finished(runs, tenant.history(), writes_copies) else {
        return false;
    };
    let reported_at = finished_at(runs, tenant.history(), written_by);
    let as_new = newest.uid == written_by || (reported_at.is_some() && reported_at == newest.at);
    newest.phase == RunPhase::Succeeded && !as_new
}

/// When a tenant waiting for a namespace's consent looks again: [`CONSENT_RECHECK`] from now.
pub fn consent_wake(consents: &Consents, now: Timestamp) -> Option<Timestamp> {
    consents
        .values()
        .any(|consents| !consents)
        .then(|| now + CONSENT_RECHECK)
}

/// The `CredentialsDelivered` condition: `None` when the tenant asks for no copy and has none.
pub fn delivery_condition(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    consents: &Consents,
    now: Timestamp,
) -> Option<(ConditionStatus, &'static str, String)> {
    let wanted = tenant.spec.credential_copies().len();
    let stale = out_of_date(tenant);
    if wanted == 0 && stale.is_empty() {
        return None;
    }
    if !tenant.is_provisioned() {
        return Some((
            ConditionStatus::False,
            "NotProvisioned",
            "Copies are written once the tenant is provisioned".to_owned(),
        ));
    }
    if stale.is_empty() {
        let places: Vec<String> = tenant
            .spec
            .credential_copies()
            .iter()
            .map(|c| format!("{}/{}", c.namespace, c.secret_name))
            .collect();
        return Some((
            ConditionStatus::True,
            "Delivered",
            format!("Copies up to date: {}", places.join(", ")),
        ));
    }
    let place = |c: &OutOfDate| format!("{}/{}", c.namespace, c.secret_name);
    let waiting: Vec<&OutOfDate> = stale
        .iter()
        .filter(|c| consents.get(&c.namespace) == Some(&false))
        .collect();
    let conflicts: Vec<&OutOfDate> = stale.iter().filter(|c| needs_a_person(c)).collect();
    let (reason, message) = if let Some(first) = conflicts.first() {
        ("Conflict", first.message.clone())
    } else if !waiting.is_empty() {
        let mut namespaces: Vec<&str> = waiting.iter().map(|c| c.namespace.as_str()).collect();
        namespaces.dedup();
        let install = tenant.metadata.namespace.as_deref().unwrap_or_default();
        let commands: Vec<String> = namespaces
            .iter()
            .map(|ns| format!("`sentry-tenants grant-credentials {ns} -n {install}`"))
            .collect();
        (
            "AwaitingConsent",
            format!(
                "Waiting for consent to {}: the namespace's owner runs {}",
                waiting
                    .iter()
                    .map(|c| place(c))
                    .collect::<Vec<_>>()
                    .join(", "),
                commands.join(" and ")
            ),
        )
    } else {
        match delivery_needed(tenant, runs, consents, now) {
            NextRun::RetryAt { attempt, at } => (
                "DeliveryFailed",
                format!(
                    "{}. Attempt {attempt} starts at {}",
                    stale
                        .iter()
                        .filter(|c| !c.message.is_empty())
                        .map(|c| format!("{}: {}", place(c), c.message))
                        .next()
                        .unwrap_or_else(|| "A Deliver run failed".to_owned()),
                    at.strftime("%Y-%m-%dT%H:%M:%SZ")
                ),
            ),
            _ => (
                "Delivering",
                format!(
                    "Writing {}",
                    stale.iter().map(place).collect::<Vec<_>>().join(", ")
                ),
            ),
        }
    };
    Some((ConditionStatus::False, reason, message))
}
