//! Provisioning end to end: `kubectl apply` a Tenant and a Provision run; the real Job controller makes
//! the pod, Pod Security admits it, the node runs `provision-tenant` in a container as the provisioner's
//! ServiceAccount, and ClickHouse answers — the HTTP stand-in as a current server, or Debian's 18.16
//! as the old server it is.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_server::{ADMIN, ADMIN_PASSWORD, ClickHouseServer};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

pub use sentry_tenants_tests::cluster_tier::{provision_run, tenant, tenant_with};

use crate::{Setup, setup};

const ADMIN_USER: &str = "ch-admin";
const ADMIN_PASS: &str = "ch-admin-password";

pub async fn finished(s: &Setup, run: &str) -> RunJob {
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(&format!("{run} to finish"), async || {
        let r = runs.get_opt(run).await.ok()??;
        r.status.as_ref()?.phase.filter(|p| p.is_finished())?;
        Some(r)
    })
    .await
}

pub async fn tenant_in_phase(s: &Setup, name: &str, phase: TenantPhase) -> Tenant {
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(&format!("tenant {name} {phase:?}"), async || {
        let t = tenants.get(name).await.ok()?;
        (t.phase() == Some(phase)).then_some(t)
    })
    .await
}

/// The tenant's password, from the Secret the provisioner wrote.
pub async fn password(s: &Setup, tenant: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &s.ns);
    let secret = secrets.get(&format!("{tenant}-clickhouse")).await.unwrap();
    String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap()
}

/// Every phase the run `name` shows, in order, as a watch sees its changes.
fn record_phases(
    s: &Setup,
    name: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<Vec<RunPhase>>>,
    tokio::task::JoinHandle<()>,
) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = std::sync::Arc::clone(&seen);
    let task = tokio::spawn(async move {
        let mut events = watcher(runs, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(run)) = events.next().await {
            let phase = run.status.and_then(|st| st.phase);
            let mut seen = into.lock().unwrap();
            if let Some(phase) = phase.filter(|p| seen.last() != Some(p)) {
                seen.push(phase);
            }
        }
    });
    (seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provision_run_makes_the_tenant_active_through_real_jobs_and_pods_and_is_cleaned_up() {
    let s = setup("provision").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN_USER, ADMIN_PASS).await;
    s.install_with_clickhouse(&ch.url, (ADMIN_USER, ADMIN_PASS))
        .await;
    let (phases, watch) = record_phases(&s, "acme-provision-1");
    s.apply(&tenant("acme", false));
    s.apply(&provision_run("acme-provision-1", "acme", 5));

    let run = finished(&s, "acme-provision-1").await;
    let status = run.status.clone().unwrap();
    assert_eq!(status.phase, Some(RunPhase::Succeeded), "{status:#?}");
    // `finished` reads the run with a GET; the recording watch may bring that change a moment later.
    wait_until("the recording watch to see the run finish", async || {
        let seen = phases.lock().unwrap();
        seen.last().filter(|p| p.is_finished()).map(|_| ())
    })
    .await;
    watch.abort();
    // The real Job controller says SuccessCriteriaMet (active 0) before Complete: the run must not
    // read "waiting for its pod" in between.
    // (A quick pod may go by between two reconciles, so Running need not show; order is what counts.)
    let order = [RunPhase::Pending, RunPhase::Running, RunPhase::Succeeded];
    let phases = phases.lock().unwrap().clone();
    let ranks: Vec<usize> = phases
        .iter()
        .map(|p| {
            order
                .iter()
                .position(|o| o == p)
                .expect("a phase of a run that succeeds")
        })
        .collect();
    assert!(
        ranks.windows(2).all(|w| w[0] < w[1]) && phases.last() == Some(&RunPhase::Succeeded),
        "the run's phases only move forward: {phases:?}"
    );
    assert!(
        status.log_tail.as_deref().is_some_and(|l| !l.is_empty()),
        "the run's log tail, read through the apiserver from the kubelet: {status:#?}"
    );
    assert!(
        !status
            .log_tail
            .as_deref()
            .unwrap_or_default()
            .contains('\u{1b}'),
        "no terminal colour codes in a pod's log: {status:#?}"
    );
    let acme = tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &s.ns);
    let secret = secrets.get("acme-clickhouse").await.unwrap();
    assert!(
        secret
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == acme.metadata.uid.as_ref()),
        "the credentials Secret is owned by its tenant"
    );
    let pw = password(&s, "acme").await;
    assert!(
        ch.may_log_in(&s.ch_user("acme"), &pw),
        "the Secret's password logs in"
    );
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    assert!(
        ch.statements().iter().any(|q| q.starts_with("GRANT ")),
        "{:?}",
        ch.statements()
    );

    // Cleanup after the TTL: the RunJob goes, the real garbage collector takes its Job and pod.
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), &s.ns);
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let of_run = ListParams::default().labels("batch.kubernetes.io/job-name=acme-provision-1");
    wait_until("the run, its Job and its pod cleaned up", async || {
        let gone = runs.get_opt("acme-provision-1").await.ok()?.is_none()
            && jobs.get_opt("acme-provision-1").await.ok()?.is_none()
            && pods.list(&of_run).await.ok()?.items.is_empty();
        gone.then_some(())
    })
    .await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let history = tenants.get("acme").await.unwrap().history().to_vec();
    assert_eq!(history.len(), 1, "{history:#?}");
    assert_eq!(
        (history[0].name.as_str(), history[0].phase),
        ("acme-provision-1", RunPhase::Succeeded)
    );
    s.assert_no_forbidden();
}

