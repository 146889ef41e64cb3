//! Rule 11: a deleted credentials Secret. The operator may not read Secrets; the provisioner writes a
//! marker ConfigMap beside the Secret, owned by it, and reports the Secret's uid
//! (`status.credentials.secretUid`); the garbage collector deletes the marker with the Secret. A
//! provisioned tenant whose marker is gone is reported on the `CredentialsSecret` condition and,
//! with `spec.credentials.onSecretLoss: Rotate`, gets a Rotate run, which makes the Secret again with
//! a new password. Never a rotation the spec did not ask for: with `Report` a person starts it.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;

use super::copies::{report_behind, reported, writes_copies};
use super::history::{in_flight, latest_failure, retried_since_success};
use crate::controller::attempts::{NextRun, what_next};
use crate::crd::{
    ConditionStatus, OnSecretLoss, RunAction, RunJob, Tenant, marks_secret, secret_marker_name,
};

/// Where a tenant's credentials Secret stands, as its marker shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SecretState {
    /// Not known: no marker was reported (credentials written before markers existed, or not
    /// provisioned), the tenant is going, or the marker cache has not had its first list yet.
    #[default]
    Unknown,
    /// Its marker is there, owned by the Secret the status names.
    Present,
    /// Its marker is gone, or no longer owned by that Secret (an orphaning delete): the Secret is
    /// gone.
    Deleted,
}

/// The name of the marker to look for: that of the Secret the status names, for a provisioned
/// tenant that is not being deleted and whose provisioner reported one.
pub fn watched_marker(tenant: &Tenant) -> Option<String> {
    if !tenant.is_provisioned() || tenant.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let uid = reported(tenant)?.secret_uid.as_deref()?;
    Some(secret_marker_name(secret_name(tenant)?, uid))
}

/// The credentials Secret the provisioner reported.
fn secret_name(tenant: &Tenant) -> Option<&str> {
    let secret = tenant.status.as_ref()?.click_house_secret_ref.as_ref()?;
    Some(&secret.name)
}

/// Where the Secret stands, given the marker found under [`watched_marker`]'s name (`None`: none).
pub fn secret_state(tenant: &Tenant, marker: Option<&ConfigMap>) -> SecretState {
    let Some(uid) = reported(tenant).and_then(|r| r.secret_uid.as_deref()) else {
        return SecretState::Unknown;
    };
    match marker {
        Some(marker) if marks_secret(marker, uid) => SecretState::Present,
        _ => SecretState::Deleted,
    }
}

/// Rule 11: with `onSecretLoss: Rotate`, a deleted Secret gets a Rotate run — one run that writes
/// the credentials at a time, none while the tenant does not yet show the newest such run's report
/// (it would name the deleted Secret), a failed one retried after the usual backoff.
pub fn secret_rotation(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    secret: SecretState,
    now: Timestamp,
) -> NextRun {
    if secret != SecretState::Deleted
        || tenant.spec.on_secret_loss() != OnSecretLoss::Rotate
        || in_flight(runs, writes_copies)
        || report_behind(tenant, runs)
    {
        return NextRun::Idle;
    }
    retried_since_success(tenant, runs, RunAction::Rotate, now)
}

/// Whether rules 9 and 10 hold their runs: copies cannot be made from a deleted Secret, and a
/// scheduled rotation would make it again, which only `onSecretLoss: Rotate` (rule 11) may do.
pub fn holds_other_runs(secret: SecretState) -> bool {
    secret == SecretState::Deleted
}

/// The `CredentialsSecret` condition: `None` while the Secret's state is unknown (the condition
/// stays as it was).
pub fn secret_condition(
    tenant: &Tenant,
    runs: &[Arc<RunJob>],
    secret: SecretState,
    now: Timestamp,
) -> Option<(ConditionStatus, &'static str, String)> {
    let name = secret_name(tenant)?;
    match secret {
        SecretState::Unknown => None,
        SecretState::Present => Some((
            ConditionStatus::True,
            "Present",
            format!("Secret {name} holds the credentials"),
        )),
        SecretState::Deleted => {
            let remaking = in_flight(runs, |a| matches!(a, RunAction::Rotate | RunAction::Revoke));
            let next = secret_rotation(tenant, runs, secret, now);
            Some(match (tenant.spec.on_secret_loss(), next) {
                (_, NextRun::Idle) if remaking => remaking_condition(name),
                (OnSecretLoss::Report, _) => (
                    ConditionStatus::False,
                    "SecretDeleted",
                    format!(
                        "Secret {name} was deleted. The password still works in ClickHouse, but nobody can read it: start a Rotate run (the Rotate button, or a RunJob) to make the Secret again with a new password, or set spec.credentials.onSecretLoss: Rotate"
                    ),
                ),
                (OnSecretLoss::Rotate, next @ NextRun::RetryAt { .. }) => (
                    ConditionStatus::False,
                    "RemakeFailed",
                    format!(
                        "Secret {name} was deleted; making it again failed: {}. {}",
                        latest_failure(runs, tenant.history(), RunAction::Rotate, |a| {
                            a == RunAction::Rotate
                        }),
                        what_next(&next)
                    ),
                ),
                (OnSecretLoss::Rotate, _) => remaking_condition(name),
            })
        }
    }
}

fn remaking_condition(secret: &str) -> (ConditionStatus, &'static str, String) {
    (
        ConditionStatus::False,
        "Remaking",
        format!("Secret {secret} was deleted; a run is making it again with a new password"),
    )
}

/// Rules 9's and 10's conditions while [`holds_other_runs`]: what they wait for instead of the run
/// they would otherwise say is under way.
pub fn held_condition(
    tenant: &Tenant,
    condition: Option<(ConditionStatus, &'static str, String)>,
) -> Option<(ConditionStatus, &'static str, String)> {
    let secret = secret_name(tenant)?;
    condition.map(|(status, reason, message)| match status {
        ConditionStatus::True => (status, reason, message),
        _ => (
            ConditionStatus::False,
            "SecretDeleted",
            format!(
                "Waiting until Secret {secret} is made again (see the CredentialsSecret condition)"
            ),
        ),
    })
}
