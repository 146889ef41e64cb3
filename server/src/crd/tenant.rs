use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::credentials::{
    CredentialsCopy, CredentialsSpec, CredentialsStatus, OnSecretLoss, RotationSchedule,
    parse_duration,
};
use super::{Condition, RunAction, RunPhase};
use crate::limits::{
    MAX_CONCURRENT_QUERIES, MAX_EXECUTION_SECONDS, MAX_QUERIES_PER_HOUR, MEMORY_PATTERN,
};
use crate::names::{DISPLAY_NAME_PATTERN, MAX_DISPLAY_NAME};

/// Finished runs kept on a Tenant's status (the schema bounds the list by it).
pub const HISTORY_LIMIT: usize = 20;

/// A tenant: a ClickHouse database, user and grants, provisioned by a RunJob and tracked here.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sentry.io",
    version = "v1alpha1",
    kind = "Tenant",
    namespaced,
    status = "TenantStatus",
    shortname = "tn",
    category = "sentry",
    derive = "PartialEq",
    derive = "Default",
    doc = "A tenant of the platform: its ClickHouse database, user and credentials, provisioned by a RunJob.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Suspended", type_ = "boolean", json_path = ".spec.suspended"),
    printcolumn(name = "Provisioning", type_ = "string", priority = 1, json_path = ".spec.provisioning"),
    printcolumn(name = "Reclaim", type_ = "string", priority = 1, json_path = ".spec.reclaimPolicy"),
    printcolumn(name = "Logins", type_ = "string", json_path = r#".status.conditions[?(@.type=="AccessLocked")].reason"#),
    printcolumn(name = "Database", type_ = "string", json_path = ".status.clickHouseDatabaseName"),
    printcolumn(name = "Synced", type_ = "integer", priority = 1, json_path = ".status.syncedGeneration"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Message", type_ = "string", priority = 1, json_path = r#".status.conditions[?(@.type=="Ready")].message"#),
    // Every name derived from the tenant's (database, user, Secret, RunJob, Job, Pod) must stay valid:
    // see `names::MAX_TENANT_NAME`. Kept in step with `names::TENANT_NAME_PATTERN` by a test.
    validation = Rule::new("self.metadata.name.size() <= 40 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must be at most 40 characters of lowercase letters, digits and '-', start with a letter and end with a letter or digit")
)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// Human-readable name shown in the dashboard. Never overwritten by the provisioner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_DISPLAY_NAME), pattern(DISPLAY_NAME_PATTERN))]
    pub display_name: Option<String>,
    /// Suspend the tenant: its ClickHouse user's logins are locked until resumed.
    #[serde(default)]
    pub suspended: bool,
    /// Automatic: the operator starts the Provision run itself (retried a few times with backoff when it
    /// fails). Manual: a Provision run starts only from the dashboard or a RunJob someone creates.
    #[serde(default)]
    pub provisioning: ProvisioningPolicy,
    /// What deleting the Tenant does in ClickHouse. Retain: its user's logins are locked and its
    /// database, user and credentials Secret are kept, for a new Tenant of the same name to adopt.
    /// Delete: its user and database are dropped and its Secret deleted.
    #[serde(default)]
    pub reclaim_policy: ReclaimPolicy,
    /// How long the old password keeps working after a Rotate run (`30s`, `15m`, `1h`; at most
    /// 9999 of a unit), on ClickHouse servers that hold several passwords per user.
    #[serde(default = "default_rotation_grace_period")]
    #[schemars(pattern(ROTATION_GRACE_PATTERN))]
    pub rotation_grace_period: String,
    /// What one tenant may take from the shared ClickHouse, enforced by a settings profile and a quota
    /// named after the tenant and assigned to its user. Absent (or empty): no limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TenantLimits>,
    /// Copies of the credentials Secret for applications in other namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsSpec>,
}

