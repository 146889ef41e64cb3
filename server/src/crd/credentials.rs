//! `spec.credentials` of a Tenant: where copies of its credentials Secret go, for the applications
//! that run in other namespaces; and `status.credentialCopies`, what the provisioner delivered.
//!
//! A copy is written only where the namespace's owner consented: a RoleBinding in that namespace
//! that lets the provisioner write Secrets there (`sentry-tenants grant-credentials NAMESPACE`).
//! Nothing needs cluster-wide access to Secrets.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::names::DNS_LABEL_PATTERN;

/// Copies one Tenant may ask for.
pub const MAX_COPIES: usize = 16;
/// Labels, and annotations, one copy may add.
pub const MAX_COPY_METADATA: usize = 16;
/// The longest annotation value a copy may carry (Kubernetes allows 256 KiB for all of them; a copy's
/// are for tools like Reloader, which need a few words).
pub const MAX_ANNOTATION_VALUE: usize = 1024;

/// A label's or annotation's key: an optional DNS subdomain prefix and `/`, then a name of at most
/// 63 characters (Kubernetes' qualified name).
pub const QUALIFIED_NAME_PATTERN: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// A label's value: empty, or up to 63 letters, digits, `-`, `_`, `.`, starting and ending alphanumeric.
pub const LABEL_VALUE_PATTERN: &str = "^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$";
/// A Secret's name: a DNS subdomain.
pub const SECRET_NAME_PATTERN: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsSpec {
    /// Copies of the credentials Secret in other namespaces, kept equal to it (rotations included)
    /// and deleted with the Tenant or the entry. A namespace gets its copy once its owner consents:
    /// `sentry-tenants grant-credentials NAMESPACE`; until then the Tenant's `CredentialsDelivered`
    /// condition names it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A list keyed by (namespace, secretName): the apiserver refuses two entries for one place.
    #[schemars(length(max = MAX_COPIES))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace", "secretName"]))]
    pub copies: Vec<CredentialsCopy>,
    /// Rotate the password on a schedule: a Rotate run when `every` has passed since the last
    /// rotation (or since the credentials were made), the previous password kept for `overlap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotation: Option<RotationSchedule>,
    /// What happens when the credentials Secret is deleted: `Report` (the default) says so on the
    /// `CredentialsSecret` condition and waits for a person to start a Rotate run; `Rotate` starts
    /// one by itself. Either way the new password replaces every earlier one at once (their hashes
    /// were kept only in the Secret), and the copies follow in the same run.
    #[serde(default, skip_serializing_if = "OnSecretLoss::is_report")]
    pub on_secret_loss: OnSecretLoss,
}

/// What the operator does about a deleted credentials Secret.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnSecretLoss {
    /// Say so on the `CredentialsSecret` condition; a person starts the Rotate run.
    #[default]
    Report,
    /// Start a Rotate run, which writes a new Secret with a new password.
    Rotate,
}

impl OnSecretLoss {
    fn is_report(&self) -> bool {
        *self == Self::Report
    }
}

/// The name of the marker ConfigMap the provisioner writes beside the credentials Secret `secret`
/// whose uid is `uid`. The marker is owned by that Secret, so the garbage collector deletes it with
/// the Secret: the operator, which may not read Secrets, learns of the deletion from its ConfigMap
/// watch. The uid in the name gives a Secret made again under the same name a marker of its own.
pub fn secret_marker_name(secret: &str, uid: &str) -> String {
    format!("{secret}.{uid}")
}

/// The `app.kubernetes.io/component` of a marker: what the operator's ConfigMap watch selects.
pub const SECRET_MARKER_COMPONENT: &str = "credentials-marker";

/// Whether `marker` still stands for the Secret whose uid is `secret_uid`: it is owned by it (an
/// orphaning delete of the Secret leaves the marker without its owner reference).
pub fn marks_secret(marker: &ConfigMap, secret_uid: &str) -> bool {
    marker
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Secret" && o.uid == secret_uid)
}

/// When the credentials are rotated by themselves.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = durations_rule(
    &["self.every", "self.overlap"],
    "!has(self.overlap) || duration(self.overlap) < duration(self.every)",
).message("overlap must be shorter than every"))]
pub struct RotationSchedule {
    /// How often: `720h` (30 days), `168h`, `90m`; at least 1m, at most 9999h.
    #[schemars(pattern(DURATION_PATTERN))]
    #[x_kube(validation = durations_rule(&["self"], "duration(self) >= duration('1m')").message("every must be at least 1m"))]
    pub every: String,
    /// How long the previous password keeps working after a scheduled rotation, on ClickHouse
    /// servers that hold several passwords per user (`15m`, `1h`); absent: the tenant's
    /// `rotationGracePeriod`. Shorter than `every`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub overlap: Option<String>,
}

/// A duration in the spec: 1 to 4 digits and a unit, s, m or h (what CEL's `duration()` reads too).
pub const DURATION_PATTERN: &str = "^[0-9]{1,4}[smh]$";

impl RotationSchedule {
    /// `every` as a duration (`None` for what the schema would refuse).
    pub fn period(&self) -> Option<jiff::SignedDuration> {
        parse_duration(&self.every).filter(|d| d.as_secs() >= 60)
    }

    /// `overlap` as a duration, when given.
    pub fn overlap(&self) -> Option<jiff::SignedDuration> {
        self.overlap.as_deref().and_then(parse_duration)
    }
}

