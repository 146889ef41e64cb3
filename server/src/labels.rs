//! The labels on everything the operator and the provisioner create at run time (RunJobs, Jobs and
//! their pods, credentials Secrets, the leader Lease): Kubernetes' recommended `app.kubernetes.io/*`
//! set, so `kubectl get all -l app.kubernetes.io/part-of=sentry-tenants` and dashboards that group by
//! them find every piece. The install bundle's objects carry the same set from `manifests/labels.yaml`.

use std::collections::BTreeMap;

pub const NAME: &str = "app.kubernetes.io/name";
pub const INSTANCE: &str = "app.kubernetes.io/instance";
pub const VERSION: &str = "app.kubernetes.io/version";
pub const COMPONENT: &str = "app.kubernetes.io/component";
pub const PART_OF: &str = "app.kubernetes.io/part-of";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The tenant an object belongs to (a label selector finds all of one tenant's objects).
pub const TENANT: &str = "sentry.io/tenant";
/// On a run: the uid of the Tenant it was made for, so a later Tenant of the same name never takes
/// an earlier one's run (a Deprovision run has no owner reference to say so).
pub const TENANT_UID: &str = "sentry.io/tenant-uid";
/// On a run: the generation of its Tenant's spec it was made for. A tenant's attempts at an action are
/// counted per generation from this label (and the history's `generation`), never from run names, so
/// a RunJob someone names like one of ours is never taken for an attempt.
pub const GENERATION: &str = "sentry.io/generation";
/// On a Tenant: the shard that reconciles it and its runs (`install --shards`), set by the main
/// operator when absent, or by a person to move a tenant.
pub const SHARD: &str = "sentry.io/shard";

/// The recommended labels for a `component` of one tenant's (`instance`), plus `sentry.io/tenant`.
pub fn for_tenant(component: &str, tenant: &str) -> BTreeMap<String, String> {
    let mut labels = of_component(component);
    labels.insert(INSTANCE.to_owned(), tenant.to_owned());
    labels.insert(TENANT.to_owned(), tenant.to_owned());
    labels
}

/// The recommended labels for a `component` that belongs to no single tenant.
pub fn of_component(component: &str) -> BTreeMap<String, String> {
    [
        (NAME, "sentry-tenants"),
        (VERSION, env!("CARGO_PKG_VERSION")),
        (COMPONENT, component),
        (PART_OF, "sentry-tenants"),
        (MANAGED_BY, "sentry-tenants"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_object_carries_the_recommended_set_and_its_tenant() {
        let labels = for_tenant("credentials", "acme");
        let pairs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("app.kubernetes.io/component", "credentials"),
                ("app.kubernetes.io/instance", "acme"),
                ("app.kubernetes.io/managed-by", "sentry-tenants"),
                ("app.kubernetes.io/name", "sentry-tenants"),
                ("app.kubernetes.io/part-of", "sentry-tenants"),
                ("app.kubernetes.io/version", env!("CARGO_PKG_VERSION")),
                ("sentry.io/tenant", "acme"),
            ]
        );
    }
}
