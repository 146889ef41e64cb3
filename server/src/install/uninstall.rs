//! `uninstall`: removes the operator and its RBAC; keeps the CRDs and every tenant unless told to delete
//! them, and never leaves a RunJob stuck behind a finalizer nobody will remove.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::apply::{BUNDLE_SELECTOR, InstallError, NAMESPACED_KINDS, api_error};
use super::progress::Progress;
use crate::crd::{RUNJOB_FINALIZER, RunJob, Tenant};
use crate::leader::LEASE_NAME;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UninstallReport {
    pub deleted: Vec<String>,
    pub released_finalizers: Vec<String>,
    pub kept: Vec<String>,
}

fn absent(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub async fn uninstall(
    client: &Client,
    namespace: &str,
    delete_crds: bool,
    progress: &Progress,
) -> Result<UninstallReport, InstallError> {
    let mut report = UninstallReport::default();
    // First, while nothing else has changed: with the operator gone, nobody would remove these.
    release_runjob_finalizers(client, progress, &mut report).await?;

    for (group, version, kind) in NAMESPACED_KINDS {
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
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    delete(
        &leases,
        LEASE_NAME,
        &format!("Lease {namespace}/{LEASE_NAME}"),
        progress,
        &mut report,
    )
    .await?;

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
    if tenants_left == 0 {
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

/// Removes our finalizer from every RunJob in the cluster (the CRD is cluster-wide).
async fn release_runjob_finalizers(
    client: &Client,
    progress: &Progress,
    report: &mut UninstallReport,
) -> Result<(), InstallError> {
    let all: Api<RunJob> = Api::all(client.clone());
    let runs = match all.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) if absent(&e) => return Ok(()), // CRD not installed: nothing to release
        Err(e) => return Err(api_error("list RunJobs", &e)),
    };
    for run in runs
        .into_iter()
        .filter(|r| r.finalizers().iter().any(|f| f == RUNJOB_FINALIZER))
    {
        let ns = run.namespace().unwrap_or_default();
        let remaining: Vec<&String> = run
            .finalizers()
            .iter()
            .filter(|f| *f != RUNJOB_FINALIZER)
            .collect();
        let patch = json!({ "metadata": { "finalizers": remaining, "resourceVersion": run.resource_version() } });
        let api: Api<RunJob> = Api::namespaced(client.clone(), &ns);
        let what = format!("RunJob {ns}/{}", run.name_any());
        match api
            .patch(
                &run.name_any(),
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

async fn count_tenants(client: &Client, namespace: &str) -> Result<usize, InstallError> {
    let api: Api<Tenant> = Api::namespaced(client.clone(), namespace);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items.len()),
        Err(e) if absent(&e) => Ok(0),
        Err(e) => Err(api_error(&format!("list tenants in {namespace}"), &e)),
    }
}
