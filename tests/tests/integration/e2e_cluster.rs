//! The operator core against a real cluster, when `SENTRY_TENANTS_E2E_KUBECONFIG` names a kubeconfig.
//! No cluster can run on the machines this project is built on: there the test is compiled as
//! `#[ignore]` with the reason (see `tests/build.rs`), so the run reports it as ignored, not passed.
//!
//! Flow: apply the CRDs, wait until Established, run both controllers in-process in a fresh namespace,
//! create a tenant and a Provision RunJob, and check the Job really created is controlled by the run
//! (name and uid in `status.jobRef`); delete the run and check its Job goes with it (finalizer + Background).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use sentry_tenants::clock::Clock;
use sentry_tenants::config::OperatorConfig;
use sentry_tenants::controller::{Context, Stores, run_controllers, tenant::new_run_job};
use sentry_tenants::crd::{RunAction, RunJob, Tenant, TenantSpec, crds};
use sentry_tenants::telemetry::Metrics;
use tokio::sync::watch;

const ENV: &str = "SENTRY_TENANTS_E2E_KUBECONFIG";

async fn client_from_env() -> Client {
    let path = std::env::var(ENV).unwrap_or_else(|_| panic!("{ENV} must name a kubeconfig"));
    let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| panic!("{ENV}={path}: {e}"));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    let client = Client::try_from(config).expect("client");
    if let Err(e) = client.apiserver_version().await {
        panic!("{ENV} is set but the cluster is unreachable: {e}");
    }
    client
}

async fn poll<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..120 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("timed out after 60s waiting for {what}");
}

#[tokio::test]
#[cfg_attr(
    not(e2e_cluster),
    ignore = "skipped: set SENTRY_TENANTS_E2E_KUBECONFIG to a kubeconfig to run against a real cluster"
)]
async fn operator_core_against_a_real_cluster() {
    let client = client_from_env().await;
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds() {
        let name = crd.name_any();
        crd_api
            .patch(
                &name,
                &PatchParams::apply("sentry-tenants-e2e").force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap();
        poll("CRD Established", async || {
            let c = crd_api.get(&name).await.ok()?;
            let established = c
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        })
        .await;
    }
    let ns = format!("sentry-tenants-e2e-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();

    let (stores, writers) = Stores::shared();
    let (_leader, leader_rx) = watch::channel(true);
    let ctx = Arc::new(Context::new(
        client.clone(),
        OperatorConfig::for_namespace(&ns),
        stores,
        Arc::new(Metrics::default()),
        Clock::System,
        leader_rx,
    ));
    let (stop, mut stop_rx) = watch::channel(false);
    let shutdown = futures::FutureExt::shared(Box::pin(async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    }));
    let controllers = tokio::spawn(run_controllers(ctx, writers, shutdown));

    let tenants: Api<Tenant> = Api::namespaced(client.clone(), &ns);
    let runs: Api<RunJob> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let tenant = Tenant {
        metadata: ObjectMeta {
            name: Some("e2e".into()),
            ..Default::default()
        },
        spec: TenantSpec::default(),
        status: None,
    };
    let tenant = tenants
        .create(&PostParams::default(), &tenant)
        .await
        .unwrap();
    runs.create(
        &PostParams::default(),
        &new_run_job(&tenant, "e2e-provision-1", RunAction::Provision),
    )
    .await
    .unwrap();

    let job = poll("Job created", async || {
        jobs.get_opt("e2e-provision-1").await.ok().flatten()
    })
    .await;
    let run = poll("jobRef recorded", async || {
        let r = runs.get("e2e-provision-1").await.ok()?;
        r.status.as_ref()?.job_ref.is_some().then_some(r)
    })
    .await;
    assert_eq!(run.status.unwrap().job_ref.unwrap().uid, job.uid().unwrap());
    assert!(
        job.owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == run.metadata.uid.as_ref())
    );

    runs.delete("e2e-provision-1", &DeleteParams::default())
        .await
        .unwrap();
    poll("RunJob and Job gone", async || {
        let run_gone = runs.get_opt("e2e-provision-1").await.ok()?.is_none();
        let job_gone = jobs.get_opt("e2e-provision-1").await.ok()?.is_none();
        (run_gone && job_gone).then_some(())
    })
    .await;

    stop.send_replace(true);
    let _ = controllers.await;
    namespaces
        .delete(&ns, &DeleteParams::background())
        .await
        .unwrap();
}

/// install → check → uninstall against the real cluster, with an image the cluster can pull
/// (`SENTRY_TENANTS_E2E_IMAGE`, e.g. one built from the Dockerfile and loaded into kind).
#[tokio::test]
#[cfg_attr(
    not(e2e_cluster),
    ignore = "skipped: set SENTRY_TENANTS_E2E_KUBECONFIG to a kubeconfig to run against a real cluster"
)]
async fn install_check_uninstall_against_a_real_cluster() {
    use sentry_tenants::install::check::{all_passed, post_install, preflight};
    use sentry_tenants::install::{InstallOptions, Progress, Values, install, uninstall};
    let client = client_from_env().await;
    let ns = format!("sentry-tenants-e2e-install-{}", std::process::id());
    let image = std::env::var("SENTRY_TENANTS_E2E_IMAGE")
        .unwrap_or_else(|_| sentry_tenants::DEFAULT_IMAGE.into());
    let pre = preflight(&client, &ns).await;
    assert!(all_passed(&pre), "{pre:#?}");
    let values = Values {
        image,
        ..sentry_tenants_tests::install_values(&ns)
    }
    .validate()
    .unwrap();
    install(
        &client,
        &values,
        &InstallOptions::default(),
        &Progress::Lines,
    )
    .await
    .unwrap();
    let again = install(
        &client,
        &values,
        &InstallOptions::default(),
        &Progress::Lines,
    )
    .await
    .unwrap();
    assert!(again.pruned.is_empty());
    let mut lines = Vec::new();
    for _ in 0..60 {
        lines = post_install(
            &client,
            &ns,
            env!("CARGO_PKG_VERSION"),
            jiff::Timestamp::now(),
        )
        .await;
        if all_passed(&lines) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(all_passed(&lines), "{lines:#?}");
    uninstall(&client, &ns, false, &Progress::Lines)
        .await
        .unwrap();
}