/// Per-tenant limits; each is optional (absent: unlimited) and bounded.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantLimits {
    /// Most memory one query may use: 1 to 9999 of `Mi` or `Gi` (`512Mi`, `4Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(MEMORY_PATTERN))]
    pub max_memory_per_query: Option<String>,
    /// Longest a query may run, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_EXECUTION_SECONDS))]
    pub max_execution_seconds: Option<i64>,
    /// Queries of the tenant's user running at the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_CONCURRENT_QUERIES))]
    pub max_concurrent_queries: Option<i64>,
    /// Queries the tenant's user may start in one hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_QUERIES_PER_HOUR))]
    pub queries_per_hour: Option<i64>,
}

impl TenantLimits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The value that replaces a `limits` field whole in a JSON merge patch: null removes the field,
    /// and an object replaces only the keys it names, so each key is named (null when unset) and a
    /// limit taken away goes.
    pub fn merge_patch_value(&self) -> serde_json::Value {
        if self.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::json!({
            "maxMemoryPerQuery": self.max_memory_per_query,
            "maxExecutionSeconds": self.max_execution_seconds,
            "maxConcurrentQueries": self.max_concurrent_queries,
            "queriesPerHour": self.queries_per_hour,
        })
    }

    /// `maxMemoryPerQuery` in bytes; `None` when unset (or, on an object written around the schema,
    /// unreadable: then it is not enforced, and the provisioner says so).
    pub fn memory_bytes(&self) -> Option<u64> {
        self.max_memory_per_query
            .as_deref()
            .and_then(crate::limits::memory_bytes)
    }

    /// One line for messages and the dashboard: `4Gi memory per query, 60 s per query, …`.
    pub fn describe(&self) -> String {
        crate::limits::Limits::from(self).describe()
    }
}

/// A duration of one unit: seconds, minutes or hours.
pub const ROTATION_GRACE_PATTERN: &str = super::credentials::DURATION_PATTERN;
pub const DEFAULT_ROTATION_GRACE_PERIOD: &str = "1h";

fn default_rotation_grace_period() -> String {
    DEFAULT_ROTATION_GRACE_PERIOD.to_owned()
}

impl Default for TenantSpec {
    fn default() -> Self {
        Self {
            display_name: None,
            suspended: false,
            provisioning: ProvisioningPolicy::default(),
            reclaim_policy: ReclaimPolicy::default(),
            rotation_grace_period: default_rotation_grace_period(),
            limits: None,
            credentials: None,
        }
    }
}

impl From<&TenantLimits> for crate::limits::Limits {
    fn from(l: &TenantLimits) -> Self {
        Self {
            max_memory_per_query: l.max_memory_per_query.clone(),
            max_execution_seconds: l.max_execution_seconds,
            max_concurrent_queries: l.max_concurrent_queries,
            queries_per_hour: l.queries_per_hour,
        }
    }
}

impl From<crate::limits::Limits> for TenantLimits {
    fn from(l: crate::limits::Limits) -> Self {
        Self {
            max_memory_per_query: l.max_memory_per_query,
            max_execution_seconds: l.max_execution_seconds,
            max_concurrent_queries: l.max_concurrent_queries,
            queries_per_hour: l.queries_per_hour,
        }
    }
}

impl TenantSpec {
    /// The limits the spec asks for; absent and empty are the same: none.
    pub fn limits(&self) -> TenantLimits {
        self.limits.clone().unwrap_or_default()
    }

    /// The copies of the credentials the spec asks for.
    pub fn credential_copies(&self) -> &[CredentialsCopy] {
        self.credentials
            .as_ref()
            .map(|c| c.copies.as_slice())
            .unwrap_or_default()
    }

    /// How long a rotation keeps the previous password: the schedule's `overlap` when it has one,
    /// else `rotationGracePeriod`. The schema admits only what parses, so anything else (an object
    /// written before the schema had the field) is the default.
    pub fn rotation_grace(&self) -> jiff::SignedDuration {
        self.rotation_schedule()
            .and_then(RotationSchedule::overlap)
            .or_else(|| parse_duration(&self.rotation_grace_period))
            .or_else(|| parse_duration(DEFAULT_ROTATION_GRACE_PERIOD))
            .expect("the default parses")
    }

    /// `spec.credentials.rotation`, when set.
    pub fn rotation_schedule(&self) -> Option<&RotationSchedule> {
        self.credentials.as_ref()?.rotation.as_ref()
    }

