//! Applying the bundle: server-side apply with one field manager, CRDs first and waited for, then the
//! rest, then pruning what the new bundle no longer ships, then waiting for the rollout.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};

use super::Values;
use super::monitoring::MONITORING_CRDS;
use super::progress::Progress;
use super::wait::{InstallError, api_error, poll};

pub const MANAGER: &str = "sentry-tenants";
/// Only objects carrying this selector are ever pruned: what an install created, never the tenants'
/// Secrets or the operator's Jobs.
pub const BUNDLE_SELECTOR: &str =
    "app.kubernetes.io/managed-by=sentry-tenants,sentry.io/bundle=install";
/// On a namespace `install` created (and only then): `uninstall` never deletes a namespace without it.
pub const CREATED_BY_INSTALL: &str = "sentry.io/created-by-install";

#[derive(Debug, Clone)]
pub struct InstallOptions {
    pub force_conflicts: bool,
    /// Wait for the rollout, then prune; without it nothing is pruned.
    pub wait: bool,
    pub timeout: Duration,
    pub poll: Duration,
    /// Credentials to store in the ClickHouse admin Secret (`--clickhouse-admin-password-stdin`).
    pub clickhouse_admin: Option<AdminCredentials>,
}

/// The ClickHouse admin account the provisioning Jobs log in as. The password is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminCredentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for AdminCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Default for InstallOptions {
    fn default() -> Self {
        Self {
            force_conflicts: false,
            wait: true,
            timeout: Duration::from_secs(300),
            poll: Duration::from_millis(500),
            clickhouse_admin: None,
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub applied: Vec<String>,
    /// Objects of another operator's kinds left out because that operator's CRD is not installed.
    pub skipped: Vec<String>,
    pub pruned: Vec<String>,
    pub kept: Vec<String>,
}

/// The API for one object of the bundle.
pub fn api_for(client: &Client, obj: &DynamicObject) -> Api<DynamicObject> {
    let types = obj.types.clone().unwrap_or_default();
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", types.api_version.as_str()));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &types.kind));
    match obj.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

pub fn describe_obj(obj: &DynamicObject) -> String {
    let kind = obj
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    match obj.namespace() {
        Some(ns) => format!("{kind} {ns}/{}", obj.name_any()),
        None => format!("{kind} {}", obj.name_any()),
    }
}

pub async fn install(
    client: &Client,
    values: &Values,
    opts: &InstallOptions,
    progress: &Progress,
) -> Result<InstallReport, InstallError> {
    let mut report = InstallReport::default();
    let mut objects = values.objects()?;
    skip_kinds_without_crd(client, &mut objects, progress, &mut report).await?;
    for ns in objects.iter_mut().filter(|o| kind_of(o) == "Namespace") {
        claim_if_new(client, ns).await?;
    }
    let (crds, rest): (Vec<_>, Vec<_>) = objects
        .iter()
        .partition(|o| kind_of(o) == "CustomResourceDefinition");

    let mut applied_crds = Vec::new();
    for crd in &crds {
        applied_crds.push(apply_one(client, crd, opts, progress, &mut report).await?);
    }
    for crd in applied_crds {
        wait_established(client, crd, opts, progress, &values.namespace).await?;
    }
    // The operator's Deployments: the main one first, then one per shard.
    let mut deployments = Vec::new();
    for obj in &rest {
        let applied = apply_one(client, obj, opts, progress, &mut report).await?;
        if kind_of(obj) == "Deployment" {
            deployments.push((obj.name_any(), applied));
        }
    }
    if let Some(admin) = &opts.clickhouse_admin {
        apply_admin_secret(client, values, admin, progress).await?;
    }
    if opts.wait {
        for (name, applied) in deployments {
            super::rollout::wait_rollout(
                client,
                &values.namespace,
                &name,
                typed(&applied),
                (opts.timeout, opts.poll),
                progress,
            )
            .await?;
        }
        // Only once the new version runs: a failed upgrade keeps everything the old one had.
        prune(client, values, &objects, progress, &mut report).await?;
    }
    Ok(report)
}

/// Leaves out the objects of the Prometheus Operator's kinds (`--monitoring`) when the cluster lacks
/// their CRD, saying so: monitoring is an addition, not a reason to fail the install.
async fn skip_kinds_without_crd(
    client: &Client,
    objects: &mut Vec<DynamicObject>,
    progress: &Progress,
    report: &mut InstallReport,
) -> Result<(), InstallError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, _, kind, crd) in MONITORING_CRDS {
        if !objects.iter().any(|o| kind_of(o) == *kind) {
            continue;
        }
        let exists = crds
            .get_opt(crd)
            .await
            .map_err(|e| api_error(&format!("get CRD {crd}"), &e))?
            .is_some();
        if exists {
            continue;
        }
        for obj in objects.iter().filter(|o| kind_of(o) == *kind) {
            let what = describe_obj(obj);
            progress.done(&format!(
                "skipped {what}: the CRD {crd} is not installed (the Prometheus Operator's); \
                 re-run install with --monitoring once it is"
            ));
            report.skipped.push(what);
        }
        objects.retain(|o| kind_of(o) != *kind);
    }
    Ok(())
}

