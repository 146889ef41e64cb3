//! `spec.limits` and spec changes converging (Tenant reconciler rules 6 and 7), and the provisioner's
//! settings profile and quota, against the in-memory API and the recording ClickHouse seam.

use jiff::SignedDuration;
use kube::ResourceExt;
use sentry_tenants::crd::{ReclaimPolicy, RunAction, Tenant};
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::ProvisionError;
use sentry_tenants::provision::sql::Ident;
use sentry_tenants_tests::Cluster;
use sentry_tenants_tests::clickhouse_seam::RecordingClickHouse;
use serde_json::json;

const MODERN: &str = "24.8.4.13";
const PROFILE: &str = "tenant_acme_profile";
const QUOTA: &str = "tenant_acme_quota";
const USER: &str = "tenant_acme_user";

fn acme() -> TenantName {
    TenantName::parse("acme").unwrap()
}

fn condition(t: &Tenant, type_: &str) -> (String, String, String) {
    let c = t
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn synced(t: &Tenant) -> Option<i64> {
    t.status.as_ref().unwrap().synced_generation
}

async fn active_tenant() -> Cluster {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.report_provisioned("acme").await;
    c.settle().await;
    c
}

async fn set_limits_runs(c: &Cluster) -> Vec<String> {
    let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
    runs.iter()
        .filter(|r| r.spec.action == RunAction::SetLimits)
        .map(|r| r.name_any())
        .collect()
}

async fn report_limits(c: &Cluster, limits: serde_json::Value) {
    c.patch_tenant_status("acme", json!({"appliedLimits": limits}))
        .await;
}

#[tokio::test]
async fn a_limits_change_starts_one_run_for_its_generation_and_the_status_says_what_clickhouse_reflects()
 {
    let c = active_tenant().await;
    let before = c.tenant("acme").await;
    let first = before.metadata.generation;
    assert_eq!(synced(&before), first, "no limits asked, none enforced");
    assert_eq!(condition(&before, "LimitsEnforced").1, "Enforced");

    c.patch_spec("acme", json!({"limits": {"queriesPerHour": 100}}))
        .await;
    for _ in 0..3 {
        c.settle().await;
    }
    let t = c.tenant("acme").await;
    let generation = t.metadata.generation.unwrap();
    assert_eq!(
        set_limits_runs(&c).await,
        [format!("acme-setlimits-{}", generation * 10)],
        "one run, named for its generation"
    );
    assert_eq!(synced(&t), first, "ClickHouse still reflects the old spec");
    let (status, reason, message) = condition(&t, "LimitsEnforced");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Applying"));
    assert!(message.contains("100 queries per hour"), "{message}");

    // The run succeeds and the provisioner reports what it applied.
    let run = &set_limits_runs(&c).await[0];
    c.job_succeeded(run).await;
    report_limits(&c, json!({"queriesPerHour": 100})).await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(301));
    c.settle().await;
    let t = c.tenant("acme").await;
    assert_eq!(synced(&t), Some(generation));
    assert_eq!(condition(&t, "LimitsEnforced").1, "Enforced");
    assert_eq!(c.log.creates_of("runjobs"), 1, "nothing more after cleanup");
}

#[tokio::test]
async fn a_change_clickhouse_does_not_enforce_starts_no_run() {
    let c = active_tenant().await;
    c.patch_spec("acme", json!({"displayName": "Acme, Inc."}))
        .await;
    c.patch_spec("acme", json!({"rotationGracePeriod": "5m"}))
        .await;
    for _ in 0..3 {
        c.settle().await;
    }
    assert_eq!(c.log.creates_of("runjobs"), 0);
    let t = c.tenant("acme").await;
    assert_eq!(synced(&t), t.metadata.generation);

    // Limits set and then taken back before any run: the spec is what ClickHouse has, nothing to do.
    report_limits(&c, json!({"maxExecutionSeconds": 60})).await;
    c.patch_spec("acme", json!({"limits": {"maxExecutionSeconds": 60}}))
        .await;
    c.settle().await;
    assert_eq!(c.log.creates_of("runjobs"), 0, "reported equal to the spec");
    // An empty `limits: {}` is the same as none.
    report_limits(&c, json!(null)).await;
    c.patch_spec("acme", json!({"limits": {"maxExecutionSeconds": null}}))
        .await;
    c.settle().await;
    assert_eq!(c.log.creates_of("runjobs"), 0);
    let t = c.tenant("acme").await;
    assert_eq!(synced(&t), t.metadata.generation);
}