    /// `spec.credentials.onSecretLoss`.
    pub fn on_secret_loss(&self) -> OnSecretLoss {
        self.credentials
            .as_ref()
            .map(|c| c.on_secret_loss)
            .unwrap_or_default()
    }
}

/// What a Deprovision run (started when the Tenant is deleted) does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ReclaimPolicy {
    /// Lock the user's logins; keep database, user and credentials Secret for re-adoption.
    #[default]
    Retain,
    /// Drop the user and the database, delete the credentials Secret.
    Delete,
}

impl ReclaimPolicy {
    pub const ALL: [ReclaimPolicy; 2] = [Self::Retain, Self::Delete];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retain => "Retain",
            Self::Delete => "Delete",
        }
    }
}

impl std::str::FromStr for ReclaimPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown reclaim policy {s:?}: expected Retain or Delete"))
    }
}

/// Who starts a tenant's Provision run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ProvisioningPolicy {
    /// The Tenant reconciler starts it: `kubectl apply` (or a GitOps tool) is enough.
    #[default]
    Automatic,
    /// A person starts it: the dashboard's Provision button or a hand-made RunJob.
    Manual,
}

impl ProvisioningPolicy {
    pub const ALL: [ProvisioningPolicy; 2] = [Self::Automatic, Self::Manual];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Automatic => "Automatic",
            Self::Manual => "Manual",
        }
    }
}

impl std::str::FromStr for ProvisioningPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown provisioning policy {s:?}: expected Automatic or Manual")
            })
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// Derived from spec.suspended, the provisioner's report and the tenant's runs; see `controller::tenant::phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<TenantPhase>,
    /// The generation the phase and conditions were computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Written only by the provisioner, once the database, user and grants really exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub click_house_database_name: Option<String>,
    /// Written only by the provisioner: the Secret holding the real credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub click_house_secret_ref: Option<SecretRef>,
    /// Written only by the provisioner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tantivy_index_path: Option<String>,
    /// Written only by the provisioner after a Suspend (true) or Resume (false) run really changed ClickHouse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_locked: Option<bool>,
    /// Written only by the provisioner: the limits its last Provision or SetLimits run made ClickHouse
    /// enforce. Absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_limits: Option<TenantLimits>,
    /// The newest generation of the spec that ClickHouse is known to enforce (its suspension and its
    /// limits); behind `metadata.generation` while a run is bringing ClickHouse up to date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_generation: Option<i64>,
    /// Written only by the provisioner, by every run that writes the credentials Secret or its
    /// copies: what they hold (by hash, never a value) and where each copy stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<CredentialsStatus>,
    /// Finished runs, newest first, kept after their RunJobs are cleaned up. Written only by the RunJob controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = HISTORY_LIMIT))]
    pub history: Vec<RunRecord>,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema, PartialOrd, Ord,
)]
pub enum TenantPhase {
    Pending,
    Provisioning,
    Active,
    Suspended,
    Failed,
    /// Deleted: waiting for its Deprovision run (the reclaim policy) before it goes.
    Terminating,
}

impl TenantPhase {
    pub const ALL: [TenantPhase; 6] = [
        Self::Pending,
        Self::Provisioning,
        Self::Active,
        Self::Suspended,
        Self::Failed,
        Self::Terminating,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Provisioning => "Provisioning",
            Self::Active => "Active",
            Self::Suspended => "Suspended",
            Self::Failed => "Failed",
            Self::Terminating => "Terminating",
        }
    }
}

