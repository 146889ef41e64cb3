//! The Kubernetes side of provisioning: read the Tenant, keep its credentials Secret, report status.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;

use super::{MANAGER, Outcome, ProvisionError};
use crate::crd::{CredentialsStatus, Tenant, TenantLimits};
use crate::names::{ClickHousePrefix, TenantName};

pub const PASSWORD_KEY: &str = "password";
/// The key of the credentials Secret that names the tenant's database.
pub const DATABASE_KEY: &str = "database";
/// A Rotate run's new password while the run is under way; gone once it is the `password`.
pub const PENDING_PASSWORD_KEY: &str = "pendingPassword";
/// Earlier passwords ClickHouse still accepts, by hash and expiry (see `rotation`).
pub const RETIRING_PASSWORDS_KEY: &str = "retiringPasswords";

/// The passwords of a credentials Secret, as one read found them.
#[derive(Debug, Clone)]
pub struct Passwords {
    /// `password`: the one the tenant's apps use; none in a Secret a Rotate run is making again
    /// after the one before was deleted (see [`TenantSync::remake_secret`]).
    pub current: Option<String>,
    /// `pendingPassword`: a rotation's new one that ClickHouse may not know yet.
    pub pending: Option<String>,
    /// `retiringPasswords`: earlier passwords ClickHouse still accepts until their own expiry.
    pub retiring: Vec<super::rotation::Retiring>,
    /// The Secret's resourceVersion at that read.
    pub read_at: String,
}

/// What a run made ClickHouse enforce, for [`TenantSync::report`]; `None` for what it did not touch.
#[derive(Debug, Clone, Copy, Default)]
pub struct Enforces<'a> {
    pub locked: Option<bool>,
    pub limits: Option<&'a TenantLimits>,
}

pub struct TenantSync {
    client: Client,
    namespace: String,
    tantivy_root: String,
    /// The uid of the RunJob this run belongs to, for `status.credentials.writtenBy`.
    run: Option<String>,
}

