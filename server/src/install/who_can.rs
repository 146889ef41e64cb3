//! Who can act through the in-cluster dashboard: whoever may port-forward to the operator's pod
//! (`create` on `pods/portforward` in its namespace) reaches it, and every action there runs as the
//! operator's ServiceAccount. `install` prints them, read off the RBAC objects the way the RBAC
//! authorizer reads them (wildcards included; aggregated roles as the aggregation controller filled
//! them).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// Whether `rule` allows `create` on `pods/portforward` in the core group.
pub fn allows_port_forward(rule: &PolicyRule) -> bool {
    let has = |list: &[String], wanted: &[&str]| list.iter().any(|v| wanted.contains(&v.as_str()));
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    has(groups, &["", "*"])
        && has(resources, &["pods/portforward", "pods/*", "*"])
        && has(&rule.verbs, &["create", "*"])
        && rule
            .resource_names
            .as_deref()
            .unwrap_or_default()
            .is_empty()
}

/// The names of the roles (Roles or ClusterRoles, as name and rules) that allow port-forward.
fn granting<'a>(
    roles: impl Iterator<Item = (String, Option<&'a Vec<PolicyRule>>)>,
) -> BTreeSet<String> {
    roles
        .filter(|(_, rules)| rules.is_some_and(|rules| rules.iter().any(allows_port_forward)))
        .map(|(name, _)| name)
        .collect()
}

/// "User alice", "Group system:masters", "ServiceAccount ns/name".
pub fn describe(subject: &Subject, binding_namespace: Option<&str>) -> String {
    match subject.kind.as_str() {
        "ServiceAccount" => {
            let ns = subject
                .namespace
                .as_deref()
                .or(binding_namespace)
                .unwrap_or_default();
            format!("ServiceAccount {ns}/{}", subject.name)
        }
        kind => format!("{kind} {}", subject.name),
    }
}

/// Every subject that may port-forward to pods in `namespace`, each with the bindings that let it.
pub async fn port_forwarders(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, BTreeSet<String>>, kube::Error> {
    let all = ListParams::default();
    let cluster_roles = Api::<ClusterRole>::all(client.clone())
        .list(&all)
        .await?
        .items;
    let cluster_roles = granting(
        cluster_roles
            .iter()
            .map(|r| (r.name_any(), r.rules.as_ref())),
    );
    let roles = Api::<Role>::namespaced(client.clone(), namespace)
        .list(&all)
        .await?
        .items;
    let roles = granting(roles.iter().map(|r| (r.name_any(), r.rules.as_ref())));
    let mut who: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |subjects: &[Subject], ns: Option<&str>, via: String| {
        for subject in subjects {
            who.entry(describe(subject, ns))
                .or_default()
                .insert(via.clone());
        }
    };
    for binding in Api::<ClusterRoleBinding>::all(client.clone())
        .list(&all)
        .await?
        .items
    {
        if cluster_roles.contains(&binding.role_ref.name) {
            let via = format!("ClusterRoleBinding {}", binding.name_any());
            add(binding.subjects.as_deref().unwrap_or_default(), None, via);
        }
    }
    for binding in Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .list(&all)
        .await?
        .items
    {
        let granted = match binding.role_ref.kind.as_str() {
            "ClusterRole" => cluster_roles.contains(&binding.role_ref.name),
            _ => roles.contains(&binding.role_ref.name),
        };
        if granted {
            let via = format!("RoleBinding {namespace}/{}", binding.name_any());
            add(
                binding.subjects.as_deref().unwrap_or_default(),
                Some(namespace),
                via,
            );
        }
    }
    Ok(who)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> PolicyRule {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(owned(groups)),
            resources: Some(owned(resources)),
            verbs: owned(verbs),
            resource_names: (!names.is_empty()).then(|| owned(names)),
            non_resource_urls: None,
        }
    }

    #[test]
    fn port_forward_is_read_as_the_authorizer_reads_it() {
        for allowed in [
            rule(&[""], &["pods/portforward"], &["create"], &[]),
            rule(&["*"], &["*"], &["*"], &[]),
            rule(&[""], &["pods/*"], &["get", "create"], &[]),
        ] {
            assert!(allows_port_forward(&allowed), "{allowed:?}");
        }
        for refused in [
            rule(&[""], &["pods/portforward"], &["get"], &[]),
            rule(&[""], &["pods"], &["create"], &[]),
            rule(&["apps"], &["pods/portforward"], &["create"], &[]),
            rule(&[""], &["pods/portforward"], &["create"], &["some-pod"]),
            rule(&[""], &["pods/log"], &["*"], &[]),
        ] {
            assert!(!allows_port_forward(&refused), "{refused:?}");
        }
    }

    #[test]
    fn the_roles_granting_port_forward_are_those_with_a_rule_that_allows_it() {
        let forwarder = vec![
            rule(&[""], &["pods"], &["get"], &[]),
            rule(&[""], &["pods/portforward"], &["create"], &[]),
        ];
        let reader = vec![rule(&[""], &["pods", "pods/log"], &["get", "list"], &[])];
        let roles = [
            ("forwarder".to_owned(), Some(&forwarder)),
            ("reader".to_owned(), Some(&reader)),
            // An aggregated ClusterRole the controller has not filled yet has no rules.
            ("unfilled".to_owned(), None),
        ];
        assert_eq!(
            granting(roles.into_iter()),
            BTreeSet::from(["forwarder".to_owned()])
        );
    }

    #[test]
    fn subjects_are_named_with_their_kind_and_accounts_with_their_namespace() {
        let subject = |kind: &str, name: &str, ns: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(Into::into),
            api_group: None,
        };
        assert_eq!(
            describe(&subject("User", "alice", None), Some("t")),
            "User alice"
        );
        assert_eq!(
            describe(&subject("Group", "system:masters", None), None),
            "Group system:masters"
        );
        assert_eq!(
            describe(&subject("ServiceAccount", "ci", None), Some("t")),
            "ServiceAccount t/ci"
        );
        assert_eq!(
            describe(&subject("ServiceAccount", "ci", Some("other")), Some("t")),
            "ServiceAccount other/ci"
        );
    }
}
