//! `uninstall`: removes the operator and its RBAC; keeps the CRDs and every tenant unless told to delete
//! them, and never leaves a RunJob or a Tenant stuck behind a finalizer nobody will remove. Order
//! matters: the operator is stopped first (a running one would add the finalizers back), then the
//! finalizers of the install namespace's RunJobs and Tenants are released (other namespaces belong to
//! other installs), then the rest goes. A namespace is deleted only if `install` created it.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::apply::{
    BUNDLE_SELECTOR, CREATED_BY_INSTALL, cluster_roles, cluster_scoped_selector, pruned_kinds,
};
use super::progress::Progress;
use super::wait::{InstallError, api_error};
use super::{OPERATOR_POD_SELECTOR, SHARD_DEPLOYMENTS};
use crate::crd::{RUNJOB_FINALIZER, RunJob, TENANT_FINALIZER, Tenant};
use crate::leader::LEASE_NAME;

/// The operator's Deployment (manifests/deployment.yaml).
const OPERATOR: &str = "sentry-tenants";
/// The Leases the operator's replicas elect their leaders on (the main one, and one per shard).
const LEADER_LEASES: &str =
    "app.kubernetes.io/managed-by=sentry-tenants,app.kubernetes.io/component=leader-election";

/// The main Deployment and the shards' Deployments.
async fn operator_deployments(api: &Api<Deployment>) -> Result<Vec<String>, InstallError> {
    let shards = match api
        .list(&ListParams::default().labels(SHARD_DEPLOYMENTS))
        .await
    {
        Ok(list) => list.items.iter().map(ResourceExt::name_any).collect(),
        Err(e) if absent(&e) => Vec::new(),
        Err(e) => return Err(api_error("list the shards' Deployments", &e)),
    };
    Ok(std::iter::once(OPERATOR.to_owned()).chain(shards).collect())
}

