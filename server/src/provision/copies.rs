//! Copies of a tenant's credentials Secret in the namespaces its applications run in
//! (`spec.credentials.copies`), written by the provisioner in the same run that writes the Secret
//! (Provision, Rotate, Revoke) or in a Deliver run, and reported in `status.credentials`.
//!
//! A copy is written only where the namespace consents: the provisioner asks the apiserver first
//! (a SelfSubjectAccessReview, which every account may make), so a namespace that has not consented
//! costs no refused request. A copy is ours when it carries the tenant's uid label; a Secret of that
//! name without it is someone else's and is left alone (no owner reference can cross namespaces).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Client, ResourceExt};

use super::MANAGER;
use crate::crd::{CopyState, CopyStatus, CredentialsCopy, CredentialsStatus, Tenant};

/// The keys a copy holds: what an application connects with. The source's bookkeeping
/// (`pendingPassword`, `retiringPasswords`) never leaves the operator's namespace.
pub use crate::names::CREDENTIAL_KEYS as COPIED_KEYS;
/// On every copy: the hash of the credentials it holds, so that tools which restart an application
/// when its Secret's annotations change (Reloader and the like) do so on a rotation.
pub const CREDENTIALS_HASH_ANNOTATION: &str = "sentry.io/credentials-hash";
/// On every copy: the namespace of the Tenant it copies.
pub const TENANT_NAMESPACE_LABEL: &str = "sentry.io/tenant-namespace";