impl TenantSync {
    pub fn new(client: Client, namespace: &str, tantivy_root: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            tantivy_root: tantivy_root.trim_end_matches('/').to_owned(),
            run: None,
        }
    }

    /// The same, for a run of the RunJob `run` (a run by hand has none).
    pub fn for_run(self, run: Option<String>) -> Self {
        Self { run, ..self }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The RunJob this run belongs to.
    pub fn run(&self) -> Option<&str> {
        self.run.as_deref()
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
        Ok(tenant)
    }

    async fn credentials_secret(
        &self,
        name: &TenantName,
    ) -> Result<Option<Secret>, ProvisionError> {
        let secret_name = name.credentials_secret();
        self.secrets()
            .get_opt(&secret_name)
            .await
            .map_err(|e| ProvisionError::kube(format!("get secret {secret_name}"), e))
    }

    /// The tenant's credentials Secret, which must be there and be this tenant's ([`claim`]): what
    /// its copies are made from.
    pub(super) async fn own_credentials_secret(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<Secret, ProvisionError> {
        let secret = self
            .credentials_secret(name)
            .await?
            .ok_or(ProvisionError::BadSecret {
                secret: name.credentials_secret(),
            })?;
        claim(&secret, name, tenant)?;
        Ok(secret)
    }

    /// The tenant's ClickHouse database, which names its user, profile and quota too. Once given, a
    /// name never changes: the one its status records, else the one its credentials Secret names (a
    /// run cut short before the status was written, or a Secret a deleted Tenant of this name
    /// retained), else the install's `prefix` names it. So tenants made before an install got (or
    /// changed) its prefix keep theirs.
    pub async fn database_of(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        prefix: &ClickHousePrefix,
    ) -> Result<String, ProvisionError> {
        let recorded = tenant
            .status
            .as_ref()
            .and_then(|s| s.click_house_database_name.clone());
        if let Some(database) = recorded {
            return Ok(database);
        }
        let on_file = self
            .credentials_secret(name)
            .await?
            .filter(|secret| claim(secret, name, tenant).is_ok())
            .and_then(|secret| secret_value(&secret, DATABASE_KEY));
        Ok(on_file.unwrap_or_else(|| prefix.database(name)))
    }

    /// A credentials Secret a deleted Tenant of this name left behind (reclaimPolicy Retain) becomes
    /// this Tenant's: owned by it again, the retained label gone. Returns whether it adopted one.
    pub async fn adopt_retained(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<bool, ProvisionError> {
        let Some(secret) = self.credentials_secret(name).await? else {
            return Ok(false);
        };
        if claim(&secret, name, tenant)? != Claim::Retained {
            return Ok(false);
        }
        let patch = json!({ "metadata": {
            "resourceVersion": secret.metadata.resource_version,
            "ownerReferences": tenant.controller_owner_ref(&()).map(|o| vec![o]),
            "labels": { RETAINED_FOR: null },
        }});
        self.patch_secret(name, &patch, "adopt").await?;
        Ok(true)
    }

    /// reclaimPolicy Retain: the Secret outlives its Tenant — its owner reference removed (so the
    /// garbage collector leaves it), labelled as retained for this tenant name. A Secret that is not
    /// this tenant's is left as it is.
    pub async fn retain_secret(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<(), ProvisionError> {
        let Some(secret) = self.credentials_secret(name).await? else {
            return Ok(());
        };
        if claim(&secret, name, tenant).ok() != Some(Claim::Ours) {
            return Ok(());
        }
        let patch = json!({ "metadata": {
            "resourceVersion": secret.metadata.resource_version,
            "ownerReferences": [],
            "labels": { RETAINED_FOR: name.as_str() },
        }});
        self.patch_secret(name, &patch, "retain").await
    }

    /// reclaimPolicy Delete: the Secret goes with its Tenant, if it is this tenant's (or retained for
    /// its name); the uid precondition makes sure it is the one looked at.
    pub async fn delete_secret(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<(), ProvisionError> {
        let Some(secret) = self.credentials_secret(name).await? else {
            return Ok(());
        };
        if claim(&secret, name, tenant).is_err() {
            return Ok(());
        }
        let secret_name = name.credentials_secret();
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: secret.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.secrets().delete(&secret_name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(ProvisionError::kube(
                format!("delete secret {secret_name}"),
                e,
            )),
        }
    }

    async fn patch_secret(
        &self,
        name: &TenantName,
        patch: &serde_json::Value,
        what: &str,
    ) -> Result<(), ProvisionError> {
        let secret_name = name.credentials_secret();
        self.secrets()
            .patch(
                &secret_name,
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Merge(patch),
            )
            .await
            .map_err(|e| ProvisionError::kube(format!("{what} secret {secret_name}"), e))?;
        Ok(())
    }

    /// The password already on file, if the Secret exists, is this tenant's and holds one (a Secret
    /// a cut-short Rotate run was making again holds only the pending one).
    pub async fn existing_password(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<Option<String>, ProvisionError> {
        let Some(secret) = self.credentials_secret(name).await? else {
            return Ok(None);
        };
        claim(&secret, name, tenant)?;
        Ok(password_of(&secret))
    }

    /// Writes the credentials Secret (owned by the Tenant, so deleting the tenant deletes it). Returns
    /// the password that is on file afterwards: if another run created the Secret first, that one's.
    pub async fn store_password(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        database: &str,
        url: &str,
        password: &str,
    ) -> Result<String, ProvisionError> {
        let secret_name = name.credentials_secret();
        let secret = Secret {
            metadata: credentials_metadata(name, tenant),
            type_: Some("Opaque".to_owned()),
            data: Some(
                credentials(url, database, password)
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
                    .collect(),
            ),
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
                // Replacing is only ever a deliberate rotation; otherwise the Secret on file wins —
                // if it is this tenant's.
                let current =
                    self.secrets().get(&secret_name).await.map_err(|e| {
                        ProvisionError::kube(format!("get secret {secret_name}"), e)
                    })?;
                password_on_file(&current, name, tenant)
            }
            Err(e) => Err(ProvisionError::kube(
                format!("create secret {secret_name}"),
                e,
            )),
        }
    }

    /// The password on file and, if a rotation was cut short, the new one it put there before
    /// ClickHouse knew it: one read of the Secret, which must be the tenant's.
    pub async fn passwords_for_rotation(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<Option<Passwords>, ProvisionError> {
        let Some(secret) = self.credentials_secret(name).await? else {
            return Ok(None);
        };
        claim(&secret, name, tenant)?;
        Ok(Some(Passwords {
            current: password_of(&secret),
            pending: secret_value(&secret, PENDING_PASSWORD_KEY),
            retiring: super::rotation::parse(
                secret_value(&secret, RETIRING_PASSWORDS_KEY).as_deref(),
            ),
            read_at: secret.metadata.resource_version.unwrap_or_default(),
        }))
    }

    /// Puts a rotation's new password on file beside the current one, if the Secret is still as
    /// `on_file` read it: of two rotations started together, one stores its password and the other
    /// fails here, before ClickHouse hears of a password the Secret will not hold.
    pub async fn store_pending_password(
        &self,
        name: &TenantName,
        on_file: &Passwords,
        password: &str,
    ) -> Result<(), ProvisionError> {
        let patch = json!({
            "metadata": { "resourceVersion": on_file.read_at },
            "data": { PENDING_PASSWORD_KEY: ByteString(password.as_bytes().to_vec()) },
        });
        let secret = name.credentials_secret();
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match self.secrets().patch(&secret, &params, &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(ProvisionError::Kubernetes {
                action: format!("store the new password in secret {secret}"),
                detail: "another run changed the Secret since this one read it (a rotation at the same time?): run it again once that one is done".into(),
            }),
            Err(e) => Err(ProvisionError::kube(format!("update secret {secret}"), e)),
        }
    }

    /// A Rotate or Revoke run on a tenant whose credentials Secret was deleted: the Secret made again
    /// (owned by the tenant) holding only the new password as pending, so ClickHouse never hears of
    /// a password the Secret does not hold, and a re-run of a cut-short run takes it up. If another
    /// run made the Secret first, this one stops: the two would switch to different passwords.
    pub async fn remake_secret(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        password: &str,
    ) -> Result<Passwords, ProvisionError> {
        let secret_name = name.credentials_secret();
        let secret = Secret {
            metadata: credentials_metadata(name, tenant),
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([(
                PENDING_PASSWORD_KEY.to_owned(),
                ByteString(password.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        };
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match self.secrets().create(&params, &secret).await {
            Ok(made) => Ok(Passwords {
                current: None,
                pending: Some(password.to_owned()),
                retiring: Vec::new(),
                read_at: made.metadata.resource_version.unwrap_or_default(),
            }),
            Err(kube::Error::Api(e)) if e.code == 409 => Err(ProvisionError::Kubernetes {
                action: format!("make secret {secret_name} again"),
                detail: "another run made it meanwhile (a rotation at the same time?): run it again once that one is done".into(),
            }),
            Err(e) => Err(ProvisionError::kube(format!("create secret {secret_name}"), e)),
        }
    }

    /// Makes a rotation's new password the one on file (and in `uri`), the pending copy gone, and
    /// `retiring` the earlier passwords ClickHouse still accepts.
    pub async fn commit_password(
        &self,
        name: &TenantName,
        database: &str,
        url: &str,
        password: &str,
        retiring: &[super::rotation::Retiring],
    ) -> Result<(), ProvisionError> {
        let mut data: serde_json::Map<String, serde_json::Value> =
            credentials(url, database, password)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), json!(ByteString(v.into_bytes()))))
                .collect();
        data.insert(PENDING_PASSWORD_KEY.to_owned(), serde_json::Value::Null);
        let retiring = match retiring {
            [] => serde_json::Value::Null,
            kept => json!(ByteString(super::rotation::to_text(kept).into_bytes())),
        };
        data.insert(RETIRING_PASSWORDS_KEY.to_owned(), retiring);
        self.patch_secret(name, &json!({ "data": data }), "update")
            .await
    }

    /// Writes the status fields only the provisioner may write — and only those, never `spec` — when
    /// they differ from what the tenant shows.
    pub async fn report(
        &self,
        name: &TenantName,
        database: &str,
        tenant: &Tenant,
        enforces: Enforces<'_>,
        credentials: Option<&CredentialsStatus>,
    ) -> Result<(), ProvisionError> {
        let secret = name.credentials_secret();
        let index = format!("{}/{}", self.tantivy_root, name);
        let status = tenant.status.clone().unwrap_or_default();
        let unchanged = status.click_house_database_name.as_deref() == Some(database)
            && status
                .click_house_secret_ref
                .as_ref()
                .map(|s| s.name.as_str())
                == Some(secret.as_str())
            && status.tantivy_index_path.as_deref() == Some(index.as_str())
            && enforces
                .locked
                .is_none_or(|l| status.access_locked == Some(l))
            && enforces
                .limits
                .is_none_or(|l| status.applied_limits.clone().unwrap_or_default() == *l)
            && credentials.is_none_or(|c| status.credentials.as_ref() == Some(c));
        if unchanged {
            return Ok(());
        }
        let mut fields = json!({
            "clickHouseDatabaseName": database,
            "clickHouseSecretRef": { "name": secret },
            "tantivyIndexPath": index,
        });
        // Only what this run changed: a concurrent lock run's report is never overwritten by a limits
        // run's stale copy, and the other way round.
        if let Some(locked) = enforces.locked {
            fields["accessLocked"] = json!(locked);
        }
        if let Some(limits) = enforces.limits {
            fields["appliedLimits"] = limits.merge_patch_value();
        }
        if let Some(credentials) = credentials {
            fields["credentials"] = credentials_patch(credentials);
        }
        self.patch_status(name, &json!({ "status": fields })).await
    }

    /// Writes `status.credentials` alone (a Rotate, Revoke or Deliver run's report), when it
    /// differs from what the tenant shows.
    pub async fn report_credentials(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        credentials: &CredentialsStatus,
    ) -> Result<(), ProvisionError> {
        let current = tenant.status.as_ref().and_then(|s| s.credentials.as_ref());
        if current == Some(credentials) {
            return Ok(());
        }
        let patch = json!({ "status": { "credentials": credentials_patch(credentials) } });
        self.patch_status(name, &patch).await
    }

    async fn patch_status(
        &self,
        name: &TenantName,
        patch: &serde_json::Value,
    ) -> Result<(), ProvisionError> {
        self.tenants()
            .patch_status(
                name.as_str(),
                &PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..Default::default()
                },
                &Patch::Merge(patch),
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
            Outcome::Rotated { .. } | Outcome::RotatedWithGrace { .. } => "CredentialsRotated",
            Outcome::SecretRemade { .. } => "CredentialsSecretRemade",
            Outcome::Revoked { .. } => "CredentialsRevoked",
            Outcome::Locked { .. } => "AccessLocked",
            Outcome::Unlocked => "AccessUnlocked",
            Outcome::Superseded { .. } => "RunSuperseded",
            Outcome::Adopted { .. } => "RetainedAdopted",
            Outcome::Retained { .. } => "Retained",
            Outcome::Dropped { .. } => "Dropped",
            Outcome::LimitsSet { .. } => "LimitsApplied",
            Outcome::Delivered { .. } => "CredentialsDelivered",
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

/// `status.credentials` as a merge patch: every field set, so one absent now (no `writtenBy` for a
/// run by hand, no copies left) is removed rather than left as it was.
fn credentials_patch(credentials: &CredentialsStatus) -> serde_json::Value {
    json!({
        "hash": credentials.hash,
        "writtenBy": credentials.written_by,
        "rotatedAt": credentials.rotated_at,
        "secretUid": credentials.secret_uid,
        "copies": credentials.copies,
    })
}

/// A credentials Secret's name, labels and owner: the tenant, so deleting the tenant deletes it. (Its
/// namespace is the one it is created in.)
fn credentials_metadata(name: &TenantName, tenant: &Tenant) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.credentials_secret()),
        labels: Some(crate::labels::for_tenant("credentials", name.as_str())),
        owner_references: tenant.controller_owner_ref(&()).map(|o| vec![o]),
        ..ObjectMeta::default()
    }
}

fn password_of(secret: &Secret) -> Option<String> {
    secret_value(secret, PASSWORD_KEY)
}

/// A key of a Secret as text, when it is there and not empty.
fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|v| !v.is_empty())
}

/// 32 random bytes from the OS's CSPRNG, hex-encoded: only `[0-9a-f]`, safe in any config file or URL.
pub fn generate_password() -> Result<String, ProvisionError> {
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| ProvisionError::Random)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// On a credentials Secret a deleted Tenant left behind (reclaimPolicy Retain): the tenant name it is
/// kept for. Only a new Tenant of that name adopts it.
pub const RETAINED_FOR: &str = "sentry.io/retained-for";

/// Whose a credentials Secret is, as far as the provisioner may act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// Controlled by this Tenant (its uid).
    Ours,
    /// No controlling owner, and retained by us for this tenant name.
    Retained,
}

/// Whether `secret` is `tenant`'s: controlled by this Tenant's uid, or retained for its name. A
/// Secret that only has the name — the admin Secret a tenant's name happens to spell, one made by
/// hand or by another tool, one of another object — is never read for a password nor changed.
fn claim(secret: &Secret, name: &TenantName, tenant: &Tenant) -> Result<Claim, ProvisionError> {
    let uid = tenant.meta().uid.as_deref().unwrap_or_default();
    let controller = secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let retained_for = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(RETAINED_FOR));
    match controller {
        Some(owner) if owner.kind == "Tenant" && owner.uid == uid => Ok(Claim::Ours),
        None if retained_for.map(String::as_str) == Some(name.as_str()) => Ok(Claim::Retained),
        other => Err(ProvisionError::ForeignSecret {
            tenant: name.to_string(),
            secret: name.credentials_secret(),
            owner: match other {
                Some(o) => format!("it is controlled by {} {} (uid {})", o.kind, o.name, o.uid),
                None => "it has no controlling owner: made by hand or by another tool".to_owned(),
            },
        }),
    }
}

/// A credentials Secret's password, if the Secret is `tenant`'s ([`claim`]).
fn password_on_file(
    secret: &Secret,
    name: &TenantName,
    tenant: &Tenant,
) -> Result<String, ProvisionError> {
    claim(secret, name, tenant)?;
    password_of(secret).ok_or(ProvisionError::BadSecret {
        secret: name.credentials_secret(),
    })
}

/// The keys of a tenant's credentials Secret (CloudNativePG's application Secret is the model): the
/// ClickHouse HTTP endpoint whole and in parts, the database, its user and password, and a `uri` a
/// client can connect with as it is.
pub fn credentials(url: &str, database: &str, password: &str) -> BTreeMap<&'static str, String> {
    let username = &crate::names::clickhouse_user(database);
    let (scheme, host, port) = endpoint(url);
    let uri = format!(
        "{scheme}://{}:{}@{}:{port}/?database={}",
        crate::text::percent_encode(username),
        crate::text::percent_encode(password),
        bracketed(&host),
        crate::text::percent_encode(database),
    );
    BTreeMap::from([
        ("url", url.to_owned()),
        ("host", host),
        ("port", port.to_string()),
        (DATABASE_KEY, database.to_owned()),
        ("username", username.to_owned()),
        (PASSWORD_KEY, password.to_owned()),
        ("uri", uri),
    ])
}

