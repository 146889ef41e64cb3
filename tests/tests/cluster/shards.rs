//! A sharded install (`install --shards a,b`) as pods on the real node: the main Deployment labels
//! unlabelled tenants, each shard reconciles exactly its own tenants and their runs (the audit log
//! says who wrote what: every request carries its process's User-Agent, `… run shard=<name>`, and a
//! run's pod says `… provision-tenant`), and a
//! shard whose leader is killed is taken over by its standby while the other shard keeps its leader.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use sentry_tenants::crd::{Tenant, TenantPhase};
use sentry_tenants::install::Values;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;
use serde_json::Value;

use crate::provision::tenant_in_phase;
use crate::{Setup, setup};

/// Each tenant and the shard it must end up on. The unlabelled ones get their shard from a hash of
/// their name (64-bit FNV-1a, even: `a`, odd: `b`; computed outside the product); `wayne` hashes to
/// `b` but is labelled `a` by its author, and the label wins.
const EXPECTED: [(&str, &str); 5] = [
    ("acme", "b"),
    ("globex", "a"),
    ("initech", "b"),
    ("stark", "a"),
    ("wayne", "a"),
];

/// Who made a request, by its User-Agent: `Writer::Shard("a")` for an operator's `… run shard=a`,
/// `Writer::Shard("")` for the main operator's `… run`, `Writer::Provisioner` for a run's pod.
#[derive(Debug, PartialEq, Eq)]
enum Writer<'a> {
    Shard(&'a str),
    Provisioner,
    SomeoneElse,
}

fn writer_of(event: &Value) -> Writer<'_> {
    let role = event["userAgent"]
        .as_str()
        .and_then(|a| a.strip_prefix("sentry-tenants/"))
        .and_then(|a| a.split_once(' '))
        .map(|(_version, role)| role);
    match role {
        Some("run") => Writer::Shard(""),
        Some("provision-tenant") => Writer::Provisioner,
        Some(role) => role
            .strip_prefix("run shard=")
            .map_or(Writer::SomeoneElse, Writer::Shard),
        None => Writer::SomeoneElse,
    }
}

/// The shard an operator's request came from; anyone else's as "someone else".
fn shard_of(event: &Value) -> String {
    match writer_of(event) {
        Writer::Shard(shard) => shard.to_owned(),
        _ => "someone else".to_owned(),
    }
}

/// Which operators (by shard) made the successful writes of `resource` (and `subresource`) to object
/// `name`: anyone's but the provisioning pods', which write what their run did.
fn writers(s: &Setup, resource: &str, subresource: &str, name: &str) -> BTreeSet<String> {
    s.plane
        .audit_events()
        .iter()
        .filter(|e| matches!(e["verb"].as_str(), Some("create" | "patch" | "update")))
        .filter(|e| e["objectRef"]["namespace"] == s.ns.as_str())
        .filter(|e| e["objectRef"]["resource"] == resource && e["objectRef"]["name"] == name)
        .filter(|e| e["objectRef"]["subresource"].as_str().unwrap_or("") == subresource)
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_u64()
                .is_some_and(|c| c < 300)
        })
        .filter(|e| writer_of(e) != Writer::Provisioner)
        .map(shard_of)
        .collect()
}

/// Who (by shard) set tenant `name`'s shard label in a patch (the audit log keeps these bodies).
fn labellers(s: &Setup, name: &str) -> BTreeSet<String> {
    s.plane
        .audit_events()
        .iter()
        .filter(|e| e["verb"] == "patch" && e["objectRef"]["resource"] == "tenants")
        .filter(|e| e["objectRef"]["namespace"] == s.ns.as_str() && e["objectRef"]["name"] == name)
        .filter(|e| e["objectRef"]["subresource"].is_null())
        .filter(|e| e["responseStatus"]["code"] == 200)
        .filter(|e| !e["requestObject"]["metadata"]["labels"]["sentry.io/shard"].is_null())
        .map(shard_of)
        .collect()
}

fn one(shard: &str) -> BTreeSet<String> {
    BTreeSet::from([shard.to_owned()])
}