/// A failing SetLimits run is retried after a growing delay, never given up, and reported on
/// `LimitsEnforced` meanwhile; a new spec change does not wait for the old change's retry.
#[tokio::test]
async fn a_failing_set_limits_run_is_reported_and_retried_until_a_new_spec_starts_afresh() {
    let c = active_tenant().await;
    c.patch_spec("acme", json!({"limits": {"maxConcurrentQueries": 2}}))
        .await;
    let mut failed = Vec::new();
    for attempt in 1..=4 {
        c.settle().await;
        let runs = set_limits_runs(&c).await;
        let fresh: Vec<_> = runs.iter().filter(|r| !failed.contains(*r)).collect();
        assert_eq!(fresh.len(), 1, "one at a time: {runs:?}");
        let name = fresh[0].clone();
        c.job_failed(&name, "BackoffLimitExceeded", "clickhouse unreachable")
            .await;
        failed.push(name);
        c.settle().await;
        assert_eq!(c.log.creates_of("runjobs"), attempt, "waits for its time");
        let t = c.tenant("acme").await;
        let (status, reason, message) = condition(&t, "LimitsEnforced");
        assert_eq!((status.as_str(), reason.as_str()), ("False", "ApplyFailed"));
        assert!(
            message.contains(&format!("Attempt {} starts at", attempt + 1)),
            "{message}"
        );
        assert!(synced(&t) < t.metadata.generation);
        if attempt < 4 {
            c.clock.advance(SignedDuration::from_secs(301));
        }
    }

    // A new spec change is a new generation: its first attempt starts at once.
    c.patch_spec("acme", json!({"limits": {"maxConcurrentQueries": 3}}))
        .await;
    c.settle().await;
    assert_eq!(c.log.creates_of("runjobs"), 5);
}

#[tokio::test]
async fn an_unprovisioned_tenant_gets_no_set_limits_run() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.patch_spec("acme", json!({"limits": {"queriesPerHour": 5}}))
        .await;
    for _ in 0..3 {
        c.settle().await;
    }
    assert!(set_limits_runs(&c).await.is_empty());
    let t = c.tenant("acme").await;
    assert_eq!(
        synced(&t),
        None,
        "nothing in ClickHouse reflects any spec yet"
    );
}

#[tokio::test]
async fn provision_applies_the_limits_and_set_limits_updates_them_in_place_and_idempotently() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.patch_spec(
        "acme",
        json!({"limits": {"maxMemoryPerQuery": "4Gi", "maxExecutionSeconds": 60, "queriesPerHour": 1000}}),
    )
    .await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = c.provisioner(&ch, false);
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let profile = |ch: &RecordingClickHouse| ch.model(|m| m.profiles.get(PROFILE).cloned());
    let quota = |ch: &RecordingClickHouse| {
        ch.model(|m| m.quotas.get(QUOTA).map(|q| (q.max_queries, q.to.clone())))
    };
    assert_eq!(
        profile(&ch),
        Some((
            vec![
                ("max_memory_usage".into(), 4 << 30),
                ("max_execution_time".into(), 60)
            ],
            USER.into()
        ))
    );
    assert_eq!(quota(&ch), Some((1000, USER.into())));
    let applied = c.tenant("acme").await.applied_limits();
    assert_eq!(applied, c.tenant("acme").await.spec.limits());

    // Changed in place: the same profile and quota, new values; a removed limit leaves the profile.
    c.patch_spec(
        "acme",
        json!({"limits": {"maxMemoryPerQuery": "512Mi", "maxExecutionSeconds": null, "queriesPerHour": 10}}),
    )
    .await;
    let outcome = p.run(&acme(), RunAction::SetLimits).await.unwrap();
    assert_eq!(
        outcome.describe(),
        "ClickHouse enforces 512Mi memory per query, 10 queries per hour"
    );
    assert_eq!(
        profile(&ch),
        Some((vec![("max_memory_usage".into(), 512 << 20)], USER.into()))
    );
    assert_eq!(quota(&ch), Some((10, USER.into())));
    let t = c.tenant("acme").await;
    assert_eq!(t.applied_limits(), t.spec.limits());
    assert_eq!(
        t.applied_limits().max_execution_seconds,
        None,
        "null removed it"
    );

    // A re-run sets the same state; the user, its password and its lock are untouched.
    let hash = ch.model(|m| m.users[USER].clone());
    for _ in 0..3 {
        p.run(&acme(), RunAction::SetLimits).await.unwrap();
    }
    assert_eq!(quota(&ch), Some((10, USER.into())));
    assert_eq!(ch.model(|m| m.users[USER].clone()), hash);
    assert_eq!(ch.password_changes(), 0);
    assert_eq!(ch.is_locked(USER), Some(false));

    // No limits: profile and quota dropped, the status field removed.
    c.patch_spec("acme", json!({"limits": null})).await;
    p.run(&acme(), RunAction::SetLimits).await.unwrap();
    assert_eq!((profile(&ch), quota(&ch)), (None, None));
    let status = c.tenant("acme").await.status.unwrap();
    assert_eq!(status.applied_limits, None);
}

