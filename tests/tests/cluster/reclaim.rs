//! Deleting a tenant on the real control plane, with each reclaim policy: what stays and what goes, in
//! ClickHouse (the HTTP stand-in's record of the statements) and in Kubernetes (the apiserver and its
//! garbage collector), and a Tenant re-created under a retained name adopting what was kept.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants::provision::RETAINED_FOR;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};

use crate::provision::{password, tenant_in_phase};
use crate::{Setup, setup};

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

fn automatic_tenant(name: &str, reclaim: &str) -> String {
    format!(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\nspec:\n  reclaimPolicy: {reclaim}\n"
    )
}

/// `kubectl delete tenant NAME` (with `--cascade`), returning at once; the test waits for the outcome.
fn kubectl_delete(s: &Setup, name: &str, cascade: &str) {
    let (ok, _, err) = s.plane.kubectl(
        &[
            "delete",
            "tenant",
            name,
            "-n",
            &s.ns,
            "--wait=false",
            &format!("--cascade={cascade}"),
        ],
        None,
    );
    assert!(ok, "{err}");
}

async fn deprovision_runs(s: &Setup, tenant: &str) -> Vec<RunJob> {
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    runs.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.tenant == tenant && r.name_any().contains("-deprovision-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retain_keeps_a_locked_user_database_and_secret_and_a_new_tenant_adopts_them() {
    let s = setup("reclaim-retain").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    s.apply(&automatic_tenant("acme", "Retain"));
    let first = tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let pw = password(&s, "acme").await;
    let hash = ch.user_hash(&s.ch_user("acme"));

    kubectl_delete(&s, "acme", "background");
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_gone(&tenants, "acme").await;
    // ClickHouse: user kept with its password, logins locked; database kept.
    assert_eq!(ch.is_locked(&s.ch_user("acme")), Some(true));
    assert!(ch.has_database(&s.ch_database("acme")));
    assert_eq!(ch.user_hash(&s.ch_user("acme")), hash);
    // Kubernetes: the Secret outlived its tenant, released by its owner and labelled for the name.
    let secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &s.ns);
    let kept = secrets.get("acme-clickhouse").await.unwrap();
    assert!(kept.owner_references().is_empty(), "{:?}", kept.metadata);
    assert_eq!(
        kept.labels().get(RETAINED_FOR).map(String::as_str),
        Some("acme")
    );
    let runs = deprovision_runs(&s, "acme").await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].phase(), Some(RunPhase::Succeeded));

    // A new Tenant of the same name adopts them: the same password, logins allowed again.
    s.apply(&automatic_tenant("acme", "Retain"));
    let second = tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    assert_ne!(second.metadata.uid, first.metadata.uid);
    assert_eq!(password(&s, "acme").await, pw, "never rotated");
    assert_eq!(ch.user_hash(&s.ch_user("acme")), hash);
    assert!(ch.may_log_in(&s.ch_user("acme"), &pw));
    let adopted = secrets.get("acme-clickhouse").await.unwrap();
    assert_eq!(
        adopted.owner_references().first().map(|o| &o.uid),
        second.metadata.uid.as_ref()
    );
    assert!(!adopted.labels().contains_key(RETAINED_FOR));
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

/// Foreground deletion: the garbage collector deletes the tenant's dependents before the tenant, so
/// the Deprovision run, which must outlive that, is not one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_drops_user_and_database_and_deletes_the_secret_even_in_foreground() {
    let s = setup("reclaim-delete").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    s.apply(&automatic_tenant("globex", "Delete"));
    tenant_in_phase(&s, "globex", TenantPhase::Active).await;
    assert!(ch.has_user(&s.ch_user("globex")) && ch.has_database(&s.ch_database("globex")));

    kubectl_delete(&s, "globex", "foreground");
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let terminating = wait_until("globex Terminating", async || {
        let t = tenants.get_opt("globex").await.ok()??;
        (t.phase() == Some(TenantPhase::Terminating)).then_some(t)
    })
    .await;
    assert!(terminating.metadata.deletion_timestamp.is_some());
    wait_gone(&tenants, "globex").await;
    assert!(!ch.has_user(&s.ch_user("globex")), "user dropped");
    assert!(
        !ch.has_database(&s.ch_database("globex")),
        "database dropped"
    );
    let secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_gone(&secrets, "globex-clickhouse").await;
    let runs = deprovision_runs(&s, "globex").await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].phase(), Some(RunPhase::Succeeded));
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

/// A tenant deleted while its Provision pod runs: the garbage collector deletes the run, whose Job is
/// deleted in the Foreground, so the run stays until the pod is gone — and only then may the
/// Deprovision run start: a Provision pod still running could create the user after the Deprovision
/// dropped it. The stand-in answers slowly, so the Provision run is still running when it is deleted;
/// the apiserver's audit log orders the pod's last write before the Deprovision run's create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deprovision_run_starts_only_once_a_deleted_runs_pod_is_gone() {
    let s = setup("reclaim-stopping").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    ch.set_delay(std::time::Duration::from_secs(20));
    let from = s.plane.audit_log_offset();
    s.apply(&automatic_tenant("initech", "Delete"));
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let provision = wait_until("initech's Provision run Running", async || {
        let all = runs.list(&Default::default()).await.ok()?.items;
        all.into_iter()
            .find(|r| r.spec.tenant == "initech" && r.phase() == Some(RunPhase::Running))
    })
    .await
    .name_any();

    kubectl_delete(&s, "initech", "foreground");
    ch.set_delay(std::time::Duration::ZERO);
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_gone(&tenants, "initech").await;
    let deprovision = deprovision_runs(&s, "initech").await;
    assert_eq!(deprovision.len(), 1, "{deprovision:#?}");
    // What ClickHouse is left with is not asked here: the stand-in sleeps out its delay before it
    // carries out a statement, so one the Provision pod sent before it was stopped may land late,
    // where ClickHouse takes milliseconds. `delete_drops_user_and_database_…` checks the outcome.

    let events = s.plane.audit_events_after(from, |e| {
        e["objectRef"]["namespace"] == s.ns.as_str()
            && e["responseStatus"]["code"].as_u64() < Some(300)
    });
    let at = |e: &serde_json::Value, stage: &str| -> jiff::Timestamp {
        e[stage]
            .as_str()
            .expect("a timestamp")
            .parse()
            .expect("RFC 3339")
    };
    let pod_of_provision = format!("{provision}-");
    let pod_writes: Vec<jiff::Timestamp> = events
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&pod_of_provision))
                && matches!(
                    e["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete")
                )
        })
        .map(|e| at(e, "stageTimestamp"))
        .collect();
    let pod_gone = pod_writes
        .iter()
        .max()
        .expect("the Provision run had a pod");
    let deprovision_made = events
        .iter()
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "runjobs"
                && e["objectRef"]["name"] == deprovision[0].name_any().as_str()
        })
        .map(|e| at(e, "requestReceivedTimestamp"))
        .expect("the Deprovision run's create is audited");
    assert!(
        *pod_gone < deprovision_made,
        "the Provision pod was last written at {pod_gone}, after the Deprovision run was made at {deprovision_made}"
    );
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}
