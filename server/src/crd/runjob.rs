use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;
use crate::names::{MAX_TENANT_NAME, TENANT_NAME_PATTERN};

/// One run of an action against a tenant, carried out by a Kubernetes Job this resource controls.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "sentry.io",
    version = "v1alpha1",
    kind = "RunJob",
    namespaced,
    status = "RunJobStatus",
    shortname = "rj",
    category = "sentry",
    derive = "PartialEq",
    derive = "Default",
    doc = "One run of Provision, Suspend, Resume, Rotate, Revoke, SetLimits, Deliver or Deprovision for a tenant, carried out by the Job it controls.",
    printcolumn(name = "Tenant", type_ = "string", json_path = ".spec.tenant"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.action"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Job", type_ = "string", json_path = ".status.jobRef.name"),
    printcolumn(name = "Finished", type_ = "date", json_path = ".status.completionTime"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    // The RunJob's name is also its Job's name, which Kubernetes copies into a label value.
    validation = Rule::new("self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("metadata.name must be a DNS label of at most 63 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct RunJobSpec {
    /// The Tenant (same namespace) this run acts on. Immutable.
    #[schemars(length(min = 1, max = MAX_TENANT_NAME), pattern(TENANT_NAME_PATTERN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.tenant is immutable"))]
    pub tenant: String,
    /// What to do. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.action is immutable"))]
    pub action: RunAction,
    /// Seconds after the run finishes before the RunJob, its Job and Pod are deleted.
    #[serde(default = "default_ttl")]
    #[schemars(range(min = 0, max = 604_800))]
    pub ttl_seconds_after_finished: i32,
    /// Pod retries before the Job is marked failed.
    #[serde(default = "default_backoff_limit")]
    #[schemars(range(min = 0, max = 10))]
    pub backoff_limit: i32,
    /// Wall-clock limit for the whole Job.
    #[serde(default = "default_active_deadline")]
    #[schemars(range(min = 1, max = 86_400))]
    pub active_deadline_seconds: i64,
}

pub const DEFAULT_TTL_SECONDS: i32 = 300;
pub const DEFAULT_BACKOFF_LIMIT: i32 = 2;
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 600;

fn default_ttl() -> i32 {
    DEFAULT_TTL_SECONDS
}
fn default_backoff_limit() -> i32 {
    DEFAULT_BACKOFF_LIMIT
}
fn default_active_deadline() -> i64 {
    DEFAULT_ACTIVE_DEADLINE_SECONDS
}

/// Only for tooling that needs a value of the type (e.g. registering the kind); a real RunJob always names its tenant.
impl Default for RunJobSpec {
    fn default() -> Self {
        Self::new("", RunAction::Provision)
    }
}

impl RunJobSpec {
    pub fn new(tenant: &str, action: RunAction) -> Self {
        Self {
            tenant: tenant.to_owned(),
            action,
            ttl_seconds_after_finished: DEFAULT_TTL_SECONDS,
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
            active_deadline_seconds: DEFAULT_ACTIVE_DEADLINE_SECONDS,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RunAction {
    Provision,
    Suspend,
    Resume,
    /// Carries out the reclaim policy of a Tenant being deleted; made by the Tenant controller.
    Deprovision,
    /// Issues a new password: on servers that hold several per user the old one keeps working for
    /// the tenant's `spec.rotationGracePeriod`, on older ones the switch is immediate.
    Rotate,
    /// Issues a new password and revokes every other at once, with no grace, and ends the tenant's
    /// running queries: for an incident (a password that leaked).
    Revoke,
    /// Makes ClickHouse enforce the tenant's `spec.limits` (its settings profile and quota); made by
    /// the Tenant controller when the limits change.
    SetLimits,
    /// Writes the copies of the tenant's credentials Secret that `spec.credentials.copies` asks for
    /// (and deletes those it no longer asks for); made by the Tenant controller when a copy is out of
    /// date and its namespace consents. Never touches ClickHouse.
    Deliver,
}

impl RunAction {
    pub const ALL: [RunAction; 8] = [
        Self::Provision,
        Self::Suspend,
        Self::Resume,
        Self::Deprovision,
        Self::Rotate,
        Self::Revoke,
        Self::SetLimits,
        Self::Deliver,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provision => "Provision",
            Self::Suspend => "Suspend",
            Self::Resume => "Resume",
            Self::Deprovision => "Deprovision",
            Self::Rotate => "Rotate",
            Self::SetLimits => "SetLimits",
            Self::Revoke => "Revoke",
            Self::Deliver => "Deliver",
        }
    }
}

impl std::str::FromStr for RunAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let all: Vec<&str> = Self::ALL.iter().map(|a| a.as_str()).collect();
                format!("unknown action {s:?}: expected one of {}", all.join(", "))
            })
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RunPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

impl RunPhase {
    pub const ALL: [RunPhase; 4] = [Self::Pending, Self::Running, Self::Succeeded, Self::Failed];

    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RunPhase>,
    /// The Job this run really created: name and uid, so a same-named replacement is never mistaken for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ref: Option<JobRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// When the controller deletes this RunJob (completionTime + ttlSecondsAfterFinished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Last lines the run's pod printed, captured when it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct JobRef {
    pub name: String,
    pub uid: String,
}

impl RunJob {
    pub fn phase(&self) -> Option<RunPhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }

    pub fn is_finished(&self) -> bool {
        self.phase().is_some_and(RunPhase::is_finished)
    }

    /// Not yet finished: counts as "in flight" for the tenant's phase and for duplicate-click protection.
    pub fn is_in_flight(&self) -> bool {
        !self.is_finished() && self.metadata.deletion_timestamp.is_none()
    }

    /// The Tenant generation this run was made for, from its [`crate::labels::GENERATION`] label.
    pub fn made_for_generation(&self) -> Option<u64> {
        self.metadata
            .labels
            .as_ref()?
            .get(crate::labels::GENERATION)?
            .parse()
            .ok()
    }

    /// Whether this run was made for `tenant` itself, not for an earlier Tenant of the same name: its
    /// Tenant owner reference, else its tenant-uid label, names that uid. A run made by hand that
    /// neither names yet (the RunJob controller adds them) goes by `spec.tenant` alone.
    pub fn is_for(&self, tenant: &super::Tenant) -> bool {
        let Some(uid) = tenant.metadata.uid.as_deref() else {
            return true;
        };
        let owner = self
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Tenant");
        let label = self
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::labels::TENANT_UID));
        match (owner, label) {
            (Some(owner), _) => owner.uid == uid,
            (None, Some(label)) => label == uid,
            (None, None) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::crd::{Tenant, TenantSpec};

    fn owner(kind: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: "acme".into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    fn run(owners: Vec<OwnerReference>, label: Option<&str>) -> RunJob {
        let labels =
            label.map(|uid| [(crate::labels::TENANT_UID.to_owned(), uid.to_owned())].into());
        RunJob {
            metadata: ObjectMeta {
                name: Some("acme-provision-1".into()),
                owner_references: Some(owners),
                labels,
                ..ObjectMeta::default()
            },
            spec: RunJobSpec::new("acme", RunAction::Provision),
            status: None,
        }
    }

    #[test]
    fn a_run_is_for_the_tenant_its_tenant_owner_or_else_its_label_names() {
        let mut tenant = Tenant::new("acme", TenantSpec::default());
        tenant.metadata.uid = Some("u-now".into());
        // Only the Tenant owner counts, wherever it stands among the owners.
        let other_then_tenant = run(
            vec![owner("ConfigMap", "u-cm"), owner("Tenant", "u-now")],
            None,
        );
        assert!(other_then_tenant.is_for(&tenant));
        let earlier = run(
            vec![owner("ConfigMap", "u-now"), owner("Tenant", "u-before")],
            None,
        );
        assert!(
            !earlier.is_for(&tenant),
            "made for an earlier tenant of the name"
        );
        // No Tenant owner: the label decides, whatever other owners say.
        assert!(run(vec![owner("ConfigMap", "u-cm")], Some("u-now")).is_for(&tenant));
        assert!(!run(vec![owner("ConfigMap", "u-now")], Some("u-before")).is_for(&tenant));
        assert!(
            run(Vec::new(), None).is_for(&tenant),
            "made by hand: by name"
        );
    }
}
