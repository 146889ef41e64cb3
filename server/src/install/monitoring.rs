//! What `install --monitoring` adds to the bundle: a ServiceMonitor for the metrics Service, a
//! PrometheusRule whose spec is `manifests/monitoring/alerts.yaml`, and the Grafana dashboard of
//! `manifests/monitoring/grafana-dashboard.json` in a ConfigMap Grafana's dashboard sidecar picks up.
//! The first two are Prometheus Operator kinds: applied only where its CRDs exist
//! ([`MONITORING_CRDS`]); the ConfigMap always.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The alerting rules, a plain Prometheus rules file (`promtool` checks and tests it in CI).
pub const ALERTS: &str = include_str!("../../../manifests/monitoring/alerts.yaml");
/// The Grafana dashboard.
pub const GRAFANA_DASHBOARD: &str =
    include_str!("../../../manifests/monitoring/grafana-dashboard.json");

/// The Prometheus Operator's kinds the monitoring uses, with the CRD each needs.
pub const MONITORING_CRDS: &[(&str, &str, &str, &str)] = &[
    (
        "monitoring.coreos.com",
        "v1",
        "ServiceMonitor",
        "servicemonitors.monitoring.coreos.com",
    ),
    (
        "monitoring.coreos.com",
        "v1",
        "PrometheusRule",
        "prometheusrules.monitoring.coreos.com",
    ),
];

/// The label kube-prometheus-stack's Grafana sidecar finds dashboards by (its default).
pub const GRAFANA_DASHBOARD_LABEL: (&str, &str) = ("grafana_dashboard", "1");
const NAME: &str = "sentry-tenants";

