//! `install --monitoring` against the real apiserver, with the Prometheus Operator's own CRDs (from the
//! module pinned in tests/monitoring/go.mod): skipped with a note where they are missing, admitted by
//! their real schemas where they exist, pruned and uninstalled like the rest of the bundle.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use sentry_tenants::install::apply::api_for;
use sentry_tenants::install::monitoring::{ALERTS, MONITORING_CRDS};
use sentry_tenants::install::{InstallOptions, Progress, Values, install};
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};
use sentry_tenants_tests::uninstall_quietly;

use crate::setup;

const DASHBOARD: &str = "sentry-tenants-grafana-dashboard";

fn rolled_out() -> InstallOptions {
    InstallOptions {
        timeout: sentry_tenants_tests::PATIENCE,
        ..InstallOptions::default()
    }
}

/// The two CRDs the monitoring needs, as the Prometheus Operator ships them.
fn prometheus_operator_crds() -> Vec<CustomResourceDefinition> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/monitoring.sh");
    let out = std::process::Command::new("bash")
        .args([script, "crds"])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "scripts/monitoring.sh crds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = String::from_utf8(out.stdout).unwrap();
    MONITORING_CRDS
        .iter()
        .map(|(_, _, _, crd)| {
            // servicemonitors.monitoring.coreos.com is in monitoring.coreos.com_servicemonitors.yaml
            let plural = crd.split('.').next().unwrap();
            let path = format!("{}/monitoring.coreos.com_{plural}.yaml", dir.trim());
            let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            serde_norway::from_str(&yaml).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect()
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    wait_until(&format!("CRD {name} Established"), async || {
        let crd = crds.get(name).await.ok()?;
        let conditions = crd.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// Each monitoring object as the install renders it, server-side applied again as a dry run with
/// strict field validation: a field the real schema does not know is refused, not dropped.
async fn admitted_strictly(s: &crate::Setup, values: &Values) {
    for obj in values.objects().unwrap().into_iter().filter(|o| {
        let kind = o.types.as_ref().map(|t| t.kind.as_str());
        MONITORING_CRDS.iter().any(|(_, _, k, _)| Some(*k) == kind)
    }) {
        let params = PatchParams::apply("monitoring-test")
            .dry_run()
            .validation_strict();
        api_for(&s.admin, &obj)
            .patch(&obj.name_any(), &params, &Patch::Apply(&obj))
            .await
            .unwrap_or_else(|e| panic!("{} refused: {e}", obj.name_any()));
    }
}

fn names(report: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = report.iter().map(String::as_str).collect();
    out.sort_unstable();
    out
}

// The only test that touches these cluster-wide CRDs; other installs' prunes find none or nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_monitoring_ships_the_prometheus_operators_kinds_only_where_their_crds_exist() {
    let s = setup("monitoring").await;
    let crds: Api<CustomResourceDefinition> = Api::all(s.admin.clone());
    // A reused cluster may have them from an earlier run.
    for (_, _, _, crd) in MONITORING_CRDS {
        if crds.get_opt(crd).await.unwrap().is_some() {
            crds.delete(crd, &Default::default()).await.unwrap();
            wait_gone(&crds, crd).await;
        }
    }
    let values = Values {
        monitoring: true,
        ..s.values()
    };
    let ns = &s.ns;
    let monitor = format!("ServiceMonitor {ns}/sentry-tenants");
    let rule = format!("PrometheusRule {ns}/sentry-tenants");
    let dashboard = format!("ConfigMap {ns}/{DASHBOARD}");

    // Without the CRDs: both left out, said so; the rest, the dashboard included, installed.
    let report = install(&s.admin, &values, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    assert_eq!(names(&report.skipped), [rule.as_str(), monitor.as_str()]);
    assert!(report.applied.contains(&dashboard), "{report:#?}");
    let configmaps: Api<ConfigMap> = Api::namespaced(s.admin.clone(), ns);
    let shipped = configmaps.get(DASHBOARD).await.unwrap();
    assert_eq!(shipped.labels()["grafana_dashboard"], "1");

    // With them: applied, and admitted by their real schemas.
    for crd in prometheus_operator_crds() {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("monitoring-test").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap();
        established(&crds, &crd.name_any()).await;
    }
    let report = install(&s.admin, &values, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    assert!(report.skipped.is_empty(), "{report:#?}");
    for what in [&monitor, &rule] {
        assert!(report.applied.contains(what), "{what}: {report:#?}");
    }
    admitted_strictly(&s, &values).await;
    let rule_api = api_for(
        &s.admin,
        &values
            .objects()
            .unwrap()
            .into_iter()
            .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "PrometheusRule"))
            .unwrap(),
    );
    let stored: DynamicObject = rule_api.get("sentry-tenants").await.unwrap();
    let alerts: serde_json::Value = serde_norway::from_str(ALERTS).unwrap();
    assert_eq!(
        stored.data["spec"]["groups"], alerts["groups"],
        "the stored rule is the alerts file, nothing pruned by the schema"
    );

    // Dropping the flag prunes all three; uninstall removes them after a re-install.
    let plain = Values {
        monitoring: false,
        ..values.clone()
    };
    let report = install(&s.admin, &plain, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    assert_eq!(
        names(&report.pruned),
        [dashboard.as_str(), rule.as_str(), monitor.as_str()]
    );
    install(&s.admin, &values, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    let report = uninstall_quietly(&s.admin, ns).await;
    for what in [&monitor, &rule, &dashboard] {
        assert!(report.deleted.contains(what), "{what}: {report:#?}");
    }
    assert!(configmaps.get_opt(DASHBOARD).await.unwrap().is_none());
}