/// What a copy holds, taken from the credentials Secret.
pub fn copied_data(source: &Secret) -> BTreeMap<String, ByteString> {
    source
        .data
        .iter()
        .flatten()
        .filter(|(k, _)| COPIED_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The SHA-256 (hex) of `data` for tenant `uid`: each key and value length-prefixed, after a
/// domain tag, so no two different sets of credentials (or tenants) hash alike. Never a value.
pub fn credentials_hash(uid: &str, data: &BTreeMap<String, ByteString>) -> String {
    let mut bytes = b"sentry-tenants/credentials/v1\0".to_vec();
    let mut field = |b: &[u8]| {
        bytes.extend_from_slice(&(b.len() as u64).to_be_bytes());
        bytes.extend_from_slice(b);
    };
    field(uid.as_bytes());
    for (key, value) in data {
        field(key.as_bytes());
        field(&value.0);
    }
    crate::digest::sha256_hex(bytes)
}

/// The copy of `data` that `entry` asks for: the entry's labels and annotations, then ours.
pub fn copy_secret(
    tenant: &Tenant,
    entry: &CredentialsCopy,
    data: &BTreeMap<String, ByteString>,
    hash: &str,
) -> Secret {
    let mut labels: BTreeMap<String, String> = entry
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    labels.extend(crate::labels::for_tenant(
        "credentials-copy",
        &tenant.name_any(),
    ));
    labels.insert(
        crate::labels::TENANT_UID.to_owned(),
        tenant.uid().unwrap_or_default(),
    );
    labels.insert(
        TENANT_NAMESPACE_LABEL.to_owned(),
        tenant.namespace().unwrap_or_default(),
    );
    let mut annotations: BTreeMap<String, String> = entry
        .annotations
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    annotations.insert(CREDENTIALS_HASH_ANNOTATION.to_owned(), hash.to_owned());
    Secret {
        metadata: ObjectMeta {
            name: Some(entry.secret_name.clone()),
            namespace: Some(entry.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data.clone()),
        ..Secret::default()
    }
}

/// Whether `secret` is a copy made for the tenant whose uid is `uid`.
pub fn is_copy_of(secret: &Secret, uid: &str) -> bool {
    secret
        .labels()
        .get(crate::labels::TENANT_UID)
        .is_some_and(|v| v == uid)
}

/// Whether an existing copy already holds what `wanted` would write (so nothing is written).
fn holds(existing: &Secret, wanted: &Secret) -> bool {
    existing.data == wanted.data
        && existing.labels() == wanted.labels()
        && existing.annotations() == wanted.annotations()
}

/// Writes and removes copies for one tenant, as the provisioner's ServiceAccount.
pub struct Copier<'a> {
    pub client: &'a Client,
    /// The install's namespace, for the consent command a message names.
    pub install_namespace: &'a str,
    pub now: jiff::Timestamp,
}

impl Copier<'_> {
    /// Brings every copy `tenant` asks for up to `data`, removes the ones it no longer asks for, and
    /// says where each stands; `previous` is the status reported before (its times are kept for
    /// copies whose state did not change, so an unchanged report writes nothing).
    pub async fn deliver(
        &self,
        tenant: &Tenant,
        data: &BTreeMap<String, ByteString>,
        hash: &str,
        previous: &[CopyStatus],
    ) -> Vec<CopyStatus> {
        let uid = tenant.uid().unwrap_or_default();
        let wanted = tenant.spec.credential_copies();
        let mut report = Vec::new();
        for entry in wanted {
            let (state, message) = self.write(tenant, entry, data, hash, &uid).await;
            let delivered = state == CopyState::Delivered;
            report.push(CopyStatus {
                namespace: entry.namespace.clone(),
                secret_name: entry.secret_name.clone(),
                state,
                entry_hash: entry.entry_hash(),
                credentials_hash: delivered.then(|| hash.to_owned()),
                message,
                at: Time(self.now),
            });
        }
        for gone in previous.iter().filter(|p| !asks_for(wanted, p)) {
            if let Some(kept) = self.remove(gone, &uid).await {
                report.push(kept);
            }
        }
        keep_unchanged_times(report, previous)
    }

    /// Deletes every copy `tenant` made (asked for now or reported before): for a tenant that goes.
    /// Returns what could not be deleted, one line each.
    pub async fn remove_all(&self, tenant: &Tenant) -> Vec<String> {
        let uid = tenant.uid().unwrap_or_default();
        let reported = tenant
            .status
            .as_ref()
            .and_then(|s| s.credentials.as_ref())
            .map(|c| c.copies.clone())
            .unwrap_or_default();
        let mut places: Vec<(String, String)> = tenant
            .spec
            .credential_copies()
            .iter()
            .map(|c| (c.namespace.clone(), c.secret_name.clone()))
            .chain(reported.into_iter().map(|c| (c.namespace, c.secret_name)))
            .collect();
        places.sort();
        places.dedup();
        let mut left = Vec::new();
        for (namespace, secret_name) in places {
            let why = match self.delete_copy(&namespace, &secret_name, &uid).await {
                Ok(()) => continue,
                Err(Refusal::NoConsent) => self.no_consent(&namespace).1,
                Err(Refusal::Failed(why)) => why,
            };
            left.push(format!(
                "the copy {namespace}/{secret_name} was left: {why}"
            ));
        }
        left
    }

    async fn write(
        &self,
        tenant: &Tenant,
        entry: &CredentialsCopy,
        data: &BTreeMap<String, ByteString>,
        hash: &str,
        uid: &str,
    ) -> (CopyState, String) {
        let namespace = &entry.namespace;
        match self.may(namespace, "create").await {
            Ok(true) => {}
            Ok(false) => return self.no_consent(namespace),
            Err(e) => return (CopyState::Failed, e),
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let name = &entry.secret_name;
        let wanted = copy_secret(tenant, entry, data, hash);
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        };
        let written = match api.get_opt(name).await {
            Err(e) => Err(e),
            Ok(None) => api.create(&params, &wanted).await.map(|_| ()),
            Ok(Some(existing)) if !is_copy_of(&existing, uid) => {
                return (
                    CopyState::Conflict,
                    format!(
                        "Secret {namespace}/{name} exists and is not a copy of this tenant's credentials (it has no {}={uid} label): left alone; delete or rename it, or choose another secretName",
                        crate::labels::TENANT_UID
                    ),
                );
            }
            Ok(Some(existing)) if holds(&existing, &wanted) => Ok(()),
            Ok(Some(existing)) => {
                let mut replacement = wanted;
                replacement.metadata.resource_version = existing.metadata.resource_version;
                api.replace(name, &params, &replacement).await.map(|_| ())
            }
        };
        match written {
            Ok(()) => (CopyState::Delivered, String::new()),
            Err(kube::Error::Api(e)) if e.code == 403 => self.no_consent(namespace),
            Err(e) => (
                CopyState::Failed,
                crate::cluster::describe(&format!("write Secret {namespace}/{name}"), &e),
            ),
        }
    }

    /// A copy the tenant no longer asks for: deleted (then gone from the report), or kept in the
    /// report with why it could not be.
    async fn remove(&self, gone: &CopyStatus, uid: &str) -> Option<CopyStatus> {
        let (namespace, name) = (&gone.namespace, &gone.secret_name);
        let (state, message) = match self.delete_copy(namespace, name, uid).await {
            Ok(()) => return None,
            Err(Refusal::NoConsent) => self.no_consent(namespace),
            Err(Refusal::Failed(why)) => (CopyState::Failed, why),
        };
        Some(CopyStatus {
            state,
            message: format!("no longer asked for, not deleted yet: {message}"),
            at: Time(self.now),
            ..gone.clone()
        })
    }

    /// Deletes `namespace/name` if it is this tenant's copy (a Secret someone else made there since
    /// is left alone); the uid precondition makes sure the one looked at is the one deleted.
    async fn delete_copy(&self, namespace: &str, name: &str, uid: &str) -> Result<(), Refusal> {
        if !self
            .may(namespace, "delete")
            .await
            .map_err(Refusal::Failed)?
        {
            return Err(Refusal::NoConsent);
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let refused = |e: kube::Error| match e {
            kube::Error::Api(s) if s.code == 403 => Refusal::NoConsent,
            e => Refusal::Failed(crate::cluster::describe(
                &format!("delete Secret {namespace}/{name}"),
                &e,
            )),
        };
        let Some(existing) = api.get_opt(name).await.map_err(refused)? else {
            return Ok(());
        };
        if !is_copy_of(&existing, uid) {
            return Ok(());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: existing.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(refused(e)),
        }
    }

    /// Whether the provisioner may `verb` Secrets in `namespace`: the apiserver's answer to its own
    /// question, which is never refused, so a namespace without consent sees no 403 from us.
    async fn may(&self, namespace: &str, verb: &str) -> Result<bool, String> {
        crate::cluster::access_review(self.client, Some(namespace), "", (verb, "secrets"))
            .await
            .map(|answer| answer.allowed)
            .map_err(|e| {
                crate::cluster::describe(
                    &format!("ask whether it may {verb} Secrets in {namespace}"),
                    &e,
                )
            })
    }

    fn no_consent(&self, namespace: &str) -> (CopyState, String) {
        (
            CopyState::NoConsent,
            format!(
                "namespace {namespace} has not consented to copies: its owner runs `sentry-tenants grant-credentials {namespace} -n {}`",
                self.install_namespace
            ),
        )
    }
}

enum Refusal {
    NoConsent,
    Failed(String),
}

fn asks_for(wanted: &[CredentialsCopy], copy: &CopyStatus) -> bool {
    wanted
        .iter()
        .any(|w| w.namespace == copy.namespace && w.secret_name == copy.secret_name)
}

/// A copy whose report is what it was keeps the time it was first reported so.
fn keep_unchanged_times(mut report: Vec<CopyStatus>, previous: &[CopyStatus]) -> Vec<CopyStatus> {
    for copy in &mut report {
        let before = previous
            .iter()
            .find(|p| p.namespace == copy.namespace && p.secret_name == copy.secret_name);
        if let Some(before) = before {
            let same = CopyStatus {
                at: before.at.clone(),
                ..copy.clone()
            };
            if same == *before {
                copy.at = before.at.clone();
            }
        }
    }
    report
}

/// The report of a run that wrote the Secret or its copies: the new hash, this run's uid, the
/// copies' states, when the password last changed, the Secret's uid (its marker written).
pub struct Report<'a> {
    pub hash: String,
    pub run: Option<&'a str>,
    pub copies: Vec<CopyStatus>,
    pub rotated_at: Option<Time>,
    pub secret_uid: String,
}

impl From<Report<'_>> for CredentialsStatus {
    fn from(r: Report<'_>) -> Self {
        CredentialsStatus {
            hash: r.hash,
            written_by: r.run.map(str::to_owned),
            rotated_at: r.rotated_at,
            secret_uid: Some(r.secret_uid),
            copies: r.copies,
        }
    }
}