/// Marks the namespace as created by install when it does not exist yet (or was created by an earlier
/// install: applying without the mark would remove it). A namespace someone else made stays theirs.
async fn claim_if_new(client: &Client, ns: &mut DynamicObject) -> Result<(), InstallError> {
    let name = ns.name_any();
    let existing = api_for(client, ns)
        .get_opt(&name)
        .await
        .map_err(|e| api_error(&format!("get Namespace {name}"), &e))?;
    if existing.is_none_or(|n| n.annotations().contains_key(CREATED_BY_INSTALL)) {
        ns.annotations_mut()
            .insert(CREATED_BY_INSTALL.to_owned(), "true".to_owned());
    }
    Ok(())
}

fn kind_of(obj: &DynamicObject) -> &str {
    obj.types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default()
}

/// Server-side applies `obj`; returns the object as the apiserver answered (its status included, so a
/// wait that is already over costs no further request).
async fn apply_one(
    client: &Client,
    obj: &DynamicObject,
    opts: &InstallOptions,
    progress: &Progress,
    report: &mut InstallReport,
) -> Result<DynamicObject, InstallError> {
    let what = describe_obj(obj);
    progress.step(&format!("applying {what}"));
    let mut params = PatchParams::apply(MANAGER);
    params.force = opts.force_conflicts;
    match api_for(client, obj)
        .patch(&obj.name_any(), &params, &Patch::Apply(obj))
        .await
    {
        Ok(applied) => {
            progress.done(&format!("applied {what}"));
            report.applied.push(what);
            Ok(applied)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Err(conflict(obj, &status.message)),
        Err(e) => Err(api_error(&format!("apply {what}"), &e)),
    }
}

/// Reads the apiserver's conflict message: `Apply failed with 1 conflict: conflict with "kubectl-edit"
/// using apps/v1: .spec.replicas`.
fn conflict(obj: &DynamicObject, message: &str) -> InstallError {
    let managers: BTreeSet<String> = message
        .split("conflict with \"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(|m| format!("{m:?}"))
        .collect();
    let fields: Vec<&str> = message
        .split(": ")
        .filter(|s| s.starts_with('.'))
        .flat_map(|s| s.split(['\n', ',']))
        .map(str::trim)
        .filter(|s| s.starts_with('.'))
        .collect();
    InstallError::Conflict {
        kind: kind_of(obj).to_owned(),
        name: obj.name_any(),
        managers: if managers.is_empty() {
            "another field manager".to_owned()
        } else {
            managers.into_iter().collect::<Vec<_>>().join(", ")
        },
        fields: if fields.is_empty() {
            "(see the API message)".to_owned()
        } else {
            fields.join(", ")
        },
    }
}

/// The typed view of an applied object.
fn typed<K: serde::de::DeserializeOwned>(obj: &DynamicObject) -> Option<K> {
    serde_json::to_value(obj)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
}

/// Waits for the CRD `applied` (as the apply answered) to be Established; a re-run finds it so already.
async fn wait_established(
    client: &Client,
    applied: DynamicObject,
    opts: &InstallOptions,
    progress: &Progress,
    ns: &str,
) -> Result<(), InstallError> {
    let name = applied.name_any();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let what = format!("CRD {name} to be Established");
    let mut known: Option<CustomResourceDefinition> = typed(&applied);
    poll(&what, (opts.timeout, opts.poll), progress, ns, async || {
        let crd = match known.take() {
            Some(crd) => crd,
            None => api
                .get(&name)
                .await
                .map_err(|e| api_error(&format!("get CRD {name}"), &e))?,
        };
        let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        Ok(established.then_some(()))
    })
    .await
}

/// Kinds an install creates, so an upgrade can prune the ones a new bundle dropped.
pub const NAMESPACED_KINDS: &[(&str, &str, &str)] = &[
    ("apps", "v1", "Deployment"),
    ("", "v1", "Service"),
    ("", "v1", "ConfigMap"),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "Role"),
    ("", "v1", "ServiceAccount"),
    ("networking.k8s.io", "v1", "NetworkPolicy"),
];

/// Every namespaced kind an install may have applied: its own, and the Prometheus Operator's of
/// `--monitoring` (whose CRD may be missing: listing them then finds nothing).
pub fn pruned_kinds() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    let monitoring = MONITORING_CRDS.iter().map(|(g, v, k, _)| (*g, *v, *k));
    NAMESPACED_KINDS.iter().copied().chain(monitoring)
}

/// True if our field manager server-side applied `obj`: the identity of what an install made. Labels
/// alone are not one (anyone can copy them onto anything); `managedFields` is written by the
/// apiserver, naming who applied.
pub fn applied_by_install(obj: &DynamicObject) -> bool {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|f| f.manager.as_deref() == Some(MANAGER) && f.operation.as_deref() == Some("Apply"))
}