impl std::str::FromStr for TenantPhase {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown tenant phase {s:?}"))
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretRef {
    pub name: String,
}

/// The outcome of one finished run, kept on the Tenant so it survives the RunJob's cleanup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    pub name: String,
    pub uid: String,
    pub action: RunAction,
    pub phase: RunPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    pub finished_at: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// The Tenant generation the run was made for (its `sentry.io/generation` label); absent on runs
    /// made before the label existed and on RunJobs made by hand without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// The conditions whose reason says a run the reconciler makes failed and is being retried: the
/// tenant's wanted state is not what ClickHouse has, and its next attempt is scheduled. The
/// `tenants_retrying` metric, the dashboard's needs-attention list and the docs go by these pairs.
pub const RETRYING: [(&str, &str); 8] = [
    ("Provisioned", "ProvisionRetrying"),
    ("AccessLocked", "LockFailed"),
    ("AccessLocked", "UnlockFailed"),
    ("LimitsEnforced", "ApplyFailed"),
    ("Reclaimed", "DeprovisionRetrying"),
    ("CredentialsDelivered", "DeliveryFailed"),
    ("CredentialsRotation", "RotationFailed"),
    ("CredentialsSecret", "RemakeFailed"),
];

impl Tenant {
    /// The types of this tenant's conditions that say a run is being retried (see [`RETRYING`]).
    pub fn retrying(&self) -> impl Iterator<Item = &'static str> + '_ {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        RETRYING
            .iter()
            .filter(move |(type_, reason)| {
                conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == *type_ && c.reason == *reason)
            })
            .map(|(type_, _)| *type_)
    }

    pub fn phase(&self) -> Option<TenantPhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }

    /// True once the provisioner has reported a database: the only evidence that provisioning happened.
    pub fn is_provisioned(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.click_house_database_name.as_deref())
            .is_some_and(|db| !db.is_empty())
    }

    pub fn access_locked(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.access_locked)
            .unwrap_or(false)
    }

    /// What the provisioner last reported ClickHouse enforces.
    pub fn applied_limits(&self) -> TenantLimits {
        self.status
            .as_ref()
            .and_then(|s| s.applied_limits.clone())
            .unwrap_or_default()
    }

    pub fn history(&self) -> &[RunRecord] {
        self.status
            .as_ref()
            .map(|s| s.history.as_slice())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_is_read_back_from_the_name_it_is_written_as_and_nothing_else() {
        assert_eq!("Active".parse(), Ok(TenantPhase::Active));
        assert_eq!("Terminating".parse(), Ok(TenantPhase::Terminating));
        for phase in TenantPhase::ALL {
            assert_eq!(phase.as_str().parse(), Ok(phase));
        }
        assert!(
            "active".parse::<TenantPhase>().is_err(),
            "exact, as the API spells it"
        );
        assert!("Deleted".parse::<TenantPhase>().is_err());
        assert!("".parse::<TenantPhase>().is_err());
    }

    #[test]
    fn a_tenant_is_retrying_what_a_condition_names_by_its_type_and_retrying_reason() {
        use crate::crd::condition::{ConditionStatus, set_condition};
        let now = jiff::Timestamp::UNIX_EPOCH;
        let mut conditions = Vec::new();
        let mut set = |type_: &str, status: bool, reason: &str| {
            let status = ConditionStatus::from(status);
            set_condition(&mut conditions, type_, status, reason, "", None, now);
        };
        set("Reclaimed", false, "DeprovisionRetrying");
        // A retrying reason under another condition's type, and a retrying type at rest.
        set("Ready", false, "ApplyFailed");
        set("LimitsEnforced", true, "Enforced");
        set("CredentialsDelivered", false, "DeliveryFailed");
        let tenant = Tenant {
            metadata: Default::default(),
            spec: TenantSpec::default(),
            status: Some(TenantStatus {
                conditions,
                ..TenantStatus::default()
            }),
        };
        let retrying: Vec<_> = tenant.retrying().collect();
        assert_eq!(retrying, ["Reclaimed", "CredentialsDelivered"]);
        let fresh = Tenant::new("fresh", TenantSpec::default());
        assert_eq!(fresh.retrying().count(), 0, "no status, nothing retried");
    }

    #[test]
    fn a_limits_merge_patch_names_every_key_and_removes_the_field_when_empty() {
        let some = TenantLimits {
            max_execution_seconds: Some(30),
            ..TenantLimits::default()
        };
        assert_eq!(
            some.merge_patch_value(),
            serde_json::json!({"maxMemoryPerQuery": null, "maxExecutionSeconds": 30,
                               "maxConcurrentQueries": null, "queriesPerHour": null})
        );
        assert_eq!(
            TenantLimits::default().merge_patch_value(),
            serde_json::Value::Null
        );
    }
}
