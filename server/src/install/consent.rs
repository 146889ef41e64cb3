//! A namespace's consent to copies of tenants' credentials: two RoleBindings in that namespace, to the
//! two ClusterRoles every install ships (`manifests/credentials.yaml`). One lets the provisioner write
//! Secrets there; the other lets the operator ask the apiserver whether it may. What
//! `sentry-tenants grant-credentials NAMESPACE` prints, applies (`--apply`) or removes (`--revoke`).
//!
//! Only someone who may write Secrets in the namespace can bind the first role there (RBAC refuses
//! a binding that grants more than its author holds), so the namespace's owner decides, not the
//! operator's.

use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::bundle::{INSTALL_NAMESPACE, cluster_role};
use super::wait::{InstallError, api_error};

/// The provisioner's ServiceAccount (manifests/serviceaccounts.yaml): it writes the copies.
pub const PROVISIONER_ACCOUNT: &str = "sentry-tenants-provisioner";
/// The operator's ServiceAccount: it checks the consent.
pub const OPERATOR_ACCOUNT: &str = "sentry-tenants";
/// The ClusterRole the provisioner is bound to where copies may go.
pub const COPIES_ROLE: &str = "credential-copies";
/// The ClusterRole the operator is bound to there.
pub const CONSENT_ROLE: &str = "credential-consent";

/// The two RoleBindings by which `namespace` consents to copies from the install in `install`.
pub fn bindings(install: &str, namespace: &str) -> [RoleBinding; 2] {
    [
        (COPIES_ROLE, PROVISIONER_ACCOUNT),
        (CONSENT_ROLE, OPERATOR_ACCOUNT),
    ]
    .map(|(role, account)| binding(install, namespace, role, account))
}

fn binding(install: &str, namespace: &str, role: &str, account: &str) -> RoleBinding {
    let role = cluster_role(install, role);
    RoleBinding {
        metadata: ObjectMeta {
            // The role's name: unique per install and purpose, and says what it grants.
            name: Some(role.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some({
                let mut labels = crate::labels::of_component("credential-consent");
                labels.insert(INSTALL_NAMESPACE.to_owned(), install.to_owned());
                labels
            }),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role,
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account.into(),
            namespace: Some(install.into()),
            api_group: None,
        }]),
    }
}

/// The bindings as the YAML `grant-credentials` prints, for the namespace's owner to read and apply.
pub fn bindings_yaml(install: &str, namespace: &str) -> String {
    bindings(install, namespace)
        .iter()
        .map(|b| serde_norway::to_string(b).expect("a RoleBinding serializes"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Applies the bindings as the caller: their RBAC decides whether they may consent for `namespace`.
pub async fn grant(client: &Client, install: &str, namespace: &str) -> Result<(), InstallError> {
    require_install(client, install).await?;
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    for binding in bindings(install, namespace) {
        let name = binding.name_any();
        api.patch(
            &name,
            &PatchParams::apply(super::apply::MANAGER).force(),
            &Patch::Apply(&binding),
        )
        .await
        .map_err(|e| {
            refused(
                install,
                &format!("create RoleBinding {name} in {namespace}"),
                &e,
            )
        })?;
    }
    Ok(())
}

/// Removes the bindings: copies already made stay until their tenants or entries go, but no new
/// one is written and the tenants say so.
pub async fn revoke(client: &Client, install: &str, namespace: &str) -> Result<(), InstallError> {
    let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    for binding in bindings(install, namespace) {
        let name = binding.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(api_error(
                    &format!("delete RoleBinding {name} in {namespace}"),
                    &e,
                ));
            }
        }
    }
    Ok(())
}

/// A binding to a ClusterRole that does not exist would grant nothing, silently. A namespace's
/// admin usually may not read ClusterRoles: then the apiserver's own check of the binding (it
/// resolves the role to compare its rules with the author's) answers instead.
async fn require_install(client: &Client, install: &str) -> Result<(), InstallError> {
    let role = cluster_role(install, COPIES_ROLE);
    match Api::<ClusterRole>::all(client.clone()).get_opt(&role).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(no_install(install)),
        Err(kube::Error::Api(e)) if e.code == 403 => Ok(()),
        Err(e) => Err(api_error(&format!("get ClusterRole {role}"), &e)),
    }
}

fn no_install(install: &str) -> InstallError {
    let role = cluster_role(install, COPIES_ROLE);
    InstallError::Api(format!(
        "no sentry-tenants install in namespace {install} (its ClusterRole {role} is missing): install it first, or name its namespace with -n"
    ))
}

/// A refused binding, said in RBAC's terms: only who may write Secrets there can consent.
fn refused(install: &str, action: &str, error: &kube::Error) -> InstallError {
    match error {
        kube::Error::Api(status)
            if status.code == 404 && status.message.contains("clusterroles") =>
        {
            no_install(install)
        }
        kube::Error::Api(status) if status.code == 403 => InstallError::Api(format!(
            "cannot {action}: forbidden ({}); consent must come from someone who may write Secrets in that namespace (its admin): RBAC lets nobody grant what they do not hold",
            status.message
        )),
        kube::Error::Api(status) if status.code == 404 => InstallError::Api(format!(
            "cannot {action}: the namespace does not exist ({})",
            status.message
        )),
        other => api_error(action, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consent_binds_the_provisioner_to_secrets_and_the_operator_to_access_reviews_in_that_namespace_only()
     {
        let [copies, consent] = bindings("ops", "shop");
        for b in [&copies, &consent] {
            assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
            assert_eq!(b.role_ref.kind, "ClusterRole");
            let subjects = b.subjects.as_deref().unwrap_or_default();
            assert_eq!(subjects.len(), 1, "{b:?}");
            assert_eq!(subjects[0].namespace.as_deref(), Some("ops"));
        }
        assert_eq!(copies.role_ref.name, "sentry-tenants:ops:credential-copies");
        assert_eq!(
            copies.subjects.as_ref().unwrap()[0].name,
            "sentry-tenants-provisioner"
        );
        assert_eq!(
            consent.role_ref.name,
            "sentry-tenants:ops:credential-consent"
        );
        assert_eq!(consent.subjects.as_ref().unwrap()[0].name, "sentry-tenants");
    }
}