/// Whether a run that wrote copies must say it failed: a copy it was asked for is not delivered
/// (the message says which), so the reconciler's retry, with its backoff, is the next step.
pub fn undelivered(copies: &[CopyStatus]) -> Option<String> {
    let failed: Vec<String> = copies
        .iter()
        .filter(|c| c.state != CopyState::Delivered)
        .map(|c| format!("{}/{}: {}", c.namespace, c.secret_name, c.message))
        .collect();
    (!failed.is_empty()).then(|| failed.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn a_copy_holds_what_apps_connect_with_and_never_the_rotation_bookkeeping() {
        let source = Secret {
            data: Some(data(&[
                ("password", "p"),
                ("pendingPassword", "q"),
                ("retiringPasswords", "r"),
                ("uri", "http://u"),
                ("username", "tenant_acme_user"),
            ])),
            ..Secret::default()
        };
        let keys: Vec<String> = copied_data(&source).into_keys().collect();
        assert_eq!(keys, ["password", "uri", "username"]);
    }

    /// What is sent to the apiserver, field by field: the entry's place and name, type Opaque, the
    /// data as given, the entry's labels and annotations with ours beside them (known values).
    #[test]
    fn a_copy_is_an_opaque_secret_in_the_entrys_namespace_marked_as_the_tenants() {
        let tenant: Tenant = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "namespace": "sentry-tenants", "uid": "u-1"},
            "spec": {},
        }))
        .unwrap();
        let entry: CredentialsCopy = serde_json::from_value(serde_json::json!({
            "namespace": "app", "secretName": "acme-db",
            "labels": {"example.com/team": "payments"},
            "annotations": {"example.com/reload": "true"},
        }))
        .unwrap();
        let copy = copy_secret(&tenant, &entry, &data(&[("password", "p")]), "h-1");
        let copy = serde_json::to_value(copy).unwrap();
        assert_eq!(copy["metadata"]["namespace"], "app");
        assert_eq!(copy["metadata"]["name"], "acme-db");
        assert_eq!(copy["type"], "Opaque");
        assert_eq!(copy["data"], serde_json::json!({"password": "cA=="}));
        assert_eq!(
            copy["metadata"]["annotations"],
            serde_json::json!({"example.com/reload": "true", "sentry.io/credentials-hash": "h-1"})
        );
        let labels = &copy["metadata"]["labels"];
        for (key, value) in [
            ("example.com/team", "payments"),
            ("app.kubernetes.io/component", "credentials-copy"),
            ("app.kubernetes.io/instance", "acme"),
            ("sentry.io/tenant", "acme"),
            ("sentry.io/tenant-uid", "u-1"),
            ("sentry.io/tenant-namespace", "sentry-tenants"),
        ] {
            assert_eq!(labels[key], value, "{key}");
        }
    }

    /// Known answer, from the shell (each field an 8-byte big-endian length and its bytes):
    /// `{ printf 'sentry-tenants/credentials/v1\0'; printf '\0\0\0\0\0\0\0\x02u1';
    /// printf '\0\0\0\0\0\0\0\x01a'; printf '\0\0\0\0\0\0\0\x01b'; } | sha256sum`
    #[test]
    fn the_credentials_hash_is_pinned_and_separates_fields_and_tenants() {
        let one = data(&[("a", "b")]);
        assert_eq!(
            credentials_hash("u1", &one),
            "8cd4740e4004e330f69af699da68a733b8e1ebfebe0f1360d61cdff17f04330d"
        );
        assert_ne!(credentials_hash("u2", &one), credentials_hash("u1", &one));
        // "ab" + "" and "a" + "b" must not collide.
        assert_ne!(
            credentials_hash("u1", &data(&[("ab", "")])),
            credentials_hash("u1", &data(&[("a", "b")]))
        );
    }
}
