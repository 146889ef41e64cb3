//! The installed operator as pods: two replicas and the Lease between them, a leader that dies, and an
//! operator restarted while a run is in flight. Each Job is created exactly once (the audit log counts).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, LogParams};
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_controllers_caught_up, wait_gone, wait_until};

use crate::provision::{finished, provision_run, tenant, tenant_in_phase};
use crate::{Setup, setup, setup_alone};

const OPERATOR_PODS: &str =
    "app.kubernetes.io/name=sentry-tenants,app.kubernetes.io/component=operator";

/// The restart happened while the run was in flight: its Job finished after `restarted_at` (the audit
/// log says when the Job controller wrote so), or the test proved nothing about a restart mid-run.
fn in_flight_at(s: &Setup, job: &str, restarted_at: jiff::Timestamp) {
    let finished = s
        .job_finished_at(job)
        .expect("the Job's finishing status write");
    assert!(
        finished > restarted_at,
        "the run had finished ({finished}) before the restart ({restarted_at}): nothing was restarted mid-run"
    );
}

async fn ready_operator_pods(s: &Setup, n: usize) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(&format!("{n} ready operator pod(s)"), async || {
        let list = pods
            .list(&ListParams::default().labels(OPERATOR_PODS))
            .await
            .ok()?;
        let ready: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .collect();
        (ready.len() == n).then_some(ready)
    })
    .await
}