/// The monitoring objects for the install in `namespace`, carrying `labels`.
pub fn objects(namespace: &str, labels: &BTreeMap<String, String>) -> Vec<Value> {
    let metadata = |name: &str, extra: &[(&str, &str)]| {
        let mut labels = labels.clone();
        for (k, v) in extra {
            labels.insert((*k).to_owned(), (*v).to_owned());
        }
        json!({"name": name, "namespace": namespace, "labels": labels})
    };
    let rules: Value =
        serde_norway::from_str(ALERTS).expect("manifests/monitoring/alerts.yaml is YAML");
    vec![
        json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": metadata(NAME, &[]),
            "spec": {
                // The metrics Service of manifests/service.yaml, in this namespace only.
                "selector": {"matchLabels": {"app.kubernetes.io/name": NAME, "sentry.io/bundle": "install"}},
                "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
            },
        }),
        json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": metadata(NAME, &[]),
            "spec": {"groups": rules["groups"]},
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(&format!("{NAME}-grafana-dashboard"), &[GRAFANA_DASHBOARD_LABEL]),
            "data": {"sentry-tenants.json": GRAFANA_DASHBOARD},
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::bundle::tests::values;

    fn monitored() -> crate::install::Values {
        crate::install::Values {
            monitoring: true,
            ..values()
        }
    }

    fn kinds_and_names(v: &crate::install::Values) -> Vec<(String, String)> {
        v.objects()
            .unwrap()
            .into_iter()
            .map(|o| (o.types.unwrap().kind, o.metadata.name.unwrap()))
            .collect()
    }

    fn rendered(kind: &str, v: &crate::install::Values) -> Value {
        let yaml = v.render_yaml();
        crate::install::bundle::parse_documents(&yaml)
            .unwrap()
            .into_iter()
            .find(|o| o["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in the bundle"))
    }

    #[test]
    fn the_monitoring_objects_come_only_with_the_flag() {
        let plain = kinds_and_names(&values());
        let with = kinds_and_names(&monitored());
        let added: Vec<_> = with
            .iter()
            .filter(|o| !plain.contains(o))
            .cloned()
            .collect();
        let pair = |k: &str, n: &str| (k.to_owned(), n.to_owned());
        assert_eq!(
            added,
            [
                pair("ServiceMonitor", "sentry-tenants"),
                pair("PrometheusRule", "sentry-tenants"),
                pair("ConfigMap", "sentry-tenants-grafana-dashboard"),
            ]
        );
        assert_eq!(with.len(), plain.len() + 3, "nothing else changes");
    }

    /// Prune and uninstall find an install's objects by the bundle's labels: the added ones carry
    /// them, and the dashboard also the label Grafana's sidecar looks for.
    #[test]
    fn the_monitoring_objects_carry_the_bundle_labels() {
        let v = monitored();
        for kind in ["ServiceMonitor", "PrometheusRule"] {
            let labels = &rendered(kind, &v)["metadata"]["labels"];
            assert_eq!(labels["sentry.io/bundle"], "install", "{kind}");
            assert_eq!(labels["app.kubernetes.io/managed-by"], "sentry-tenants");
        }
        let dashboard = v
            .objects()
            .unwrap()
            .into_iter()
            .find(|o| o.metadata.name.as_deref() == Some("sentry-tenants-grafana-dashboard"))
            .unwrap();
        let labels = dashboard.metadata.labels.unwrap();
        assert_eq!(labels["grafana_dashboard"], "1");
        assert_eq!(labels["sentry.io/bundle"], "install");
        let json: Value = serde_json::from_str(
            dashboard.data["data"]["sentry-tenants.json"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(json["uid"], "sentry-tenants");
    }

    /// The ServiceMonitor selects the metrics Service the bundle ships, by its labels and port name.
    #[test]
    fn the_service_monitor_selects_the_metrics_service_and_port() {
        let v = monitored();
        let monitor = rendered("ServiceMonitor", &v);
        let service = rendered("Service", &v);
        let selector = monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap();
        assert!(!selector.is_empty());
        for (k, want) in selector {
            assert_eq!(&service["metadata"]["labels"][k], want, "label {k}");
        }
        assert_eq!(
            monitor["metadata"]["namespace"],
            service["metadata"]["namespace"]
        );
        let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
        let ports = service["spec"]["ports"].as_array().unwrap();
        assert!(ports.iter().any(|p| p["name"] == port), "{ports:?}");
    }

    #[test]
    fn the_prometheus_rule_carries_every_alert() {
        let v = monitored();
        let rule = rendered("PrometheusRule", &v);
        let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["alert"].as_str().unwrap())
            .collect();
        assert_eq!(
            alerts,
            [
                "SentryTenantsOperatorDown",
                "SentryTenantsNoLeader",
                "SentryTenantsSeveralLeaders",
                "SentryTenantsRunsFailing",
                "SentryTenantsNotMatchingClickHouse",
                "SentryTenantsProvisioningFailed",
                "SentryTenantsRunsQueued",
            ]
        );
        assert_eq!(rule["spec"]["groups"][0]["rules"][0]["for"], "10m");
    }

    /// Every `sentry_tenants_…` series the alerts and the dashboard query is one the operator
    /// exports, of the type its suffix says: a renamed metric fails here, not silently in Grafana.
    #[test]
    fn every_metric_the_alerts_and_dashboard_query_is_exported() {
        let metrics = std::sync::Arc::new(crate::telemetry::Metrics::default());
        // A labelled family is exported from its first member on, as in a running operator.
        drop(metrics.reconcile_timer("tenant"));
        metrics.count_error("tenant", "kube");
        metrics.observe_queue_depth("tenant", 0);
        let failed = crate::telemetry::PhaseLabel::new("Failed");
        metrics.runs_finished.get_or_create(&failed).inc();
        let main = crate::telemetry::ShardLabel {
            shard: String::new(),
        };
        metrics.is_leader.get_or_create(&main).set(1);
        let exported = metrics.render(&crate::telemetry::Snapshot::default());
        let queried = [ALERTS, GRAFANA_DASHBOARD]
            .iter()
            .flat_map(|text| metric_names(text))
            .collect::<std::collections::BTreeSet<_>>();
        assert!(queried.len() >= 12, "{queried:?}");
        for name in queried {
            let (base, kind) = [
                ("_total", "counter"),
                ("_bucket", "histogram"),
                ("_sum", "histogram"),
                ("_count", "histogram"),
                ("_info", "info"),
            ]
            .iter()
            .find_map(|(suffix, kind)| name.strip_suffix(suffix).map(|b| (b, *kind)))
            .unwrap_or((name.as_str(), "gauge"));
            let line = format!("# TYPE {base} {kind}");
            assert!(
                exported.lines().any(|l| l == line),
                "{name}: no {line:?} in\n{exported}"
            );
        }
    }

    fn metric_names(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("sentry_tenants_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            out.push(name);
        }
        out
    }
}