fn tenants_yaml() -> String {
    let mut docs = Vec::new();
    for (name, _) in EXPECTED {
        let labels = if name == "wayne" {
            "  labels:\n    sentry.io/shard: a\n"
        } else {
            ""
        };
        docs.push(format!(
            "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\n{labels}spec:\n  provisioning: Manual\n"
        ));
        docs.push(crate::provision::provision_run(
            &format!("{name}-provision-1"),
            name,
            600,
        ));
    }
    docs.join("---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_reconcile_each_tenant_once_and_a_standby_takes_over_a_killed_shard() {
    let s = setup("shards").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    let values = Values {
        clickhouse_url: ch.url.clone(),
        replicas: 2,
        shards: vec!["a".into(), "b".into()],
        ..s.values()
    };
    s.install_with(("ch-admin", "ch-admin-password"), values)
        .await;
    let leader_a = wait_until("a leader of shard a", async || {
        s.holder_of("sentry-tenants-leader-a").await
    })
    .await;
    let leader_b = wait_until("a leader of shard b", async || {
        s.holder_of("sentry-tenants-leader-b").await
    })
    .await;
    wait_until("a main leader", async || s.lease_holder().await).await;

    // Tenants and their runs arrive together: a run waits for its tenant's label, then its shard
    // starts it.
    s.apply(&tenants_yaml());
    for (name, _) in EXPECTED {
        tenant_in_phase(&s, name, TenantPhase::Active).await;
    }

    // A label naming no shard: the main operator says so, nobody reconciles the tenant.
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: zed\n  labels:\n    sentry.io/shard: c\nspec:\n  provisioning: Automatic\n");
    let events: Api<Event> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until("the UnknownShard Event on zed", async || {
        let on_zed = ListParams::default().fields("involvedObject.name=zed");
        let list = events.list(&on_zed).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("UnknownShard"))
    })
    .await;

    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    for (name, shard) in EXPECTED {
        let t = tenants.get(name).await.unwrap();
        let label = t.labels().get("sentry.io/shard").cloned();
        assert_eq!(label.as_deref(), Some(shard), "{name}'s shard label");
        let labelled_by = labellers(&s, name);
        if name == "wayne" {
            assert!(
                labelled_by.is_empty(),
                "a labelled tenant is not relabelled: {labelled_by:?}"
            );
        } else {
            assert_eq!(labelled_by, one(""), "{name} labelled by the main operator");
        }
        assert_eq!(
            writers(&s, "tenants", "status", name),
            one(shard),
            "{name}'s status written by its shard alone"
        );
        let run = format!("{name}-provision-1");
        assert_eq!(writers(&s, "jobs", "", &run), one(shard), "{run}'s Job");
        assert_eq!(
            writers(&s, "runjobs", "status", &run),
            one(shard),
            "{run}'s status"
        );
    }

    // Shard a's leader dies without releasing its Lease; its standby takes over shard a's tenants.
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(&leader_a, &now).await.unwrap();
    s.set_suspended("globex", true);
    s.set_suspended("acme", true);
    tenant_in_phase(&s, "globex", TenantPhase::Suspended).await;
    tenant_in_phase(&s, "acme", TenantPhase::Suspended).await;
    let standby_a = s.holder_of("sentry-tenants-leader-a").await;
    assert!(
        standby_a.as_ref().is_some_and(|h| *h != leader_a),
        "shard a led by its standby now: {standby_a:?}"
    );
    assert_eq!(
        s.holder_of("sentry-tenants-leader-b").await,
        Some(leader_b),
        "shard b kept its leader"
    );
    let suspend_runs: BTreeMap<&str, Vec<String>> = ["globex", "acme"]
        .into_iter()
        .map(|t| (t, runs_of(&s, t, "suspend")))
        .collect();
    for (tenant, shard) in [("globex", "a"), ("acme", "b")] {
        assert_eq!(
            writers(&s, "tenants", "status", tenant),
            one(shard),
            "{tenant}'s status, across the takeover"
        );
        let runs = &suspend_runs[tenant];
        assert!(!runs.is_empty(), "{tenant} got a Suspend run");
        for run in runs {
            assert_eq!(
                writers(&s, "runjobs", "", run),
                one(shard),
                "{run} made by its shard"
            );
        }
    }
    assert!(
        writers(&s, "tenants", "status", "zed").is_empty() && labellers(&s, "zed").is_empty(),
        "a tenant of an unknown shard is left alone"
    );
    let zed = tenants.get("zed").await.unwrap();
    assert!(
        zed.status.is_none() && zed.finalizers().is_empty(),
        "{zed:?}"
    );
    s.assert_no_forbidden();
}

/// The RunJobs the operator created for `tenant` whose names hold `action`, from the audit log.
fn runs_of(s: &Setup, tenant: &str, action: &str) -> Vec<String> {
    let prefix = format!("{tenant}-{action}");
    let mut names: Vec<String> = s
        .plane
        .audit_events()
        .iter()
        .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == "runjobs")
        .filter(|e| e["objectRef"]["namespace"] == s.ns.as_str())
        .filter(|e| e["responseStatus"]["code"] == 201)
        .filter_map(|e| e["objectRef"]["name"].as_str())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    names.dedup();
    names
}
