//! `uninstall` and `check` against the in-memory API.

use std::time::Duration;

use http::Method;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use sentry_tenants::crd::{RUNJOB_FINALIZER, RunAction};
use sentry_tenants::install::check::{all_passed, post_install, preflight};
use sentry_tenants::install::{
    InstallOptions, Progress, UninstallOptions, Values, install, uninstall,
};
use sentry_tenants::leader::LeaderElection;
use sentry_tenants_tests::uninstall_quietly;
use sentry_tenants_tests::{Cluster, NS, status_body};
use serde_json::json;

fn values() -> Values {
    sentry_tenants_tests::install_values(NS)
}

async fn installed() -> Cluster {
    let c = Cluster::new().await;
    let opts = InstallOptions {
        wait: false,
        ..InstallOptions::default()
    };
    install(&c.client, &values(), &opts, &Progress::Quiet)
        .await
        .unwrap();
    c
}

async fn crd_exists(c: &Cluster, name: &str) -> bool {
    Api::<CustomResourceDefinition>::all(c.admin.clone())
        .get_opt(name)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn uninstall_without_delete_crds_keeps_tenants_crds_and_their_namespace_and_frees_finalizers()
{
    let c = installed().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    let report = uninstall_quietly(&c.client, NS).await;

    let deployments: Api<Deployment> = Api::namespaced(c.admin.clone(), NS);
    assert!(
        deployments
            .get_opt("sentry-tenants")
            .await
            .unwrap()
            .is_none(),
        "operator removed"
    );
    assert!(
        report
            .deleted
            .iter()
            .any(|d| d == "Role sentry-tenants/sentry-tenants")
    );
    assert!(
        c.tenant("acme").await.metadata.deletion_timestamp.is_none(),
        "tenant untouched"
    );
    assert!(crd_exists(&c, "tenants.sentry.io").await && crd_exists(&c, "runjobs.sentry.io").await);
    assert_eq!(
        c.namespaces.names(),
        [NS],
        "namespace kept: it holds a tenant"
    );
    let run = c.run("acme-provision-1").await.unwrap();
    assert!(
        !run.finalizers().iter().any(|f| f == RUNJOB_FINALIZER),
        "no finalizer left for an absent operator"
    );
    assert!(report.kept.iter().any(|k| k.contains("holds 1 tenant")));
}

#[tokio::test]
async fn uninstall_with_delete_crds_releases_finalizers_first_then_removes_everything() {
    let c = installed().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    c.log.clear();
    uninstall(
        &c.client,
        NS,
        &UninstallOptions {
            delete_crds: true,
            ..UninstallOptions::default()
        },
        &Progress::Quiet,
    )
    .await
    .unwrap();
    let log = c.log.all();
    let released = log
        .iter()
        .position(|r| r.method == Method::PATCH && r.path.contains("/runjobs/"))
        .expect("finalizer released");
    let crd_deleted = log
        .iter()
        .position(|r| r.method == Method::DELETE && r.path.contains("customresourcedefinitions"))
        .unwrap();
    assert!(
        released < crd_deleted,
        "finalizers go before the CRDs, so nothing hangs in Terminating"
    );
    assert!(
        !crd_exists(&c, "tenants.sentry.io").await && !crd_exists(&c, "runjobs.sentry.io").await
    );
    assert!(c.namespaces.names().is_empty(), "namespace deleted");
}

#[tokio::test]
async fn uninstall_of_an_empty_install_deletes_the_namespace() {
    let c = installed().await;
    uninstall_quietly(&c.client, NS).await;
    assert!(c.namespaces.names().is_empty());
    assert!(
        crd_exists(&c, "tenants.sentry.io").await,
        "CRDs kept without --delete-crds"
    );
}

/// A Secret a tenant deleted under reclaimPolicy Retain left is the only copy of its ClickHouse
/// user's password: uninstall keeps the namespace that holds it, even with --delete-crds, and says
/// which Secrets.
#[tokio::test]
async fn uninstall_keeps_a_namespace_holding_retained_credentials_and_names_them() {
    let c = installed().await;
    let retained: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": "acme-clickhouse",
            "labels": {sentry_tenants::provision::RETAINED_FOR: "acme"},
        },
        "stringData": {"password": "kept"},
    }))
    .unwrap();
    let secrets = Api::<Secret>::namespaced(c.admin.clone(), NS);
    secrets
        .create(&PostParams::default(), &retained)
        .await
        .unwrap();
    let opts = UninstallOptions {
        delete_crds: true,
        ..UninstallOptions::default()
    };
    let report = uninstall(&c.client, NS, &opts, &Progress::Quiet)
        .await
        .unwrap();
    assert_eq!(c.namespaces.names(), [NS], "namespace kept");
    assert!(secrets.get_opt("acme-clickhouse").await.unwrap().is_some());
    let said = report.kept.join("\n");
    assert!(
        said.contains(&format!("Namespace {NS}: it holds the credentials Secrets"))
            && said.contains("(acme-clickhouse)"),
        "{said}"
    );
    assert!(
        !crd_exists(&c, "tenants.sentry.io").await,
        "the rest still goes"
    );
}