/// A CEL rule over durations that holds whenever one of `fields` is not a duration the pattern
/// admits: the pattern's own error says so, and CEL's `duration()` is never asked to read it (it
/// would add a conversion error to the answer).
fn durations_rule(fields: &[&str], rule: &str) -> kube::core::Rule {
    let unreadable: Vec<String> = fields
        .iter()
        .map(|f| {
            let present = f
                .rsplit_once('.')
                .map(|(obj, field)| format!("has({obj}.{field}) && "))
                .unwrap_or_default();
            format!("({present}!{f}.matches('{DURATION_PATTERN}'))")
        })
        .collect();
    kube::core::Rule::new(format!("{} || {rule}", unreadable.join(" || ")))
}

/// `30s`, `15m`, `720h`: 1 to 4 digits and a unit.
pub fn parse_duration(text: &str) -> Option<jiff::SignedDuration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: i64 = digits
        .parse()
        .ok()
        .filter(|_| (1..=4).contains(&digits.len()))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return None,
    };
    Some(jiff::SignedDuration::from_secs(seconds))
}

/// One copy of the credentials Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsCopy {
    /// The namespace the application runs in.
    #[schemars(length(min = 1, max = 63), pattern(DNS_LABEL_PATTERN))]
    pub namespace: String,
    /// The copy's name in that namespace, e.g. the name the application's Deployment mounts.
    #[schemars(length(min = 1, max = 253), pattern(SECRET_NAME_PATTERN))]
    pub secret_name: String,
    /// Labels the copy carries besides the operator's own (which these may not name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_COPY_METADATA))]
    #[x_kube(validation = keys_rule(" && k != 'app.kubernetes.io/managed-by'")
        .message("label keys must be qualified names (prefix/name), not sentry.io/ ones or app.kubernetes.io/managed-by"))]
    pub labels: BTreeMap<String, LabelValue>,
    /// Annotations the copy carries, e.g. for a tool that restarts the application on a change.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_COPY_METADATA))]
    #[x_kube(validation = keys_rule("")
        .message("annotation keys must be qualified names (prefix/name), not sentry.io/ ones"))]
    pub annotations: BTreeMap<String, AnnotationValue>,
}

/// The CEL rule a map of a copy's labels or annotations follows: every key a qualified name of at
/// most 253 characters, none of ours (`sentry.io/`), and `extra`.
fn keys_rule(extra: &str) -> kube::core::Rule {
    // CEL string literals take backslash escapes, so the pattern's own backslashes are doubled.
    let pattern = QUALIFIED_NAME_PATTERN.replace('\\', "\\\\");
    kube::core::Rule::new(format!(
        "self.all(k, k.size() <= 253 && k.matches('{pattern}') && !k.startsWith('sentry.io/'){extra})"
    ))
}

impl CredentialsCopy {
    /// What [`CopyStatus::entry_hash`] records: the SHA-256 (hex) of this entry as JSON, whose maps
    /// are ordered, so equal entries hash alike.
    pub fn entry_hash(&self) -> String {
        crate::digest::sha256_hex(serde_json::to_vec(self).expect("strings and maps serialize"))
    }
}

/// A label value of a copy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(transparent)]
pub struct LabelValue(#[schemars(length(max = 63), pattern(LABEL_VALUE_PATTERN))] pub String);

/// An annotation value of a copy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(transparent)]
pub struct AnnotationValue(#[schemars(length(max = MAX_ANNOTATION_VALUE))] pub String);

/// `status.credentials`: written by the provisioner alone, in the same status write as the rest of
/// its report, by every run that writes the credentials Secret or its copies (Provision, Rotate,
/// Revoke, Deliver).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    /// The SHA-256 of what a copy holds (the credentials' keys and values), so a copy can be seen to
    /// be up to date. Never a value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hash: String,
    /// The uid of the RunJob whose run wrote this report: until the tenant shows the report of its
    /// newest finished run, the reconciler waits rather than start another run from an older picture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    /// When the password last changed: a Provision run that made it, or a Rotate or Revoke run. The
    /// rotation schedule counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_at: Option<Time>,
    /// The uid of the credentials Secret this report is about. Beside it the provisioner wrote a
    /// marker ConfigMap owned by it ([`secret_marker_name`]); once the marker is gone, so is the
    /// Secret. Absent: written before markers existed, so a deletion is not watched (the next run
    /// that writes the credentials writes the marker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_uid: Option<String>,
    /// Where each copy stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_COPIES))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace", "secretName"]))]
    pub copies: Vec<CopyStatus>,
}

/// Where one copy stands, as the provisioner last found it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum CopyState {
    /// The copy holds the credentials whose hash `credentialsHash` names.
    Delivered,
    /// The namespace's owner has not let the provisioner write Secrets there.
    NoConsent,
    /// A Secret of that name exists and is not this tenant's copy: left alone.
    Conflict,
    /// The write failed for another reason (the message says which).
    Failed,
}

/// What the provisioner did with one copy (written by it alone, after each run that writes copies).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyStatus {
    pub namespace: String,
    pub secret_name: String,
    pub state: CopyState,
    /// The SHA-256 of the spec entry it was written for: a change of its labels or annotations makes
    /// it out of date.
    pub entry_hash: String,
    /// The SHA-256 of the credentials the copy holds: equal to `status.credentials.hash` when it is
    /// up to date. Never a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_hash: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub at: Time,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_secret_loss_is_written_out_only_when_it_is_not_the_default() {
        let with = |on_secret_loss| {
            serde_json::to_value(CredentialsSpec {
                on_secret_loss,
                ..CredentialsSpec::default()
            })
            .unwrap()
        };
        assert_eq!(with(OnSecretLoss::Report), serde_json::json!({}));
        assert_eq!(
            with(OnSecretLoss::Rotate),
            serde_json::json!({"onSecretLoss": "Rotate"})
        );
    }
}
