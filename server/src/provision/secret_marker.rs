//! The marker beside a tenant's credentials Secret: a ConfigMap owned by the Secret, so the garbage
//! collector deletes it when the Secret goes. The operator may not read Secrets (least privilege);
//! it watches these markers instead, and reports a deleted Secret (rule 11 of the Tenant
//! reconciler). Every run that writes the credentials or their copies makes sure the marker is
//! there and reports the Secret's uid in `status.credentials.secretUid`.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};

use super::{MANAGER, ProvisionError};
use crate::crd::{SECRET_MARKER_COMPONENT, marks_secret, secret_marker_name};

/// The marker of `secret` (which must be stored: it has a uid) for tenant `tenant`. No
/// `blockOwnerDeletion`: nothing needs the Secret's deletion to wait for the marker's, and setting it
/// would need a right on the Secret's finalizers.
pub fn marker(secret: &Secret, tenant: &str) -> ConfigMap {
    let uid = secret.uid().unwrap_or_default();
    let secret_name = secret.name_any();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(secret_marker_name(&secret_name, &uid)),
            namespace: secret.namespace(),
            labels: Some(crate::labels::for_tenant(SECRET_MARKER_COMPONENT, tenant)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Secret".into(),
                name: secret_name.clone(),
                uid,
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        data: Some(
            [(
                "purpose".to_owned(),
                format!(
                    "Deleted with Secret {secret_name} by the garbage collector: the operator learns of that deletion from it."
                ),
            )]
            .into(),
        ),
        ..ConfigMap::default()
    }
}

/// Makes sure the marker of `secret` is there; returns the Secret's uid. A ConfigMap of the marker's
/// name that does not stand for this Secret (made by someone else) is left alone, and the run fails
/// saying so: a marker it cannot trust would hide a deletion.
pub async fn ensure(
    client: &Client,
    secret: &Secret,
    tenant: &str,
) -> Result<String, ProvisionError> {
    let uid = secret.uid().unwrap_or_default();
    let namespace = secret.namespace().unwrap_or_default();
    let wanted = marker(secret, tenant);
    let name = wanted.name_any();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let found = api
        .get_opt(&name)
        .await
        .map_err(|e| ProvisionError::kube(format!("get configmap {name}"), e))?;
    let existing = match found {
        Some(existing) => existing,
        None => {
            let params = PostParams {
                field_manager: Some(MANAGER.into()),
                ..PostParams::default()
            };
            match api.create(&params, &wanted).await {
                Ok(_) => return Ok(uid),
                // Another run made it first: it is checked as if found.
                Err(kube::Error::Api(e)) if e.code == 409 => api
                    .get(&name)
                    .await
                    .map_err(|e| ProvisionError::kube(format!("get configmap {name}"), e))?,
                Err(e) => return Err(ProvisionError::kube(format!("create configmap {name}"), e)),
            }
        }
    };
    if marks_secret(&existing, &uid) {
        Ok(uid)
    } else {
        Err(ProvisionError::Kubernetes {
            action: format!("mark Secret {}", secret.name_any()),
            detail: format!(
                "ConfigMap {namespace}/{name} exists and is not owned by that Secret: delete it, and the next run writes the marker"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_owned_by_its_secret_and_named_by_its_uid() {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("acme-clickhouse".into()),
                namespace: Some("ops".into()),
                uid: Some("1f0c".into()),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        };
        let m = marker(&secret, "acme");
        assert_eq!(m.name_any(), "acme-clickhouse.1f0c");
        assert_eq!(m.namespace().as_deref(), Some("ops"));
        assert_eq!(
            m.labels()
                .get("app.kubernetes.io/component")
                .map(String::as_str),
            Some("credentials-marker")
        );
        assert_eq!(
            m.labels().get("sentry.io/tenant").map(String::as_str),
            Some("acme")
        );
        assert!(marks_secret(&m, "1f0c"));
        assert!(
            !marks_secret(&m, "2a9d"),
            "a Secret made again has another uid"
        );
        let owner = &m.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("Secret", "acme-clickhouse")
        );
        assert_eq!(owner.block_owner_deletion, None);
        // Whoever finds it in `kubectl get configmaps` reads what it is for.
        assert_eq!(
            m.data.unwrap()["purpose"],
            "Deleted with Secret acme-clickhouse by the garbage collector: the operator learns of that deletion from it."
        );
    }
}
