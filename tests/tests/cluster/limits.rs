//! Limits on the real control plane: a Tenant applied with `spec.limits` gets its settings profile and
//! quota from its Provision run; a `kubectl patch` of the limits makes the operator start one SetLimits
//! run for that generation, which updates them in place; `status.syncedGeneration` follows; the
//! apiserver refuses a limit out of bounds; deleting under `Delete` drops profile and quota. ClickHouse
//! is the HTTP stand-in (statements parsed by chdb).

use kube::api::Api;
use sentry_tenants::crd::{RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

use crate::provision::{finished, tenant_in_phase};
use crate::setup;
use sentry_tenants_tests::cluster_tier::Setup;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

type Profile = Option<(Vec<(String, i64)>, String)>;

fn profile(ch: &ClickHouseStandIn, s: &Setup) -> Profile {
    let name = format!("{}_profile", s.ch_database("acme"));
    ch.model(|m| m.profiles.get(&name).cloned())
}

fn quota(ch: &ClickHouseStandIn, s: &Setup) -> Option<(i64, String)> {
    let name = format!("{}_quota", s.ch_database("acme"));
    ch.model(|m| m.quotas.get(&name).map(|q| (q.max_queries, q.to.clone())))
}

async fn synced(tenants: &Api<Tenant>) -> Tenant {
    wait_until("ClickHouse to reflect the current generation", async || {
        let t = tenants.get("acme").await.ok()?;
        let status = t.status.as_ref()?;
        (status.synced_generation.is_some() && status.synced_generation == t.metadata.generation)
            .then_some(t)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_applied_at_provision_changed_in_place_by_one_run_and_dropped_on_delete() {
    let s = setup("limits").await;
    let user = s.ch_user("acme");
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);

    // Out of bounds: the apiserver refuses it with the schema's words, and nothing is created.
    let (ok, _, err) = s.plane.kubectl(
        &["apply", "-n", &s.ns, "-f", "-"],
        Some("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  limits:\n    maxMemoryPerQuery: 4GB\n"),
    );
    assert!(!ok);
    assert!(err.contains("spec.limits.maxMemoryPerQuery"), "{err}");
    assert!(tenants.get_opt("acme").await.unwrap().is_none());

    s.apply(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  reclaimPolicy: Delete\n  limits:\n    maxMemoryPerQuery: 2Gi\n    maxExecutionSeconds: 120\n    queriesPerHour: 1000\n",
    );
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let first = synced(&tenants).await;
    assert_eq!(first.applied_limits(), first.spec.limits());
    assert_eq!(
        profile(&ch, &s),
        Some((
            vec![
                ("max_memory_usage".into(), 2 << 30),
                ("max_execution_time".into(), 120)
            ],
            user.clone()
        ))
    );
    assert_eq!(quota(&ch, &s), Some((1000, user.clone())));
    assert_eq!(
        s.run_names().await,
        ["acme-provision-10"],
        "no SetLimits run needed"
    );

    let (ok, _, err) = s.plane.kubectl(
        &[
            "patch",
            "tenant",
            "acme",
            "-n",
            &s.ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"limits":{"maxMemoryPerQuery":null,"maxConcurrentQueries":4,"queriesPerHour":50}}}"#,
        ],
        None,
    );
    assert!(ok, "{err}");
    let patched = tenants.get("acme").await.unwrap();
    let generation = patched.metadata.generation.unwrap();
    let run = format!("acme-setlimits-{}", generation * 10);
    let done = finished(&s, &run).await;
    assert_eq!(
        done.status.as_ref().and_then(|st| st.phase),
        Some(RunPhase::Succeeded),
        "{:?}",
        done.status
    );
    let now = synced(&tenants).await;
    assert_eq!(now.metadata.generation, Some(generation));
    assert_eq!(now.applied_limits(), now.spec.limits());
    assert_eq!(
        profile(&ch, &s),
        Some((
            vec![
                ("max_execution_time".into(), 120),
                ("max_concurrent_queries_for_user".into(), 4)
            ],
            user.clone()
        )),
        "the same profile, its settings replaced"
    );
    assert_eq!(quota(&ch, &s), Some((50, user.clone())));
    let mut runs = s.run_names().await;
    runs.sort();
    assert_eq!(
        runs,
        ["acme-provision-10".to_owned(), run],
        "one run for the change"
    );

    tenants.delete("acme", &Default::default()).await.unwrap();
    wait_until("the tenant to go", async || {
        tenants.get_opt("acme").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(
        (profile(&ch, &s), quota(&ch, &s)),
        (None, None),
        "dropped with the tenant"
    );
    assert!(!ch.has_user(&user));
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}