fn answer_version_and_reviews(c: &Cluster, minor: &'static str, denied: &'static str) {
    c.intercept.set(move |method, path, _, body| {
        if path == "/version" {
            return Some((200, json!({"major": "1", "minor": minor, "gitVersion": format!("v1.{minor}.2"), "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "", "platform": ""})));
        }
        if *method == Method::POST && path.ends_with("/selfsubjectaccessreviews") {
            let resource = body["spec"]["resourceAttributes"]["resource"].as_str().unwrap_or_default();
            let mut review = body.clone();
            review["status"] = json!({"allowed": resource != denied, "reason": if resource == denied { "RBAC: no rule" } else { "" }});
            return Some((201, review));
        }
        None
    });
}

#[tokio::test]
async fn preflight_reports_each_check_and_fails_on_a_missing_permission_or_old_cluster() {
    let c = Cluster::new().await;
    answer_version_and_reviews(&c, "31", "");
    let secrets: Api<Secret> = Api::namespaced(c.admin.clone(), NS);
    let admin_secret = |data: serde_json::Value| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "clickhouse-admin", "namespace": NS},
            "data": data,
        }))
        .unwrap()
    };
    // "username" without "password" (base64 of "sentry_admin").
    secrets
        .create(
            &PostParams::default(),
            &admin_secret(json!({"username": "c2VudHJ5X2FkbWlu"})),
        )
        .await
        .unwrap();
    let lines = preflight(&c.client, NS, "clickhouse-admin", false).await;
    let failed: Vec<String> = lines
        .iter()
        .filter(|l| !l.ok)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        failed,
        [format!(
            "✗ ClickHouse admin Secret {NS}/clickhouse-admin lacks the keys password\n    hint: add them: kubectl -n {NS} edit secret clickhouse-admin"
        )]
    );
    let lines = preflight(&c.client, NS, "no-such-secret", false).await;
    let missing = lines.iter().find(|l| !l.ok).unwrap();
    assert_eq!(
        missing.what,
        format!("ClickHouse admin Secret {NS}/no-such-secret does not exist")
    );
    assert!(
        missing
            .hint
            .as_deref()
            .unwrap()
            .ends_with("or let install create it: --clickhouse-admin-password-stdin"),
        "{missing}"
    );
    secrets
        .replace(
            "clickhouse-admin",
            &PostParams::default(),
            &admin_secret(json!({"username": "c2VudHJ5X2FkbWlu", "password": "cw=="})),
        )
        .await
        .unwrap();
    let lines = preflight(&c.client, NS, "clickhouse-admin", false).await;
    assert!(all_passed(&lines), "{lines:#?}");
    assert_eq!(
        lines.len(),
        10,
        "reachable, version, seven access reviews, the admin Secret"
    );
    assert!(
        lines[0]
            .to_string()
            .starts_with("✓ Kubernetes API reachable (v1.31.2)")
    );

    answer_version_and_reviews(&c, "31", "customresourcedefinitions");
    let lines = preflight(&c.client, NS, "clickhouse-admin", false).await;
    assert!(!all_passed(&lines));
    let failed: Vec<String> = lines
        .iter()
        .filter(|l| !l.ok)
        .map(ToString::to_string)
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].starts_with(
            "✗ may create customresourcedefinitions: denied (RBAC: no rule)\n    hint: "
        ),
        "{}",
        failed[0]
    );

    answer_version_and_reviews(&c, "28", "");
    assert!(
        preflight(&c.client, NS, "clickhouse-admin", false)
            .await
            .iter()
            .any(|l| !l.ok && l.what.contains("older than 1.30"))
    );
}