/// The main Lease, and the shards' Leases (found by their labels).
async fn leader_leases(api: &Api<Lease>) -> Result<Vec<String>, InstallError> {
    let labelled = match api.list(&ListParams::default().labels(LEADER_LEASES)).await {
        Ok(list) => list.items.iter().map(ResourceExt::name_any).collect(),
        Err(e) if absent(&e) => Vec::new(),
        Err(e) => return Err(api_error("list the leader Leases", &e)),
    };
    let shards = labelled.into_iter().filter(|l: &String| l != LEASE_NAME);
    Ok(std::iter::once(LEASE_NAME.to_owned())
        .chain(shards)
        .collect())
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UninstallReport {
    pub deleted: Vec<String>,
    pub released_finalizers: Vec<String>,
    pub kept: Vec<String>,
    /// What stays in ClickHouse because no Deprovision run will carry a reclaim policy out: one line
    /// per provisioned tenant that was being deleted (or goes with the CRDs).
    pub left_in_clickhouse: Vec<String>,
}

fn absent(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

#[derive(Debug, Clone)]
pub struct UninstallOptions {
    /// Also delete the CRDs, and with them every Tenant and RunJob.
    pub delete_crds: bool,
    /// How long to wait for the operator's pods to stop.
    pub timeout: Duration,
    pub poll: Duration,
}

impl Default for UninstallOptions {
    fn default() -> Self {
        Self {
            delete_crds: false,
            timeout: Duration::from_secs(300),
            poll: Duration::from_millis(500),
        }
    }
}

pub async fn uninstall(
    client: &Client,
    namespace: &str,
    opts: &UninstallOptions,
    progress: &Progress,
) -> Result<UninstallReport, InstallError> {
    let mut report = UninstallReport::default();
    let delete_crds = opts.delete_crds;
    stop_operator(client, namespace, opts, progress, &mut report).await?;
    // With the operator stopped, nobody would remove these. A tenant deleted after this goes without
    // its Deprovision run (its ClickHouse user and database stay, unlocked); a re-install puts the
    // finalizer back on every tenant left.
    release_finalizers::<RunJob>(client, namespace, RUNJOB_FINALIZER, progress, &mut report)
        .await?;
    report.left_in_clickhouse = left_in_clickhouse(client, namespace, delete_crds).await?;
    release_finalizers::<Tenant>(client, namespace, TENANT_FINALIZER, progress, &mut report)
        .await?;

    for (group, version, kind) in pruned_kinds() {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let live = match api
            .list(&ListParams::default().labels(BUNDLE_SELECTOR))
            .await
        {
            Ok(list) => list.items,
            Err(e) if absent(&e) => Vec::new(),
            Err(e) => return Err(api_error(&format!("list {kind}s in {namespace}"), &e)),
        };
        for obj in live {
            let what = format!("{kind} {namespace}/{}", obj.name_any());
            delete(&api, &obj.name_any(), &what, progress, &mut report).await?;
        }
    }
    let roles = cluster_roles(client);
    let this_install = ListParams::default().labels(&cluster_scoped_selector(namespace));
    let live = roles
        .list(&this_install)
        .await
        .map_err(|e| api_error("list ClusterRoles", &e))?;
    for role in live.items {
        let what = format!("ClusterRole {}", role.name_any());
        delete(&roles, &role.name_any(), &what, progress, &mut report).await?;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    for lease in leader_leases(&leases).await? {
        let what = format!("Lease {namespace}/{lease}");
        delete(&leases, &lease, &what, progress, &mut report).await?;
    }

    if delete_crds {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crate::crd::crds() {
            let name = crd.name_any();
            delete(
                &crds,
                &name,
                &format!("CustomResourceDefinition {name} (and every object of it)"),
                progress,
                &mut report,
            )
            .await?;
        }
    }

    let tenants_left = if delete_crds {
        0
    } else {
        count_tenants(client, namespace).await?
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let created_by_install = match namespaces.get_opt(namespace).await {
        Ok(ns) => ns.is_some_and(|ns| ns.annotations().contains_key(CREATED_BY_INSTALL)),
        Err(e) => return Err(api_error(&format!("get Namespace {namespace}"), &e)),
    };
    let retained = retained_secrets(client, namespace).await?;
    if !created_by_install {
        let kept = format!("Namespace {namespace}: install did not create it");
        progress.done(&format!("kept {kept}"));
        report.kept.push(kept);
    } else if !retained.is_empty() {
        let kept = format!(
            "Namespace {namespace}: it holds the credentials Secrets that deleted tenants left under reclaimPolicy Retain ({}), the only copy of their ClickHouse users' passwords; a re-install's tenant of the same name adopts its Secret, or copy them and delete the namespace yourself",
            retained.join(", ")
        );
        progress.done(&format!("kept {kept}"));
        report.kept.push(kept);
    } else if tenants_left == 0 {
        delete(
            &namespaces,
            namespace,
            &format!("Namespace {namespace}"),
            progress,
            &mut report,
        )
        .await?;
    } else {
        let kept = format!(
            "Namespace {namespace}: it holds {tenants_left} tenant(s) and their credentials Secrets (re-install to manage them again, or uninstall --delete-crds to remove everything)"
        );
        progress.done(&format!("kept {kept}"));
        report.kept.push(kept);
    }
    if !delete_crds {
        let kept =
            "the Tenant and RunJob CRDs (uninstall --delete-crds removes them and every tenant)"
                .to_owned();
        progress.done(&format!("kept {kept}"));
        report.kept.push(kept);
    }
    Ok(report)
}

async fn delete<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    progress: &Progress,
    report: &mut UninstallReport,
) -> Result<(), InstallError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            progress.done(&format!("deleted {what}"));
            report.deleted.push(what.to_owned());
            Ok(())
        }
        Err(e) if absent(&e) => Ok(()),
        Err(e) => Err(api_error(&format!("delete {what}"), &e)),
    }
}

