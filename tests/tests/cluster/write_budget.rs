//! Writes per provisioned tenant on the real apiserver, read from its audit log: the flows of the
//! in-memory tier's `write_budget` (a settled tenant and a Provision run made as the dashboard makes
//! one; an Automatic tenant applied with kubectl), each followed to the run's cleanup, here with a
//! real Job, pod and provisioner. Every write of our two ServiceAccounts is named, and none may be
//! beyond what the in-memory tier counts for the same flow.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use sentry_tenants::controller::tenant::new_run_job;
use sentry_tenants::crd::{RunAction, RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;
use sentry_tenants_tests::{AUTOMATIC_TENANT_WRITES, PROVISION_RUN_WRITES};
use serde_json::Value;

use sentry_tenants_tests::cluster_tier::tenant_with;

use crate::provision::{tenant, tenant_in_phase};
use crate::{Setup, setup};

const RUN: &str = "acme-provision-1";

/// The provisioner's: the credentials Secret, its marker, and its report on the tenant's status.
const PROVISIONER_WRITES: &[(&str, usize)] = &[
    ("create configmaps", 1),
    ("create secrets", 1),
    ("patch tenants/status", 1),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provision_run_costs_no_more_writes_than_the_in_memory_tier_counts() {
    let (s, _ch) = installed("writes").await;
    s.apply(&tenant("acme", false));
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let settled = wait_until("acme settled: its finalizer and Pending", async || {
        let t = tenants.get("acme").await.ok()?;
        let pending = t.phase() == Some(TenantPhase::Pending) && !t.finalizers().is_empty();
        pending.then_some(t)
    })
    .await;

    let from = s.plane.audit_log_offset();
    let mut run = new_run_job(&settled, RUN, RunAction::Provision);
    run.spec.ttl_seconds_after_finished = 5;
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    runs.create(&PostParams::default(), &run).await.unwrap();
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    recorded_and_cleaned_up(&s, RUN).await;
    assert_within_budget(&s, from, PROVISION_RUN_WRITES);
}

/// `kubectl apply` of an Automatic tenant, as a GitOps tool applies one: the reconciler makes its
/// Provision run, and everything follows from there until the tenant is Active and the run Succeeded
/// (its cleanup, 5 minutes later, is the flow above's). A write after that moment is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_tenant_applied_costs_no_more_writes_than_the_in_memory_tier_counts() {
    let (s, _ch) = installed("writes-auto").await;
    let from = s.plane.audit_log_offset();
    s.apply(&tenant_with("acme", false, "Automatic"));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until("the tenant's Provision run Succeeded", async || {
        let made = runs.list(&ListParams::default()).await.ok()?.items;
        let phase = made.first()?.status.as_ref()?.phase;
        (phase == Some(RunPhase::Succeeded)).then_some(())
    })
    .await;
    assert_within_budget(&s, from, AUTOMATIC_TENANT_WRITES);
}

/// A namespace of its own with the operator installed, provisioning against a ClickHouse stand-in
/// (kept alive by the caller).
async fn installed(prefix: &str) -> (Setup, ClickHouseStandIn) {
    let s = setup(prefix).await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-pw").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-pw"))
        .await;
    (s, ch)
}

/// Waits until the run and its Job are gone and the run is in the tenant's history.
async fn recorded_and_cleaned_up(s: &Setup, run: &str) {
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(
        "the run and its Job cleaned up, the run recorded",
        async || {
            let gone =
                runs.get_opt(run).await.ok()?.is_none() && jobs.get_opt(run).await.ok()?.is_none();
            let recorded = tenants
                .get("acme")
                .await
                .ok()?
                .history()
                .iter()
                .any(|r| r.name == run);
            (gone && recorded).then_some(())
        },
    )
    .await;
}

/// Every write of our two ServiceAccounts since `from`, named: the operator's no more of each kind
/// than `budget` (the in-memory tier's count for the same flow) and no more in all; the
/// provisioner's exactly [`PROVISIONER_WRITES`].
fn assert_within_budget(s: &Setup, from: u64, budget: &[(&str, usize)]) {
    let writes = s
        .plane
        .audit_events_after(from, |e| is_our_counted_write(e, &s.ns));
    let listed: Vec<String> = writes.iter().map(describe).collect();
    let operator = counts(&writes, "sentry-tenants");
    let provisioner = counts(&writes, "sentry-tenants-provisioner");
    let allowed: BTreeMap<&str, usize> = budget.iter().copied().collect();
    for (kind, n) in &operator {
        let allowed = allowed.get(kind.as_str()).copied().unwrap_or(0);
        assert!(
            *n <= allowed,
            "{n} × {kind} by the operator, {allowed} in the budget: {listed:#?}"
        );
    }
    let total: usize = operator.values().sum();
    let in_memory: usize = budget.iter().map(|(_, n)| n).sum();
    assert!(total <= in_memory, "{total} > {in_memory}: {listed:#?}");
    let expected: BTreeMap<String, usize> = PROVISIONER_WRITES
        .iter()
        .map(|(k, n)| ((*k).to_owned(), *n))
        .collect();
    assert_eq!(provisioner, expected, "{listed:#?}");
    eprintln!(
        "write budget: the operator's {total} writes (in-memory tier: {in_memory}): {listed:#?}"
    );
}

/// A write (not an Event, not the Lease's renewal) of one of our ServiceAccounts in `ns`.
fn is_our_counted_write(e: &Value, ns: &str) -> bool {
    let verb = e["verb"].as_str().unwrap_or_default();
    let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
    matches!(verb, "create" | "update" | "patch" | "delete")
        && !matches!(resource, "events" | "leases")
        && e["objectRef"]["namespace"] == ns
        && account(e).is_some()
}

/// Which of our ServiceAccounts made the request.
fn account(e: &Value) -> Option<&str> {
    let user = e["user"]["username"].as_str()?;
    let (_, name) = user
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')?;
    matches!(name, "sentry-tenants" | "sentry-tenants-provisioner").then_some(name)
}

/// "verb resource[/subresource]".
fn kind(e: &Value) -> String {
    let r = &e["objectRef"];
    let sub = r["subresource"]
        .as_str()
        .map(|s| format!("/{s}"))
        .unwrap_or_default();
    format!(
        "{} {}{sub}",
        e["verb"].as_str().unwrap_or_default(),
        r["resource"].as_str().unwrap_or_default()
    )
}

fn counts(writes: &[Value], by: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in writes.iter().filter(|e| account(e) == Some(by)) {
        *counts.entry(kind(e)).or_default() += 1;
    }
    counts
}

/// One line per write: who, what, on which object, the answer's code and what it set (the audit
/// policy keeps our objects' write bodies): a merge patch's status fields, a JSON patch's paths.
fn describe(e: &Value) -> String {
    let body = &e["requestObject"];
    let set: Vec<String> = match body.as_array() {
        Some(ops) => ops
            .iter()
            .filter(|op| op["op"] != "test")
            .filter_map(|op| op["path"].as_str().map(str::to_owned))
            .collect(),
        None => body["status"]
            .as_object()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default(),
    };
    let phase = body["status"]["phase"].as_str().unwrap_or_default();
    format!(
        "{} by {}: {} {} {phase} {}",
        kind(e),
        account(e).unwrap_or_default(),
        e["objectRef"]["name"].as_str().unwrap_or_default(),
        e["responseStatus"]["code"],
        set.join(",")
    )
}