/// (scheme, host, port) of a ClickHouse HTTP URL; the port defaults to ClickHouse's (8123 for http,
/// 8443 for https). An IPv6 host is returned without its brackets.
pub fn endpoint(url: &str) -> (&str, String, u16) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default_port = if scheme == "https" { 8443 } else { 8123 };
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').unwrap_or((v6, ""));
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = port.and_then(|p| p.parse().ok()).unwrap_or(default_port);
    (scheme, host.to_owned(), port)
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
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

    #[test]
    fn the_endpoint_is_split_with_clickhouse_default_ports() {
        for (url, scheme, host, port) in [
            ("http://clickhouse.db:8123", "http", "clickhouse.db", 8123),
            ("http://clickhouse.db", "http", "clickhouse.db", 8123),
            ("https://ch.example.com/", "https", "ch.example.com", 8443),
            (
                "https://ch.example.com:9443/path?x=1",
                "https",
                "ch.example.com",
                9443,
            ),
            ("http://10.0.0.7:18123", "http", "10.0.0.7", 18123),
            ("http://[fd00::7]:8123", "http", "fd00::7", 8123),
            ("https://[fd00::7]", "https", "fd00::7", 8443),
        ] {
            assert_eq!(
                super::endpoint(url),
                (scheme, host.to_owned(), port),
                "{url}"
            );
        }
    }

    #[test]
    fn a_credentials_secret_holds_the_endpoint_in_parts_and_a_uri() {
        let keys = super::credentials("https://[fd00::7]:9443", "tenant_acme", "0123abcd");
        let names: Vec<&str> = keys.keys().copied().collect();
        assert_eq!(names, crate::names::CREDENTIAL_KEYS, "what a copy holds");
        let pairs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("database", "tenant_acme"),
                ("host", "fd00::7"),
                ("password", "0123abcd"),
                ("port", "9443"),
                (
                    "uri",
                    "https://tenant_acme_user:0123abcd@[fd00::7]:9443/?database=tenant_acme"
                ),
                ("url", "https://[fd00::7]:9443"),
                ("username", "tenant_acme_user"),
            ]
        );
    }
}
