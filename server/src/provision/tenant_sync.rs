//! The Kubernetes side of provisioning: read the Tenant, keep its credentials Secret, report status.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;

use super::{MANAGER, Outcome, ProvisionError};
use crate::crd::Tenant;
use crate::names::TenantName;

pub const PASSWORD_KEY: &str = "password";

pub struct TenantSync {
    client: Client,
    namespace: String,
    tantivy_root: String,
}

impl TenantSync {
    pub fn new(client: Client, namespace: &str, tantivy_root: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            tantivy_root: tantivy_root.trim_end_matches('/').to_owned(),
        }
    }

    fn tenants(&self) -> Api<Tenant> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub async fn tenant(&self, name: &TenantName) -> Result<Tenant, ProvisionError> {
        let tenant = self
            .tenants()
            .get_opt(name.as_str())
            .await
            .map_err(|e| ProvisionError::kube(format!("get tenant {name}"), e))?
            .ok_or_else(|| ProvisionError::TenantMissing {
                name: name.to_string(),
                namespace: self.namespace.clone(),
            })?;
        if tenant.meta().deletion_timestamp.is_some() {
            return Err(ProvisionError::TenantDeleting {
                name: name.to_string(),
            });
        }
        Ok(tenant)
    }

    /// The password already on file, if the Secret exists.
    pub async fn existing_password(
        &self,
        name: &TenantName,
    ) -> Result<Option<String>, ProvisionError> {
        let secret_name = name.credentials_secret();
        let Some(secret) = self
            .secrets()
            .get_opt(&secret_name)
            .await
            .map_err(|e| ProvisionError::kube(format!("get secret {secret_name}"), e))?
        else {
            return Ok(None);
        };
        password_of(&secret)
            .map(Some)
            .ok_or(ProvisionError::BadSecret {
                secret: secret_name,
            })
    }

    /// Writes the credentials Secret (owned by the Tenant, so deleting the tenant deletes it). Returns
    /// the password that is on file afterwards: if another run created the Secret first, that one's.
    pub async fn store_password(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        url: &str,
        password: &str,
    ) -> Result<String, ProvisionError> {
        let secret_name = name.credentials_secret();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(secret_name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(crate::labels::for_tenant("credentials", name.as_str())),
                owner_references: tenant.controller_owner_ref(&()).map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([
                ("url".to_owned(), ByteString(url.as_bytes().to_vec())),
                (
                    "database".to_owned(),
                    ByteString(name.database().into_bytes()),
                ),
                (
                    "username".to_owned(),
                    ByteString(name.clickhouse_user().into_bytes()),
                ),
                (
                    PASSWORD_KEY.to_owned(),
                    ByteString(password.as_bytes().to_vec()),
                ),
            ])),
            ..Secret::default()
        };
        match self
            .secrets()
            .create(
                &PostParams {
                    field_manager: Some(MANAGER.into()),
                    ..Default::default()
                },
                &secret,
            )
            .await
        {
            Ok(_) => Ok(password.to_owned()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Replacing is only ever a deliberate rotation; otherwise the Secret on file wins.
                let current =
                    self.secrets().get(&secret_name).await.map_err(|e| {
                        ProvisionError::kube(format!("get secret {secret_name}"), e)
                    })?;
                Ok(password_of(&current).ok_or(ProvisionError::BadSecret {
                    secret: secret_name,
                })?)
            }
            Err(e) => Err(ProvisionError::kube(
                format!("create secret {secret_name}"),
                e,
            )),
        }
    }

    /// Replaces the password on file (`--rotate` only).
    pub async fn replace_password(
        &self,
        name: &TenantName,
        password: &str,
    ) -> Result<(), ProvisionError> {
        let secret_name = name.credentials_secret();
        let patch = json!({ "data": { PASSWORD_KEY: ByteString(password.as_bytes().to_vec()) } });
        self.secrets()
            .patch(
                &secret_name,
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| ProvisionError::kube(format!("update secret {secret_name}"), e))?;
        Ok(())
    }

    /// Writes the status fields only the provisioner may write — and only those, never `spec` — when
    /// they differ from what the tenant shows.
    pub async fn report(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        locked: bool,
    ) -> Result<(), ProvisionError> {
        let database = name.database();
        let secret = name.credentials_secret();
        let index = format!("{}/{}", self.tantivy_root, name);
        let status = tenant.status.clone().unwrap_or_default();
        let unchanged = status.click_house_database_name.as_deref() == Some(database.as_str())
            && status
                .click_house_secret_ref
                .as_ref()
                .map(|s| s.name.as_str())
                == Some(secret.as_str())
            && status.tantivy_index_path.as_deref() == Some(index.as_str())
            && status.access_locked == Some(locked);
        if unchanged {
            return Ok(());
        }
        let patch = json!({ "status": {
            "clickHouseDatabaseName": database,
            "clickHouseSecretRef": { "name": secret },
            "tantivyIndexPath": index,
            "accessLocked": locked,
        }});
        self.tenants()
            .patch_status(
                name.as_str(),
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| ProvisionError::kube(format!("patch tenants/{name}/status"), e))?;
        Ok(())
    }

    /// An Event on the Tenant saying what happened; advisory, so failures are only logged.
    pub async fn announce(&self, name: &TenantName, outcome: &Outcome) {
        let Ok(tenant) = self.tenants().get(name.as_str()).await else {
            return;
        };
        let reason = match outcome {
            Outcome::Provisioned { .. } => "Provisioned",
            Outcome::Resynced { .. } => "StatusResynced",
            Outcome::Rotated { .. } => "CredentialsRotated",
            Outcome::Locked => "AccessLocked",
            Outcome::Unlocked => "AccessUnlocked",
            Outcome::Superseded { .. } => "RunSuperseded",
        };
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: None,
            },
        );
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(outcome.describe()),
            action: reason.into(),
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, &tenant.object_ref(&())).await {
            tracing::warn!(%error, "could not publish event");
        }
    }
}

fn password_of(secret: &Secret) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(PASSWORD_KEY)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|p| !p.is_empty())
}

/// 32 random bytes from the OS's CSPRNG, hex-encoded: only `[0-9a-f]`, safe in any config file or URL.
pub fn generate_password() -> Result<String, ProvisionError> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| ProvisionError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_long_hex_and_unique() {
        let a = super::generate_password().unwrap();
        let b = super::generate_password().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
