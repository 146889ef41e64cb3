//! The two custom resources, `Tenant` and `RunJob` (group `sentry.io`, version `v1alpha1`).
//!
//! The CRD YAML in `manifests/crds/` is generated from these types (`sentry-tenants crd`) and a test fails
//! when the two drift apart.

mod condition;
mod credentials;
mod runjob;
mod tenant;

pub use condition::{Condition, ConditionStatus, set_condition};
pub use credentials::{
    AnnotationValue, CopyState, CopyStatus, CredentialsCopy, CredentialsSpec, CredentialsStatus,
    LabelValue, MAX_COPIES, OnSecretLoss, RotationSchedule, SECRET_MARKER_COMPONENT, marks_secret,
    secret_marker_name,
};
pub use runjob::{
    DEFAULT_TTL_SECONDS, JobRef, RunAction, RunJob, RunJobSpec, RunJobStatus, RunPhase,
};
pub use tenant::{
    HISTORY_LIMIT, ProvisioningPolicy, RETRYING, ReclaimPolicy, RunRecord, SecretRef, Tenant,
    TenantLimits, TenantPhase, TenantSpec, TenantStatus,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub const GROUP: &str = "sentry.io";
pub const VERSION: &str = "v1alpha1";
/// Finalizer the RunJob controller puts on every RunJob so it can delete the Job with Background propagation.
pub const RUNJOB_FINALIZER: &str = "sentry.io/runjob-cleanup";
/// On every live Tenant: released only once its Deprovision run carried out the reclaim policy (or
/// at once for a tenant no run ever touched ClickHouse for).
pub const TENANT_FINALIZER: &str = "sentry.io/tenant-reclaim";

/// Both CRDs, in the order they are applied.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![with_optional_spec(Tenant::crd()), RunJob::crd()]
}

/// Every field of a Tenant's spec is optional, so a Tenant written with no `spec:` at all must be
/// admitted (kube-derive marks `spec` required; the real apiserver refused `kubectl apply` of a bare
/// Tenant). The apiserver defaults it to `{}`, so every stored Tenant still has one.
fn with_optional_spec(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSON;
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        schema.required = schema
            .required
            .take()
            .map(|r| r.into_iter().filter(|f| f != "spec").collect::<Vec<_>>())
            .filter(|r| !r.is_empty());
        if let Some(spec) = schema.properties.as_mut().and_then(|p| p.get_mut("spec")) {
            spec.default = Some(JSON(serde_json::json!({})));
        }
    }
    crd
}

/// The CRDs as one multi-document YAML stream: what `sentry-tenants crd` prints and `manifests/crds/` holds.
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| serde_norway::to_string(crd).expect("a CRD always serialises"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Where the generated CRDs are committed, relative to the workspace root.
pub const CRDS_FILE: &str = "manifests/crds/crds.yaml";

/// Kubernetes timestamps have second precision; every time we write is truncated so a value read back
/// compares equal to the one computed (otherwise every reconcile would see a "change").
pub fn to_k8s_time(ts: jiff::Timestamp) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(ts.as_second()).expect("in range"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `manifests/crds/crds.yaml` must be exactly what the Rust types generate. To regenerate:
    /// `cargo run -q -- crd > manifests/crds/crds.yaml`.
    #[test]
    fn committed_crds_match_the_rust_types() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(CRDS_FILE);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == crds_yaml(),
            "{CRDS_FILE} is out of date with the CRD types: run `cargo run -q -- crd > {CRDS_FILE}`"
        );
    }

    #[test]
    fn tenant_name_rule_in_the_crd_matches_the_rust_rule() {
        let yaml = crds_yaml();
        assert!(yaml.contains(&format!(
            "self.metadata.name.size() <= {}",
            crate::names::MAX_TENANT_NAME
        )));
        assert!(yaml.contains(&format!("matches('{}')", crate::names::TENANT_NAME_PATTERN)));
        assert!(yaml.contains(&format!("matches('{}')", crate::names::DNS_LABEL_PATTERN)));
    }
}
