//! The operator's controllers on real watches, as the operator's ServiceAccount: Jobs created and
//! owned as the rules say, Pod Security admitting the provisioning pod, the garbage collector removing
//! a deleted run's Job and pods, and each status writer touching only its own fields.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use sentry_tenants::controller::runjob::record_in_history;
use sentry_tenants::controller::tenant::{self, new_run_job};
use sentry_tenants::crd::{
    ProvisioningPolicy, RunAction, RunJob, RunJobStatus, RunPhase, Tenant, TenantSpec,
};
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::{Enforces, TenantSync};
use sentry_tenants_tests::control_plane::wait_until;

use crate::{Operator, operator_context, setup};

/// A Manual tenant: these tests start its runs themselves.
async fn create_tenant(api: &Api<Tenant>, name: &str) -> Tenant {
    let t = Tenant {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: TenantSpec {
            provisioning: ProvisioningPolicy::Manual,
            ..TenantSpec::default()
        },
        status: None,
    };
    api.create(&PostParams::default(), &t).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provision_run_gets_one_owned_job_whose_pod_pod_security_admits_and_gc_removes_it_all() {
    let s = setup("operator-core").await;
    s.install_idle().await;
    let op = Operator::start(&s).await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), &s.ns);
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);

    let acme = create_tenant(&tenants, "acme").await;
    runs.create(
        &PostParams::default(),
        &new_run_job(&acme, "acme-provision-1", RunAction::Provision),
    )
    .await
    .unwrap();

    let job = wait_until("the Job", async || {
        jobs.get_opt("acme-provision-1").await.ok().flatten()
    })
    .await;
    let run = wait_until("jobRef recorded", async || {
        let r = runs.get("acme-provision-1").await.ok()?;
        r.status.as_ref()?.job_ref.is_some().then_some(r)
    })
    .await;
    assert_eq!(run.status.unwrap().job_ref.unwrap().uid, job.uid().unwrap());
    assert!(
        job.owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == run.metadata.uid.as_ref()),
        "the Job is controlled by its run"
    );
    // The real Job controller made a pod: Pod Security "restricted" (enforced on the namespace by
    // install) admitted the template. A refused pod would leave the Job without one.
    let selector = ListParams::default().labels("batch.kubernetes.io/job-name=acme-provision-1");
    let pod = wait_until("the Job's pod", async || {
        pods.list(&selector).await.ok()?.items.into_iter().next()
    })
    .await;
    assert!(
        pod.owner_references()
            .iter()
            .any(|o| Some(&o.uid) == job.metadata.uid.as_ref())
    );
    assert_eq!(
        pod.spec.unwrap().service_account_name.as_deref(),
        Some("sentry-tenants-provisioner")
    );

    runs.delete("acme-provision-1", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the run, its Job and its pod gone", async || {
        let run_gone = runs.get_opt("acme-provision-1").await.ok()?.is_none();
        let job_gone = jobs.get_opt("acme-provision-1").await.ok()?.is_none();
        let pods_gone = pods.list(&selector).await.ok()?.items.is_empty();
        (run_gone && job_gone && pods_gone).then_some(())
    })
    .await;
    op.stop().await;
    s.assert_no_forbidden();
}

/// The defect: the Tenant controller merge-patched its whole cached status, so a reconcile from a
/// stale copy put back an old `accessLocked` and dropped a history record written since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reconcile_from_a_stale_copy_reverts_no_field_it_does_not_own() {
    let s = setup("status-owners").await;
    s.install_idle().await;
    let (provisioner, _) = s.as_account("sentry-tenants-provisioner").await;
    // No controllers running: the test makes the reconcile happen at the moment it wants.
    let ctx = operator_context(&s).await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let sync = TenantSync::new(provisioner, &s.ns, "/var/lib/sentry/tantivy");
    let name = TenantName::parse("acme").unwrap();

    let created = create_tenant(&tenants, "acme").await;
    let locked = |locked| Enforces {
        locked: Some(locked),
        limits: None,
    };
    sync.report(&name, "tenant_acme", &created, locked(false), None)
        .await
        .unwrap();
    let unlocked = tenants.get("acme").await.unwrap();
    record_in_history(
        &unlocked,
        &finished_run("acme-provision-1", RunAction::Provision),
        &ctx,
    )
    .await
    .unwrap();
    let stale = tenants.get("acme").await.unwrap();
    assert_eq!(stale.history().len(), 1);

    // Since that copy was read: a Suspend run locked the logins and was recorded.
    sync.report(&name, "tenant_acme", &stale, locked(true), None)
        .await
        .unwrap();
    let fresh = tenants.get("acme").await.unwrap();
    record_in_history(
        &fresh,
        &finished_run("acme-suspend-20", RunAction::Suspend),
        &ctx,
    )
    .await
    .unwrap();

    tenant::reconcile(Arc::new(stale), Arc::clone(&ctx))
        .await
        .unwrap();

    let after = tenants.get("acme").await.unwrap();
    let status = after.status.clone().unwrap();
    assert_eq!(
        status.access_locked,
        Some(true),
        "the provisioner's lock kept"
    );
    let recorded: Vec<&str> = after.history().iter().map(|h| h.name.as_str()).collect();
    assert_eq!(
        recorded,
        ["acme-suspend-20", "acme-provision-1"],
        "no history record lost"
    );
    assert_eq!(
        status.click_house_database_name.as_deref(),
        Some("tenant_acme")
    );
    s.assert_no_forbidden();
}

fn finished_run(name: &str, action: RunAction) -> RunJob {
    let now = Time(jiff::Timestamp::now());
    let mut run = RunJob::new(name, sentry_tenants::crd::RunJobSpec::new("acme", action));
    run.metadata.uid = Some(format!("uid-{name}"));
    run.status = Some(RunJobStatus {
        phase: Some(RunPhase::Succeeded),
        start_time: Some(now.clone()),
        completion_time: Some(now),
        ..RunJobStatus::default()
    });
    run
}