/// `check --pre --monitoring`: a Prometheus Operator kind whose CRD the cluster lacks is named as left
/// out (no failure: install skips it), one whose CRD it has needs the permission to create its
/// objects, and the Grafana dashboard's ConfigMap always does; without `--monitoring`, none of it.
#[tokio::test]
async fn preflight_with_monitoring_checks_what_install_monitoring_applies() {
    let c = Cluster::new().await;
    answer_version_and_reviews(&c, "31", "prometheusrules");
    let admin: Secret = serde_json::from_value(json!({
        "metadata": {"name": "clickhouse-admin", "namespace": NS},
        "data": {"username": "c2VudHJ5X2FkbWlu", "password": "cw=="},
    }))
    .unwrap();
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .create(&PostParams::default(), &admin)
        .await
        .unwrap();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "names": {"kind": "PrometheusRule", "plural": "prometheusrules"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true}],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(c.admin.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();

    let lines = preflight(&c.client, NS, "clickhouse-admin", true).await;
    let lines: Vec<String> = lines.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 13, "{lines:#?}");
    assert_eq!(
        lines[9..12],
        [
            "✓ no ServiceMonitor CRD (servicemonitors.monitoring.coreos.com, the Prometheus Operator's): install \
             --monitoring leaves the ServiceMonitor out; run it again once the CRD is installed"
                .to_owned(),
            format!(
                "✗ may create prometheusrules in namespace {NS}: denied (RBAC: no rule)\n    hint: install needs a \
                 cluster-admin-like account once (CRDs and RBAC); ask your cluster admin or use one"
            ),
            format!("✓ may create configmaps in namespace {NS}"),
        ]
    );
    let without = preflight(&c.client, NS, "clickhouse-admin", false).await;
    assert_eq!(without.len(), 10);
    assert!(all_passed(&without), "{without:#?}");
}

#[tokio::test]
async fn preflight_on_an_unreachable_cluster_says_so_once() {
    let c = Cluster::new().await;
    c.intercept.set(|_, path, _, _| {
        (path == "/version").then(|| {
            (
                503,
                status_body(503, "ServiceUnavailable", "apiserver is down"),
            )
        })
    });
    let lines = preflight(&c.client, NS, "clickhouse-admin", false).await;
    assert_eq!(lines.len(), 1);
    assert!(!lines[0].ok && lines[0].hint.as_deref().unwrap().contains("kubeconfig"));
}

#[tokio::test]
async fn post_install_check_passes_only_when_available_led_and_same_version() {
    let c = installed().await;
    let now = Timestamp::now();
    let lines = post_install(&c.client, NS, env!("CARGO_PKG_VERSION"), now).await;
    let failed = sentry_tenants_tests::failed_checks(&lines);
    assert_eq!(
        failed,
        [
            "operator Deployment not available (0/1)",
            "no leader has been elected yet"
        ],
        "{lines:#?}"
    );

    let deployments: Api<Deployment> = Api::namespaced(c.admin.clone(), NS);
    let status = json!({"status": {"availableReplicas": 1, "replicas": 1, "updatedReplicas": 1}});
    deployments
        .patch_status(
            "sentry-tenants",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
    let elector = LeaderElection::new(
        Api::namespaced(c.admin.clone(), NS),
        "pod-a",
        Duration::from_secs(15),
        sentry_tenants::clock::Clock::System,
    );
    assert!(elector.try_acquire_or_renew().await.unwrap());
    let lines = post_install(&c.client, NS, env!("CARGO_PKG_VERSION"), Timestamp::now()).await;
    assert!(all_passed(&lines), "{lines:#?}");

    let later = Timestamp::now() + SignedDuration::from_secs(60);
    let lines = post_install(&c.client, NS, "9.9.9", later).await;
    let failed = sentry_tenants_tests::failed_checks(&lines);
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(failed[0].contains("differs from this CLI (9.9.9)"));
    assert!(failed[1].contains("is stale"));
}
