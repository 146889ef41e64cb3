//! `uninstall` against the real apiserver: it touches only its own namespace and never deletes a
//! namespace that install did not create.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use sentry_tenants::controller::tenant::new_run_job;
use sentry_tenants::crd::{RUNJOB_FINALIZER, RunAction, RunJob, Tenant};
use sentry_tenants::install::{InstallOptions, Progress, install};
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};
use sentry_tenants_tests::uninstall_quietly;

use crate::setup;

async fn a_run_with_our_finalizer(admin: &kube::Client, ns: &str) {
    let tenants: Api<Tenant> = Api::namespaced(admin.clone(), ns);
    let t: Tenant = serde_json::from_value(serde_json::json!({
        "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"}, "spec": {}
    }))
    .unwrap();
    let t = tenants.create(&PostParams::default(), &t).await.unwrap();
    let runs: Api<RunJob> = Api::namespaced(admin.clone(), ns);
    runs.create(
        &PostParams::default(),
        &new_run_job(&t, "acme-provision-1", RunAction::Provision),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_leaves_another_installs_runjobs_and_a_namespace_it_did_not_create() {
    // Two installs, each into a namespace that existed before install.
    let mine = setup("uninstall-mine").await;
    let other = setup("uninstall-other").await;
    mine.install_idle().await;
    other.install_idle().await;
    a_run_with_our_finalizer(&other.admin, &other.ns).await;

    let report = uninstall_quietly(&mine.admin, &mine.ns).await;
    let runs: Api<RunJob> = Api::namespaced(other.admin.clone(), &other.ns);
    let theirs = runs.get("acme-provision-1").await.unwrap();
    assert!(
        theirs.finalizers().iter().any(|f| f == RUNJOB_FINALIZER),
        "another install's RunJob lost its finalizer"
    );
    assert!(report.released_finalizers.is_empty(), "{report:#?}");

    // This install's consent ClusterRoles go; the other install's stay.
    let roles: Api<ClusterRole> = Api::all(mine.admin.clone());
    for what in ["credential-copies", "credential-consent"] {
        let gone = format!("sentry-tenants:{}:{what}", mine.ns);
        let kept = format!("sentry-tenants:{}:{what}", other.ns);
        assert!(roles.get_opt(&gone).await.unwrap().is_none(), "{gone}");
        assert!(roles.get_opt(&kept).await.unwrap().is_some(), "{kept}");
    }

    let namespaces: Api<Namespace> = Api::all(mine.admin.clone());
    let ns = namespaces.get(&mine.ns).await.unwrap();
    assert!(
        ns.metadata.deletion_timestamp.is_none(),
        "a namespace install did not create was deleted"
    );
    assert!(
        report
            .kept
            .iter()
            .any(|k| k.contains("install did not create it")),
        "{report:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_deletes_the_namespace_install_created_once_it_holds_no_tenant() {
    let s = setup("uninstall-own").await;
    let target = format!("{}-own", s.ns);
    let values = s.plane.install_values(&target);
    let opts = InstallOptions {
        wait: false,
        ..InstallOptions::default()
    };
    install(&s.admin, &values, &opts, &Progress::Quiet)
        .await
        .unwrap();
    a_run_with_our_finalizer(&s.admin, &target).await;

    // While it holds a tenant, it stays; the run's finalizer is released (no operator is left).
    let report = uninstall_quietly(&s.admin, &target).await;
    assert_eq!(
        report.released_finalizers,
        [format!("RunJob {target}/acme-provision-1")]
    );
    let namespaces: Api<Namespace> = Api::all(s.admin.clone());
    assert!(
        namespaces
            .get(&target)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &target);
    tenants.delete("acme", &Default::default()).await.unwrap();
    wait_until(
        "the tenant and (by the garbage collector) its run to go",
        async || {
            let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &target);
            let gone = tenants.get_opt("acme").await.ok()?.is_none()
                && runs.get_opt("acme-provision-1").await.ok()?.is_none();
            gone.then_some(())
        },
    )
    .await;
    uninstall_quietly(&s.admin, &target).await;
    wait_gone(&namespaces, &target).await;
}

/// The defect: uninstall stripped the RunJobs' finalizers while the operator still ran, and the
/// operator put them back (rule 2), leaving runs nobody would ever let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_with_the_operator_running_leaves_no_runjob_behind_a_finalizer() {
    use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
    let s = setup("uninstall-running").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
        .await;
    s.apply(&crate::provision::tenant("acme", false));
    s.apply(&crate::provision::provision_run(
        "acme-provision-1",
        "acme",
        3600,
    ));
    crate::provision::finished(&s, "acme-provision-1").await;
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    assert!(
        runs.get("acme-provision-1")
            .await
            .unwrap()
            .finalizers()
            .iter()
            .any(|f| f == RUNJOB_FINALIZER)
    );

    let report = uninstall_quietly(&s.admin, &s.ns).await;
    assert_eq!(
        report.released_finalizers,
        [
            format!("RunJob {}/acme-provision-1", s.ns),
            format!("Tenant {}/acme", s.ns)
        ]
    );
    let audited_before = s.plane.audit_events().len();
    let run = runs.get("acme-provision-1").await.unwrap();
    assert!(run.finalizers().is_empty(), "{:?}", run.finalizers());
    runs.delete("acme-provision-1", &Default::default())
        .await
        .unwrap();
    wait_gone(&runs, "acme-provision-1").await;
    // No operator was left to put the finalizer back: its account wrote no RunJob once uninstall had
    // returned (the audit log records every request, in order).
    let operator = format!("system:serviceaccount:{}:sentry-tenants", s.ns);
    let late_writes: Vec<String> = s.plane.audit_events()[audited_before..]
        .iter()
        .filter(|e| e["user"]["username"] == operator.as_str())
        .filter(|e| e["objectRef"]["resource"] == "runjobs")
        .filter(|e| e["verb"] != "get" && e["verb"] != "list" && e["verb"] != "watch")
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(late_writes.is_empty(), "{late_writes:?}");
    // The tenant too: deleting it with no operator left goes through (nothing reclaims it).
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    assert!(tenants.get("acme").await.unwrap().finalizers().is_empty());
    tenants.delete("acme", &Default::default()).await.unwrap();
    wait_gone(&tenants, "acme").await;
}

