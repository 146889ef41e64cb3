//! Fault drills: the reconcilers and the provisioner under an operator that restarts after every step.
//! Each drill prints its figures in one summary line and fails on any duplicate Job or RunJob. (The
//! API-fault drill of the benchmarks issue is still to come; `sentry_tenants_tests::Faults` is its
//! injector.)

use std::collections::BTreeMap;

use http::Method;
use kube::ResourceExt;
use kube::api::ListParams;
use sentry_tenants::crd::{RunAction, RunPhase, TenantPhase};
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::{Provisioner, TenantSync};
use sentry_tenants_tests::clickhouse_seam::RecordingClickHouse;
use sentry_tenants_tests::{Cluster, NS};

/// Plays the Job controller and the provisioner's pods: every unfinished Job runs the provisioner (through
/// the faulty client) and succeeds or fails with it.
async fn run_pending_jobs(c: &Cluster, ch: &RecordingClickHouse) {
    let jobs = c.jobs().list(&ListParams::default()).await.unwrap().items;
    for job in jobs {
        let done = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| !c.is_empty());
        if done {
            continue;
        }
        let name = job.name_any();
        let Some(run) = c.run(&name).await else {
            continue;
        };
        let provisioner = Provisioner {
            clickhouse: ch.clone(),
            clickhouse_url: "http://clickhouse:8123".into(),
            sync: TenantSync::new(c.client.clone(), NS, "/var/lib/sentry/tantivy"),
            rotate: false,
        };
        let tenant = TenantName::parse(&run.spec.tenant).unwrap();
        match provisioner.run(&tenant, run.spec.action).await {
            Ok(_) => c.job_succeeded(&name).await,
            Err(e) => {
                c.job_failed(&name, "BackoffLimitExceeded", &e.to_string())
                    .await
            }
        }
    }
}

/// Successful Job creates per Job name: more than one is a duplicate.
fn job_creates(c: &Cluster) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in c
        .log
        .all()
        .iter()
        .filter(|r| r.method == Method::POST && r.resource() == "jobs" && r.status < 300)
    {
        let name = r.body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        *out.entry(name).or_default() += 1;
    }
    out
}

#[tokio::test]
async fn an_operator_restarted_after_every_step_completes_a_run_exactly_once() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new("24.8.4.13");
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    let mut steps = 0;
    // Each step: a freshly started operator (empty caches) makes one pass; the world moves on.
    for _ in 0..20 {
        c.clear_stores();
        c.reconcile_all_once().await;
        steps += 1;
        if steps == 3 {
            run_pending_jobs(&c, &ch).await;
        }
        if let Some(run) = c.run("acme-provision-1").await
            && run.phase() == Some(RunPhase::Succeeded)
            && c.tenant("acme").await.phase() == Some(TenantPhase::Active)
        {
            break;
        }
    }
    let creates = job_creates(&c);
    println!(
        "restart drill: steps={steps} job_creates={} runjobs={}",
        creates.values().sum::<usize>(),
        c.runjobs()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
    );
    assert_eq!(
        creates.get("acme-provision-1"),
        Some(&1),
        "exactly one Job: {creates:?}"
    );
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
    assert_eq!(
        c.log.creates_of("runjobs"),
        0,
        "no RunJob made by the operator for a provision"
    );
}
