//! The restart drill on the real control plane: `sentry-tenants run` itself, as a process of its own
//! under the operator's ServiceAccount, is started anew after every step of a run and stopped (SIGTERM,
//! its graceful shutdown) as soon as the run has moved. Each start is a new operator: new caches filled by
//! its own lists and watches, new controllers, and the Lease won again through leader election. Nothing
//! in the test fills a cache or plays a controller.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

use crate::provision::{password, provision_run, tenant};
use crate::{Setup, setup};

const RUN: &str = "acme-provision-1";
/// More than a run has steps: the drill fails rather than loop.
const MAX_STARTS: usize = 30;

/// What has happened to the run so far, as one comparable line.
async fn progress(s: &Setup) -> String {
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), &s.ns);
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let run = runs.get_opt(RUN).await.ok().flatten();
    let job = jobs.get_opt(RUN).await.ok().flatten();
    let t = tenants.get_opt("acme").await.ok().flatten();
    format!(
        "run={:?} job_ref={} finalizers={} deleting={} job={} job_done={} tenant={:?} history={}",
        run.as_ref().and_then(|r| r.status.as_ref()?.phase),
        run.as_ref()
            .is_some_and(|r| r.status.as_ref().is_some_and(|s| s.job_ref.is_some())),
        run.as_ref()
            .map_or(0, |r| r.metadata.finalizers.iter().flatten().count()),
        run.as_ref()
            .is_some_and(|r| r.metadata.deletion_timestamp.is_some()),
        job.is_some(),
        job.as_ref()
            .and_then(|j| j.status.as_ref()?.succeeded)
            .unwrap_or(0),
        t.as_ref().and_then(|t| t.phase()),
        t.as_ref().map_or(0, |t| t.history().len()),
    )
}

async fn finished(s: &Setup) -> bool {
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let gone = matches!(runs.get_opt(RUN).await, Ok(None));
    let t = tenants.get("acme").await.ok();
    gone && t.is_some_and(|t| {
        t.phase() == Some(TenantPhase::Active) && t.history().iter().any(|h| h.name == RUN)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_process_restarted_after_every_step_of_a_run_makes_one_job_and_loses_nothing() {
    let s = setup("restart-drill").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    // The bundle (CRDs, RBAC, ServiceAccounts) with an operator Deployment whose image nobody can pull:
    // the only operator is the process this test starts.
    s.install_idle().await;
    let secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &s.ns);
    let admin: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "clickhouse-admin"},
        "stringData": {"username": "ch-admin", "password": "ch-admin-password"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &admin)
        .await
        .unwrap();
    let (_, kubeconfig) = s.as_account("sentry-tenants").await;
    s.apply(&tenant("acme", false));
    s.apply(&provision_run(RUN, "acme", 5));

    let mut steps = Vec::new();
    let mut starts = 0;
    while !finished(&s).await {
        starts += 1;
        assert!(
            starts <= MAX_STARTS,
            "still not done after {MAX_STARTS} operators: {steps:#?}"
        );
        let before = progress(&s).await;
        let identity = format!("restart-drill-{starts}");
        let operator = s.operator_process(&kubeconfig, &ch.url, &identity);
        wait_until(&format!("{identity} to win the Lease"), async || {
            (s.lease_holder().await.as_deref() == Some(identity.as_str())).then_some(())
        })
        .await;
        let after = wait_until(
            &format!("{identity} to move the run on from {before}"),
            async || {
                let now = progress(&s).await;
                (now != before || finished(&s).await).then_some(now)
            },
        )
        .await;
        sentry_tenants_tests::rehearsal::fail_here("restart_drill");
        let status = operator.terminate().expect("wait for the operator");
        assert!(
            status.success(),
            "the operator's graceful shutdown: {status}"
        );
        steps.push(after);
    }

    sentry_tenants_tests::summary(&format!(
        "restart drill (real control plane): {starts} operator processes, one per step, {} Job create(s)",
        s.creates("jobs", RUN)
    ));
    assert!(
        starts >= 3,
        "a run has more steps than {starts}: {steps:#?}"
    );
    assert_eq!(
        s.creates("jobs", RUN),
        1,
        "one Job across every restart: {steps:#?}"
    );
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let acme = tenants.get("acme").await.unwrap();
    let record = acme.history().iter().find(|h| h.name == RUN).cloned();
    assert_eq!(record.map(|r| r.phase), Some(RunPhase::Succeeded));
    assert!(ch.may_log_in(&s.ch_user("acme"), &password(&s, "acme").await));
    s.assert_no_forbidden();
}