async fn running(runs: &Api<RunJob>, name: &str) {
    wait_until(&format!("{name} Running"), async || {
        let r = runs.get_opt(name).await.ok()??;
        (r.status?.phase == Some(RunPhase::Running)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_replicas_one_leads_and_the_other_takes_over_what_a_killed_leader_left() {
    let s = setup("replicas").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_replicas(&ch.url, ("ch-admin", "ch-admin-password"), 2)
        .await;
    let pods = ready_operator_pods(&s, 2).await;
    let leader = wait_until("a leader", async || s.lease_holder().await).await;
    assert!(
        pods.iter().any(|p| p.name_any() == leader),
        "{leader} is one of the pods"
    );

    s.apply(&tenant("acme", false));
    s.apply(&provision_run("acme-provision-1", "acme", 20));
    finished(&s, "acme-provision-1").await;
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;

    // The leader dies without releasing its Lease (no grace period).
    let all_pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    all_pods.delete(&leader, &dp).await.unwrap();
    // Work left behind: a suspension to enforce, and the run's cleanup when its TTL runs out.
    s.set_suspended("acme", true);
    let next = wait_until("another leader", async || {
        s.lease_holder().await.filter(|h| *h != leader)
    })
    .await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until("the suspension enforced by the new leader", async || {
        let t = tenants.get("acme").await.ok()?;
        (t.access_locked() && t.phase() == Some(TenantPhase::Suspended)).then_some(())
    })
    .await;
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_gone(&runs, "acme-provision-1").await;
    assert_ne!(next, leader);
    assert_eq!(
        s.creates("jobs", "acme-provision-1"),
        1,
        "one Job for the run"
    );
    s.assert_no_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restarted_while_a_run_is_in_flight_finishes_it_with_one_job() {
    let s = setup("restart").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
        .await;
    let operator = ready_operator_pods(&s, 1).await.remove(0);
    s.apply(&tenant("acme", false));
    // A slow ClickHouse keeps the provisioning pod busy while the operator restarts.
    ch.set_delay(Duration::from_millis(700));
    s.apply(&provision_run("acme-provision-1", "acme", 300));
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    running(&runs, "acme-provision-1").await;
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let restarted_at = jiff::Timestamp::now();
    pods.delete(&operator.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let replacement = wait_until("a new operator pod", async || {
        let list = pods
            .list(&ListParams::default().labels(OPERATOR_PODS))
            .await
            .ok()?;
        list.items
            .into_iter()
            .find(|p| p.name_any() != operator.name_any())
    })
    .await;
    ch.set_delay(Duration::ZERO);
    let run = finished(&s, "acme-provision-1").await;
    assert_eq!(run.status.unwrap().phase, Some(RunPhase::Succeeded));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    assert_eq!(
        s.creates("jobs", "acme-provision-1"),
        1,
        "one Job for the run across the restart"
    );
    in_flight_at(&s, "acme-provision-1", restarted_at);
    assert_ne!(replacement.name_any(), operator.name_any());
    s.assert_no_forbidden();
}

/// kube-apiserver stopped and started again while a run is in flight: every watch (the operator's,
/// the controller-manager's, the kubelet's) breaks and must come back by itself. The run finishes with
/// one Job whose one pod waited the outage out (no pod retry, no retry's delay), and a change made
/// after the restart is acted on, so the operator's watches recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_apiserver_restarted_mid_run_loses_nothing_and_the_watches_recover() {
    let s = setup_alone("apiserver-restart").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
        .await;
    let operator = ready_operator_pods(&s, 1).await.remove(0);
    s.apply(&tenant("acme", false));
    ch.set_delay(Duration::from_millis(700));
    s.apply(&provision_run("acme-provision-1", "acme", 300));
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    running(&runs, "acme-provision-1").await;

    let restarted_at = jiff::Timestamp::now();
    s.plane.restart_apiserver();
    ch.set_delay(Duration::ZERO);
    // Pods reach the apiserver through the `kubernetes` Service, whose endpoint the apiserver takes
    // away as it stops and puts back as it starts; kube-proxy, whose own watches broke too, must see
    // it again. That recovery is the cluster's, not the operator's: wait for its evidence (the
    // operator's Lease renewed through the restarted apiserver) before the operator's is waited on.
    operator_reaches_the_api_again(&s).await;

    let run = finished(&s, "acme-provision-1").await;
    assert_eq!(
        run.status.as_ref().unwrap().phase,
        Some(RunPhase::Succeeded),
        "{:#?}",
        run.status
    );
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    in_flight_at(&s, "acme-provision-1", restarted_at);
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let ran: Vec<String> = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=acme-provision-1"))
        .await
        .unwrap()
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "one provisioner pod across the outage: {ran:?}"
    );
    s.set_suspended("acme", true);
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(
        "the suspension made after the restart enforced",
        async || {
            let t = tenants.get("acme").await.ok()?;
            (t.access_locked() && t.phase() == Some(TenantPhase::Suspended)).then_some(())
        },
    )
    .await;
    assert_eq!(
        s.creates("jobs", "acme-provision-1"),
        1,
        "one Job for the run across the restart"
    );
    // The operator's log tells its operators what happened to its watches.
    for watch in ["tenants", "runjobs", "jobs"] {
        let said = |message: &str, line: &str| {
            line.contains(&format!("\"message\":\"{message}"))
                && line.contains(&format!("\"watch\":\"{watch}\""))
        };
        wait_until(
            &format!("the operator's log: the {watch} watch back"),
            async || {
                let log = pods
                    .logs(&operator.name_any(), &operator_log())
                    .await
                    .ok()?;
                let broke = log.lines().position(|l| said("a watch broke", l))?;
                log.lines()
                    .skip(broke)
                    .any(|l| said("a watch is back", l))
                    .then_some(())
            },
        )
        .await;
    }
    let suspend_runs: Vec<String> = s
        .run_names()
        .await
        .into_iter()
        .filter(|n| n.starts_with("acme-suspend-"))
        .collect();
    assert_eq!(suspend_runs.len(), 1, "one Suspend run: {suspend_runs:?}");
    assert_eq!(s.creates("jobs", &suspend_runs[0]), 1);
    s.assert_no_forbidden();
    wait_controllers_caught_up(&s.admin).await;
}

/// Waits until the operator's leader renews its Lease through an apiserver started after now.
async fn operator_reaches_the_api_again(s: &Setup) {
    let back_at = jiff::Timestamp::now();
    let leases: Api<Lease> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(
        "the operator's Lease renewed after the apiserver restart",
        async || {
            let lease = leases.get(sentry_tenants::leader::LEASE_NAME).await.ok()?;
            let renewed = lease.spec?.renew_time?.0;
            (renewed > back_at).then_some(())
        },
    )
    .await;
}

fn operator_log() -> LogParams {
    LogParams {
        container: Some("operator".into()),
        ..LogParams::default()
    }
}