/// Someone deletes the install's namespace first (`kubectl delete namespace`): the operator goes with
/// it, and a provisioned tenant's finalizer — which only the operator removes — holds the namespace in
/// Terminating for good. `uninstall` is the recovery: it releases our finalizers (and only ours), the
/// namespace goes, and it says what stays in ClickHouse because no Deprovision run carried the
/// reclaim policy out. (The operator, shutting down in the terminating namespace, is refused its last
/// Events there: that refusal is the apiserver's namespace lifecycle, not our RBAC, and the
/// forbidden-request check leaves it out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_namespace_first_is_recovered_by_uninstall_which_names_what_stays_in_clickhouse()
 {
    const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");
    let s = setup("ns-first").await;
    let ch = sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn::start(
        &s.plane.host_address(),
        ADMIN.0,
        ADMIN.1,
    )
    .await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  reclaimPolicy: Delete\n");
    crate::provision::tenant_in_phase(&s, "acme", sentry_tenants::crd::TenantPhase::Active).await;

    let (ok, _, err) = s
        .plane
        .kubectl(&["delete", "namespace", &s.ns, "--wait=false"], None);
    assert!(ok, "{err}");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(
        "the operator gone and the tenant held by its finalizer",
        async || {
            let operator = pods
                .list(
                    &kube::api::ListParams::default()
                        .labels("app.kubernetes.io/component=operator"),
                )
                .await
                .ok()?;
            let t = tenants.get_opt("acme").await.ok()??;
            (operator.items.is_empty() && t.metadata.deletion_timestamp.is_some()).then_some(())
        },
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(s.admin.clone());
    assert!(
        namespaces.get_opt(&s.ns).await.unwrap().is_some(),
        "the namespace waits for the tenant's finalizer"
    );

    let report = uninstall_quietly(&s.admin, &s.ns).await;
    let (user, database) = (s.ch_user("acme"), s.ch_database("acme"));
    assert_eq!(
        report.left_in_clickhouse,
        [format!(
            "tenant {}/acme: ClickHouse database {database} and user {user} stay as they are (its reclaimPolicy \
             Delete was not carried out); drop them by hand if nobody needs them",
            s.ns
        )]
    );
    wait_gone(&namespaces, &s.ns).await;
    assert!(
        ch.has_user(&user) && ch.has_database(&database),
        "uninstall never touches ClickHouse"
    );
    s.assert_no_forbidden();
}