#[tokio::test]
async fn a_tenant_without_limits_gets_no_limits_ddl_when_provisioned() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    c.provisioner(&ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    let ddl = ch.ddl();
    assert!(
        !ddl.iter()
            .any(|s| s.contains("PROFILE") || s.contains("QUOTA")),
        "{ddl:#?}"
    );
}

#[tokio::test]
async fn set_limits_before_provisioning_is_refused_and_delete_drops_profile_and_quota() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.patch_spec(
        "acme",
        json!({"limits": {"maxConcurrentQueries": 4, "queriesPerHour": 9}, "reclaimPolicy": "Delete"}),
    )
    .await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = c.provisioner(&ch, false);
    let early = p.run(&acme(), RunAction::SetLimits).await.unwrap_err();
    assert!(
        matches!(early, ProvisionError::NotProvisioned { .. }),
        "{early}"
    );
    assert!(ch.statements().is_empty(), "nothing sent");

    p.run(&acme(), RunAction::Provision).await.unwrap();
    assert!(ch.model(|m| m.profiles.contains_key(PROFILE) && m.quotas.contains_key(QUOTA)));
    c.settle().await;
    c.tenants()
        .delete("acme", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        c.tenant("acme").await.spec.reclaim_policy,
        ReclaimPolicy::Delete
    );
    p.run(&acme(), RunAction::Deprovision).await.unwrap();
    assert!(ch.model(|m| m.profiles.is_empty() && m.quotas.is_empty() && m.users.is_empty()));
}

#[tokio::test]
async fn a_limit_written_around_the_schema_is_refused_before_any_statement() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    // The in-memory API does not enforce the schema's pattern; an apiserver would refuse this.
    c.patch_spec("acme", json!({"limits": {"maxMemoryPerQuery": "4GB"}}))
        .await;
    let ch = RecordingClickHouse::new(MODERN);
    let err = c
        .provisioner(&ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("\"4GB\""), "{err}");
    assert!(ch.statements().is_empty());
}

#[tokio::test]
async fn on_cluster_is_refused_for_an_unknown_cluster_and_for_users_not_replicated() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let mut p = c.provisioner(&ch, false);
    p.cluster = Some(Ident::cluster("prod").unwrap());

    let unknown = p.run(&acme(), RunAction::Provision).await.unwrap_err();
    assert!(
        matches!(unknown, ProvisionError::ClusterUnknown { .. }),
        "{unknown}"
    );
    ch.configure(|m| {
        m.clusters.insert("prod".into());
    });
    let local = p.run(&acme(), RunAction::Provision).await.unwrap_err();
    assert!(
        local.to_string().contains("no replicated user directory"),
        "{local}"
    );
    assert!(ch.ddl().is_empty(), "refused before anything was written");
    let secret = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        c.admin.clone(),
        sentry_tenants_tests::NS,
    )
    .get_opt("acme-clickhouse")
    .await
    .unwrap();
    assert!(secret.is_none(), "and before the Secret");

    ch.configure(|m| m.replicated_users = true);
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let ddl = ch.ddl();
    assert!(!ddl.is_empty());
    for statement in &ddl {
        assert!(statement.contains(" ON CLUSTER `prod`"), "{statement}");
    }
    assert!(ch.has_user(USER) && ch.has_database("tenant_acme"));
}