/// Deletes the operator's Deployment and waits until none of its pods is left, so no operator is
/// running when the finalizers are released.
async fn stop_operator(
    client: &Client,
    namespace: &str,
    opts: &UninstallOptions,
    progress: &Progress,
    report: &mut UninstallReport,
) -> Result<(), InstallError> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    for name in operator_deployments(&deployments).await? {
        let what = format!("Deployment {namespace}/{name}");
        delete(&deployments, &name, &what, progress, report).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = ListParams::default().labels(OPERATOR_POD_SELECTOR);
    let started = std::time::Instant::now();
    loop {
        let left = match pods.list(&selector).await {
            Ok(list) => list.items.len(),
            Err(e) if absent(&e) => 0,
            Err(e) => return Err(api_error(&format!("list pods in {namespace}"), &e)),
        };
        if left == 0 {
            return Ok(());
        }
        if started.elapsed() >= opts.timeout {
            return Err(InstallError::Timeout {
                what: format!("{left} operator pod(s) to stop before releasing RunJob finalizers"),
                seconds: opts.timeout.as_secs(),
                namespace: namespace.to_owned(),
            });
        }
        progress.step(&format!("waiting for {left} operator pod(s) to stop"));
        tokio::time::sleep(opts.poll).await;
    }
}

/// Removes our finalizer from the RunJobs of the install namespace (the one this operator watched).
/// Removes `finalizer` from every object of kind `K` in the namespace (other finalizers stay).
async fn release_finalizers<K>(
    client: &Client,
    namespace: &str,
    finalizer: &str,
    progress: &Progress,
    report: &mut UninstallReport,
) -> Result<(), InstallError>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let kind = K::kind(&());
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let objects = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if absent(&e) => return Ok(()), // CRD not installed: nothing to release
        Err(e) => return Err(api_error(&format!("list {kind}s"), &e)),
    };
    for obj in objects
        .into_iter()
        .filter(|o| o.finalizers().iter().any(|f| f == finalizer))
    {
        let remaining = crate::controller::without(obj.finalizers(), finalizer);
        let patch = json!({ "metadata": { "finalizers": remaining, "resourceVersion": obj.resource_version() } });
        let what = format!("{kind} {namespace}/{}", obj.name_any());
        match api
            .patch(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                progress.done(&format!("released the finalizer of {what}"));
                report.released_finalizers.push(what);
            }
            Err(e) if absent(&e) => {}
            Err(e) => return Err(api_error(&format!("remove the finalizer of {what}"), &e)),
        }
    }
    Ok(())
}

/// The provisioned tenants of `namespace` that go without their Deprovision run — being deleted
/// already (the namespace deleted first, say), or all of them when the CRDs go — each with what of
/// theirs stays in ClickHouse. Nothing here touches ClickHouse: the lines say what a person may drop.
async fn left_in_clickhouse(
    client: &Client,
    namespace: &str,
    delete_crds: bool,
) -> Result<Vec<String>, InstallError> {
    let api: Api<Tenant> = Api::namespaced(client.clone(), namespace);
    let tenants = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if absent(&e) => return Ok(Vec::new()),
        Err(e) => return Err(api_error(&format!("list Tenants in {namespace}"), &e)),
    };
    Ok(tenants
        .iter()
        .filter(|t| delete_crds || t.metadata.deletion_timestamp.is_some())
        .filter_map(|t| {
            let database = t.status.as_ref()?.click_house_database_name.as_deref()?;
            Some(format!(
                "tenant {namespace}/{}: ClickHouse database {database} and user {} stay as they are \
                 (its reclaimPolicy {} was not carried out); drop them by hand if nobody needs them",
                t.name_any(),
                crate::names::clickhouse_user(database),
                t.spec.reclaim_policy.as_str()
            ))
        })
        .collect())
}

/// The credentials Secrets in `namespace` that deleted tenants left under reclaimPolicy Retain, by
/// name; read as metadata only (their values stay on the server).
async fn retained_secrets(client: &Client, namespace: &str) -> Result<Vec<String>, InstallError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let retained = ListParams::default().labels(crate::provision::RETAINED_FOR);
    match api.list_metadata(&retained).await {
        Ok(list) => Ok(list.items.iter().map(|s| s.name_any()).collect()),
        Err(e) if absent(&e) => Ok(Vec::new()),
        Err(e) => Err(api_error(
            &format!("list the retained credentials Secrets in {namespace}"),
            &e,
        )),
    }
}

async fn count_tenants(client: &Client, namespace: &str) -> Result<usize, InstallError> {
    let api: Api<Tenant> = Api::namespaced(client.clone(), namespace);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items.len()),
        Err(e) if absent(&e) => Ok(0),
        Err(e) => Err(api_error(&format!("list tenants in {namespace}"), &e)),
    }
}