/// The GitOps path: a Tenant as Flux or Argo CD would apply it, with no `provisioning` field (the
/// CRD's default, Automatic) and no RunJob: the operator provisions it, no click anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_applied_with_kubectl_becomes_active_with_no_click() {
    let s = setup("provision-auto").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN_USER, ADMIN_PASS).await;
    s.install_with_clickhouse(&ch.url, (ADMIN_USER, ADMIN_PASS))
        .await;
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  displayName: Acme\n");
    let (_, policy, _) = s.plane.kubectl(
        &[
            "get",
            "tenant",
            "acme",
            "-n",
            &s.ns,
            "-o",
            "jsonpath={.spec.provisioning}",
        ],
        None,
    );
    assert_eq!(
        policy, "Automatic",
        "the apiserver fills in the CRD's default"
    );
    let acme = tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let run = finished(&s, "acme-provision-10").await;
    assert_eq!(
        run.status.as_ref().and_then(|st| st.phase),
        Some(RunPhase::Succeeded)
    );
    assert_eq!(
        s.run_names().await,
        ["acme-provision-10"],
        "one run, made by the operator"
    );
    assert!(
        ch.may_log_in(&s.ch_user("acme"), &password(&s, "acme").await),
        "the Secret's password logs in"
    );
    assert_eq!(acme.spec.display_name.as_deref(), Some("Acme"));
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_debians_clickhouse_18_16_the_run_fails_saying_the_server_is_too_old() {
    let s = setup("provision-old").await;
    let gateway = s.plane.host_address();
    let server = tokio::task::spawn_blocking(move || ClickHouseServer::start_on(&gateway))
        .await
        .unwrap();
    s.install_with_clickhouse(&server.url(), (ADMIN, ADMIN_PASSWORD))
        .await;
    s.apply(&tenant("acme", false));
    s.apply(&provision_run("acme-provision-1", "acme", 300));

    let run = finished(&s, "acme-provision-1").await;
    let status = run.status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Failed));
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("ClickHouse 18.16")
            && message.contains("is too old: it has no SQL access control"),
        "the pod's termination message is the run's message: {message}"
    );
    let failed = tenant_in_phase(&s, "acme", TenantPhase::Failed).await;
    assert!(!failed.is_provisioned());

    // An Automatic tenant's failed run is retried on its own, 7.5 to 15 s later (the first step of the
    // jittered backoff), with the reason on the way.
    s.apply(&tenant_with("globex", false, "Automatic"));
    let first = finished(&s, "globex-provision-10").await;
    assert_eq!(
        first.status.as_ref().and_then(|st| st.phase),
        Some(RunPhase::Failed)
    );
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let retrying = wait_until(
        "globex's Provisioned condition to say a retry is due",
        async || {
            let t = tenants.get("globex").await.ok()?;
            let c = t
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Provisioned")?;
            (c.reason == "ProvisionRetrying").then_some(c.message)
        },
    )
    .await;
    assert!(
        retrying.contains("is too old") && retrying.contains("Attempt 2 starts at"),
        "{retrying}"
    );
    let second = finished(&s, "globex-provision-11").await;
    let waited = second
        .status
        .as_ref()
        .and_then(|st| st.start_time.clone())
        .unwrap()
        .0
        - first
            .status
            .as_ref()
            .and_then(|st| st.completion_time.clone())
            .unwrap()
            .0;
    assert!(
        // Kubernetes times are whole seconds: 7.5 s after the failure is at least 7 s on them.
        waited.get_seconds() >= 7,
        "the second attempt started {waited:#} after the first failed"
    );
    s.assert_no_forbidden();
}