/// Deletes objects an install applied that `objects` no longer contains, in the install namespace.
/// CRDs the bundle dropped are never deleted — deleting a CRD deletes every object of it, and one
/// could be created between any check and the delete — only reported, with how many objects they
/// hold. Namespaces are never pruned.
async fn prune(
    client: &Client,
    values: &Values,
    objects: &[DynamicObject],
    progress: &Progress,
    report: &mut InstallReport,
) -> Result<(), InstallError> {
    let wanted: BTreeSet<(String, String)> = objects
        .iter()
        .map(|o| (kind_of(o).to_owned(), o.name_any()))
        .collect();
    let selector = ListParams::default().labels(BUNDLE_SELECTOR);
    for (group, version, kind) in pruned_kinds() {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api = Api::namespaced_with(client.clone(), &values.namespace, &resource);
        let scope = format!("{}/", values.namespace);
        prune_kind(&api, kind, &scope, &selector, &wanted, progress, report).await?;
    }
    // This install's aggregated ClusterRoles (named and labelled by its namespace), once dropped.
    let roles = cluster_roles(client);
    let this_install = ListParams::default().labels(&cluster_scoped_selector(&values.namespace));
    prune_kind(
        &roles,
        "ClusterRole",
        "",
        &this_install,
        &wanted,
        progress,
        report,
    )
    .await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let ours = crds
        .list(&selector)
        .await
        .map_err(|e| api_error("list CRDs", &e))?;
    for crd in ours
        .items
        .into_iter()
        .filter(|c| !wanted.contains(&("CustomResourceDefinition".to_owned(), c.name_any())))
    {
        let what = format!("CustomResourceDefinition {}", crd.name_any());
        let held = match crd_has_instances(client, &crd).await? {
            true => "objects of it still exist",
            false => "no object of it is left",
        };
        progress.done(&format!(
            "kept {what}: no longer in the bundle and {held}; delete it yourself once nothing needs it \
             (kubectl delete crd {} — that deletes every object of it)",
            crd.name_any()
        ));
        report.kept.push(what);
    }
    Ok(())
}

/// Deletes the objects of `kind` that `selector` finds, install applied, and `wanted` lacks.
async fn prune_kind(
    api: &Api<DynamicObject>,
    kind: &str,
    scope: &str,
    selector: &ListParams,
    wanted: &BTreeSet<(String, String)>,
    progress: &Progress,
    report: &mut InstallReport,
) -> Result<(), InstallError> {
    let live = match api.list(selector).await {
        Ok(list) => list.items,
        // A kind whose CRD is not installed has nothing to prune.
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(api_error(&format!("list {kind}s"), &e)),
    };
    for obj in live
        .into_iter()
        .filter(|o| !wanted.contains(&(kind.to_string(), o.name_any())))
        .filter(applied_by_install)
    {
        let what = format!("{kind} {scope}{}", obj.name_any());
        api.delete(&obj.name_any(), &DeleteParams::background())
            .await
            .map_err(|e| api_error(&format!("prune {what}"), &e))?;
        progress.done(&format!("pruned {what} (no longer in the bundle)"));
        report.pruned.push(what);
    }
    Ok(())
}

/// The one cluster-scoped kind an install prunes and uninstalls: its aggregated ClusterRoles.
pub fn cluster_roles(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// Selects the cluster-scoped objects of the install in `namespace`.
pub fn cluster_scoped_selector(namespace: &str) -> String {
    format!(
        "{BUNDLE_SELECTOR},{}={namespace}",
        super::bundle::INSTALL_NAMESPACE
    )
}

pub async fn crd_has_instances(
    client: &Client,
    crd: &CustomResourceDefinition,
) -> Result<bool, InstallError> {
    let Some(version) = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or(crd.spec.versions.first())
    else {
        return Ok(false);
    };
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind),
        &crd.spec.names.plural,
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    match api.list(&ListParams::default().limit(1)).await {
        Ok(list) => Ok(!list.items.is_empty()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(api_error("list objects of a CRD", &e)),
    }
}

/// Server-side applies the ClickHouse admin Secret with `admin`'s credentials. It carries the
/// recommended labels but not the bundle's, so no prune ever touches it, and `uninstall` leaves it.
async fn apply_admin_secret(
    client: &Client,
    values: &Values,
    admin: &AdminCredentials,
    progress: &Progress,
) -> Result<(), InstallError> {
    let ns = &values.namespace;
    let name = &values.clickhouse_admin_secret;
    let what = format!("Secret {ns}/{name}");
    progress.step(&format!("applying {what}"));
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": crate::labels::of_component("clickhouse-admin"),
        },
        "type": "Opaque",
        "stringData": {"username": admin.username, "password": admin.password},
    });
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&secret),
        )
        .await
        .map_err(|e| api_error(&format!("apply {what}"), &e))?;
    progress.done(&format!("applied {what} (ClickHouse admin credentials)"));
    Ok(())
}
