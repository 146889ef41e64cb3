//! The install bundle: askama templates of plain YAML in `manifests/`, rendered from validated values,
//! plus the generated CRDs, parsed back into typed objects.

use askama::Template;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::DynamicObject;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::flags::ValueError;
use crate::names::DNS_LABEL_PATTERN;

/// Everything the bundle varies by. Built only through [`Values::validate`].
#[derive(Template, Debug, Clone, PartialEq, Eq)]
#[template(path = "bundle.yaml", escape = "none")]
pub struct Values {
    pub namespace: String,
    pub image: String,
    pub replicas: u8,
    pub clickhouse_url: String,
    pub clickhouse_admin_secret: String,
    /// Every provisioning statement `ON CLUSTER` this cluster.
    pub clickhouse_cluster: Option<String>,
    /// What new tenants' ClickHouse names start with (`<prefix>_<tenant>`).
    pub clickhouse_prefix: String,
    /// ConfigMap (key `ca.crt`) with the CA bundle that verifies an `https://` ClickHouse URL.
    pub clickhouse_ca_configmap: Option<String>,
    /// Runs that may have a Job at once (`--max-concurrent-runs`).
    pub max_concurrent_runs: u16,
    pub read_only_dashboard: bool,
    /// Add ClusterRoles that aggregate tenants and runjobs into the built-in view/edit/admin roles.
    pub aggregate_to_view_edit: bool,
    /// Add NetworkPolicies that admit only the operator's probe port (`--network-policy`).
    pub network_policy: bool,
    /// Namespaces whose pods may reach the probe port (metrics); empty: any pod may.
    pub metrics_from_namespaces: Vec<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret the operator's and the Jobs' pods pull the image
    /// with (`--image-pull-secret`), through their ServiceAccounts.
    pub image_pull_secret: Option<String>,
    /// Add a ServiceMonitor, a PrometheusRule and a Grafana dashboard ConfigMap (`--monitoring`).
    pub monitoring: bool,
    /// The shards (`--shards`): a Deployment and a Lease each; empty, one operator for every tenant.
    pub shards: Vec<String>,
    pub version: String,
}

/// Label on the cluster-scoped objects of an install (its ClusterRoles): which install's.
pub const INSTALL_NAMESPACE: &str = "sentry.io/install-namespace";

/// The name of one of the ClusterRoles of the install in `namespace`: `view` and `edit` (aggregated),
/// `credential-copies` and `credential-consent` (bound where a namespace consents to copies).
pub fn cluster_role(namespace: &str, what: &str) -> String {
    format!("sentry-tenants:{namespace}:{what}")
}

/// The Deployment of one shard of a sharded install (`--shards`).
pub fn shard_deployment(shard: &str) -> String {
    format!("{}-shard-{shard}", super::DEPLOYMENT)
}

impl Values {
    /// [`cluster_role`] of this install, for the templates.
    pub fn cluster_role(&self, what: &str) -> String {
        cluster_role(&self.namespace, what)
    }

    /// The Deployment of shard `shard`'s replicas.
    pub fn shard_deployment(&self, shard: &str) -> String {
        shard_deployment(shard)
    }

    /// The Lease shard `shard`'s replicas elect their leader on.
    pub fn shard_lease(&self, shard: &str) -> String {
        crate::leader::shard_lease(shard)
    }

    /// Checks every value before it gets near a template; the templates also quote every value.
    pub fn validate(self) -> Result<Self, ValueError> {
        ValueError::check_namespace(&self.namespace)?;
        ValueError::check_image(&self.image)?;
        if !(1..=10).contains(&self.replicas) {
            return Err(ValueError::Replicas(self.replicas));
        }
        ValueError::check_clickhouse_url(&self.clickhouse_url)?;
        ValueError::check_secret(&self.clickhouse_admin_secret)?;
        ValueError::check_cluster(self.clickhouse_cluster.as_deref())?;
        ValueError::check_prefix(Some(&self.clickhouse_prefix))?;
        ValueError::check_ca_configmap(self.clickhouse_ca_configmap.as_deref())?;
        for ns in &self.metrics_from_namespaces {
            ValueError::check_metrics_namespace(ns)?;
        }
        if let Some(secret) = &self.image_pull_secret {
            ValueError::check_image_pull_secret(secret)?;
        }
        ValueError::check_shards(&self.shards, None)?;
        debug_assert!(DNS_LABEL_PATTERN.starts_with('^'));
        Ok(self)
    }

    /// The whole bundle as one YAML stream: CRDs first (labelled like the rest, so an upgrade can find
    /// them), then the templates.
    pub fn render_yaml(&self) -> String {
        let labels: std::collections::BTreeMap<String, String> = [
            ("app.kubernetes.io/name", "sentry-tenants"),
            ("app.kubernetes.io/managed-by", "sentry-tenants"),
            ("app.kubernetes.io/part-of", "sentry-tenants"),
            ("app.kubernetes.io/version", self.version.as_str()),
            ("sentry.io/bundle", "install"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let mut out = String::new();
        for mut crd in crate::crd::crds() {
            crd.metadata.labels = Some(labels.clone());
            out.push_str(&serde_norway::to_string(&crd).expect("a CRD always serialises"));
            out.push_str("---\n");
        }
        let rest = self
            .render()
            .expect("templates render from validated values");
        out.push_str(rest.trim());
        out.push('\n');
        if self.monitoring {
            for obj in super::monitoring::objects(&self.namespace, &labels) {
                out.push_str("---\n");
                out.push_str(&serde_norway::to_string(&obj).expect("JSON always serialises"));
            }
        }
        out
    }

    /// The bundle as objects, in apply order.
    pub fn objects(&self) -> Result<Vec<DynamicObject>, BundleError> {
        parse_documents(&self.render_yaml())?
            .into_iter()
            .map(to_dynamic)
            .collect()
    }
}

/// The ConfigMap alone, from the same template and values as in the bundle. The operator reads it
/// through `envFrom`, once at start: the Deployment's pod template carries its checksum, so
/// re-running `install` with other settings changes the template and rolls the pods.
#[derive(Template)]
#[template(path = "configmap.yaml", escape = "none")]
struct SettingsTemplate<'a> {
    namespace: &'a str,
    image: &'a str,
    clickhouse_url: &'a str,
    clickhouse_admin_secret: &'a str,
    clickhouse_cluster: &'a Option<String>,
    clickhouse_prefix: &'a str,
    clickhouse_ca_configmap: &'a Option<String>,
    max_concurrent_runs: u16,
    read_only_dashboard: bool,
    shards: &'a [String],
    version: &'a str,
}

impl Values {
    /// SHA-256 (hex) of the rendered ConfigMap: changes exactly when a setting does.
    pub fn settings_checksum(&self) -> String {
        let settings = SettingsTemplate {
            namespace: &self.namespace,
            image: &self.image,
            clickhouse_url: &self.clickhouse_url,
            clickhouse_admin_secret: &self.clickhouse_admin_secret,
            clickhouse_cluster: &self.clickhouse_cluster,
            clickhouse_prefix: &self.clickhouse_prefix,
            clickhouse_ca_configmap: &self.clickhouse_ca_configmap,
            max_concurrent_runs: self.max_concurrent_runs,
            read_only_dashboard: self.read_only_dashboard,
            shards: &self.shards,
            version: &self.version,
        };
        crate::digest::sha256_hex(settings.render().expect("the ConfigMap renders"))
    }
}

/// Askama filters used by the templates.
mod filters {
    use askama::Values;

    /// Emits any value as a YAML-safe scalar: a JSON string literal for text (valid YAML, immune to
    /// `: `, `#`, newlines or quotes in the value), the bare value for numbers and booleans.
    #[askama::filter_fn]
    pub fn yaml<T: std::fmt::Display>(value: T, _: &dyn Values) -> askama::Result<String> {
        let text = value.to_string();
        Ok(serde_json::to_string(&text).expect("a string always serialises"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("manifest document {index} is not valid YAML: {error}")]
    Yaml { index: usize, error: String },
    #[error("manifest document {index} ({kind} {name}) does not parse as {kind}: {error}")]
    Typed {
        index: usize,
        kind: String,
        name: String,
        error: String,
    },
    #[error(
        "manifest document {index} ({kind} {name}) has fields its type does not know: {fields:?}"
    )]
    DroppedFields {
        index: usize,
        kind: String,
        name: String,
        fields: Vec<String>,
    },
    #[error("manifest document {index} has unsupported kind {kind:?}")]
    UnknownKind { index: usize, kind: String },
}

/// Splits a YAML stream into JSON values, skipping empty documents.
pub fn parse_documents(yaml: &str) -> Result<Vec<Value>, BundleError> {
    let mut out = Vec::new();
    for (index, doc) in serde_norway::Deserializer::from_str(yaml).enumerate() {
        let value: Value = serde::Deserialize::deserialize(doc).map_err(|e| BundleError::Yaml {
            index,
            error: e.to_string(),
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Parses `raw` into its typed k8s-openapi object and back: any field the type does not know (a typo
/// in a template) would vanish in the round trip, and is reported — what kubeconform's strict mode does.
pub fn check_typed(index: usize, raw: &Value) -> Result<(), BundleError> {
    let kind = raw["kind"].as_str().unwrap_or_default().to_owned();
    let name = raw["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let round_trip = match kind.as_str() {
        "Namespace" => round_trip::<Namespace>(raw),
        "ServiceAccount" => round_trip::<ServiceAccount>(raw),
        "Role" => round_trip::<Role>(raw),
        "RoleBinding" => round_trip::<RoleBinding>(raw),
        "ConfigMap" => round_trip::<ConfigMap>(raw),
        "Deployment" => round_trip::<Deployment>(raw),
        "Service" => round_trip::<Service>(raw),
        "CustomResourceDefinition" => round_trip::<CustomResourceDefinition>(raw),
        "ClusterRole" => round_trip::<ClusterRole>(raw),
        "NetworkPolicy" => round_trip::<NetworkPolicy>(raw),
        // The Prometheus Operator's kinds have no type here: the apiserver checks them against that
        // operator's own CRDs (the real control plane tier's monitoring test installs them).
        "ServiceMonitor" | "PrometheusRule" => return Ok(()),
        _ => return Err(BundleError::UnknownKind { index, kind }),
    }
    .map_err(|error| BundleError::Typed {
        index,
        kind: kind.clone(),
        name: name.clone(),
        error,
    })?;
    let mut dropped = Vec::new();
    diff_paths(raw, &round_trip, String::new(), &mut dropped);
    if dropped.is_empty() {
        Ok(())
    } else {
        Err(BundleError::DroppedFields {
            index,
            kind,
            name,
            fields: dropped,
        })
    }
}

fn round_trip<K: DeserializeOwned + serde::Serialize>(raw: &Value) -> Result<Value, String> {
    let typed: K = serde_json::from_value(raw.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// Paths present in `raw` but missing or different in `back`.
fn diff_paths(raw: &Value, back: &Value, path: String, out: &mut Vec<String>) {
    match (raw, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = format!("{path}.{k}");
                match b.get(k) {
                    Some(w) => diff_paths(v, w, p, out),
                    None => out.push(p),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                diff_paths(v, w, format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => {}
        (a, b) if a == b => {}
        _ => out.push(path),
    }
}

fn to_dynamic(raw: Value) -> Result<DynamicObject, BundleError> {
    serde_json::from_value(raw).map_err(|e| BundleError::Yaml {
        index: 0,
        error: e.to_string(),
    })
}

/// Checks every document of a rendered bundle parses into its typed object with nothing dropped.
pub fn check_all(yaml: &str) -> Result<usize, BundleError> {
    let docs = parse_documents(yaml)?;
    for (index, doc) in docs.iter().enumerate() {
        check_typed(index, doc)?;
    }
    Ok(docs.len())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn values() -> Values {
        Values {
            namespace: "sentry-tenants".into(),
            image: crate::DEFAULT_IMAGE.into(),
            replicas: 1,
            clickhouse_url: "http://clickhouse.db:8123".into(),
            clickhouse_admin_secret: "clickhouse-admin".into(),
            clickhouse_cluster: None,
            clickhouse_prefix: "st4051f908cd".into(),
            clickhouse_ca_configmap: None,
            max_concurrent_runs: crate::config::DEFAULT_MAX_CONCURRENT_RUNS,
            read_only_dashboard: false,
            aggregate_to_view_edit: false,
            network_policy: false,
            metrics_from_namespaces: Vec::new(),
            image_pull_secret: None,
            monitoring: false,
            shards: Vec::new(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// The value of `key` in the operator's ConfigMap as the bundle renders it for `v`.
    fn configmap_setting(v: &Values, key: &str) -> serde_json::Value {
        let objects = v.objects().unwrap();
        let cm = objects
            .iter()
            .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap"))
            .unwrap();
        cm.data["data"][key].clone()
    }

    #[test]
    fn the_cap_on_runs_in_flight_reaches_the_operators_configmap() {
        let setting = |v: &Values| configmap_setting(v, "SENTRY_TENANTS_MAX_CONCURRENT_RUNS");
        assert_eq!(setting(&values()), "20");
        let five = Values {
            max_concurrent_runs: 5,
            ..values()
        };
        assert_eq!(setting(&five), "5");
        assert_ne!(
            five.settings_checksum(),
            values().settings_checksum(),
            "pods roll"
        );
    }

    /// `--shards a,b`: the main Deployment stays as it is (so an upgrade keeps its pods' selector),
    /// each shard gets a Deployment that runs `run --shard <name>` and whose pods carry the shard's
    /// label, the operator's Role may elect on each shard's Lease, and the ConfigMap lists the shards.
    #[test]
    fn shards_get_a_deployment_and_a_lease_each() {
        let sharded = Values {
            shards: vec!["a".into(), "eu-2".into()],
            ..values()
        }
        .validate()
        .unwrap();
        let objects = sharded.objects().unwrap();
        let of_kind = |kind: &str| -> Vec<&DynamicObject> {
            let kind_is = |o: &&DynamicObject| o.types.as_ref().is_some_and(|t| t.kind == kind);
            objects.iter().filter(kind_is).collect()
        };
        let deployments = of_kind("Deployment");
        let names: Vec<String> = deployments
            .iter()
            .map(|d| d.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "sentry-tenants",
                "sentry-tenants-shard-a",
                "sentry-tenants-shard-eu-2"
            ]
        );
        let spec = |i: usize| &deployments[i].data["spec"];
        assert_eq!(
            spec(0)["selector"]["matchLabels"],
            serde_json::json!({"app.kubernetes.io/name": "sentry-tenants", "app.kubernetes.io/component": "operator"})
        );
        assert_eq!(
            spec(0)["template"]["spec"]["containers"][0]["args"],
            serde_json::json!(["run"])
        );
        assert_eq!(
            spec(2)["template"]["spec"]["containers"][0]["args"],
            serde_json::json!(["run", "--shard", "eu-2"])
        );
        assert_eq!(
            spec(2)["selector"]["matchLabels"]["sentry.io/shard"],
            "eu-2"
        );
        assert_eq!(
            spec(2)["template"]["metadata"]["labels"]["sentry.io/shard"],
            "eu-2"
        );
        assert_eq!(spec(1)["replicas"], 1);
        let role = of_kind("Role")
            .into_iter()
            .find(|r| r.metadata.name.as_deref() == Some("sentry-tenants"))
            .unwrap();
        let lease_rule = role.data["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["resources"] == serde_json::json!(["leases"]) && !r["resourceNames"].is_null()
            })
            .unwrap();
        assert_eq!(
            lease_rule["resourceNames"],
            serde_json::json!([
                "sentry-tenants-leader",
                "sentry-tenants-leader-a",
                "sentry-tenants-leader-eu-2"
            ])
        );
        assert_eq!(
            configmap_setting(&sharded, "SENTRY_TENANTS_SHARDS"),
            "a,eu-2"
        );
        assert_ne!(
            sharded.settings_checksum(),
            values().settings_checksum(),
            "pods roll"
        );
        assert_eq!(check_all(&sharded.render_yaml()).unwrap(), objects.len());

        let unsharded = values().objects().unwrap();
        let deployments = unsharded
            .iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"));
        assert_eq!(deployments.count(), 1);
        assert!(configmap_setting(&values(), "SENTRY_TENANTS_SHARDS").is_null());
    }

    #[test]
    fn shard_names_are_checked() {
        let with = |shards: &[&str]| {
            Values {
                shards: shards.iter().map(|s| (*s).to_owned()).collect(),
                ..values()
            }
            .validate()
        };
        assert!(with(&["a", "b-2", &"s".repeat(20)]).is_ok());
        for bad in ["", "A", "a_b", "-a", &"s".repeat(21), "a\n  evil: true"] {
            assert_eq!(
                with(&["a", bad]),
                Err(ValueError::Shard(bad.into())),
                "{bad:?}"
            );
        }
        assert_eq!(
            with(&["a", "b", "a"]),
            Err(ValueError::DuplicateShard("a".into()))
        );
        let listed = vec!["a".to_owned()];
        assert_eq!(
            ValueError::check_shards(&listed, Some("b")),
            Err(ValueError::UnlistedShard("b".into(), listed.clone()))
        );
        assert_eq!(ValueError::check_shards(&listed, Some("a")), Ok(()));
    }

    #[test]
    fn the_clickhouse_prefix_reaches_the_operators_configmap_and_is_checked() {
        let cm = |v: &Values| configmap_setting(v, "SENTRY_TENANTS_CLICKHOUSE_PREFIX");
        assert_eq!(cm(&values().validate().unwrap()), "st4051f908cd");
        let prod = Values {
            clickhouse_prefix: "prod".into(),
            ..values()
        };
        assert_eq!(cm(&prod.clone().validate().unwrap()), "prod");
        assert_ne!(
            prod.settings_checksum(),
            values().settings_checksum(),
            "pods roll"
        );
        for bad in ["", "prod_eu", "prod-eu", "Prod", "9prod", "p\n  evil: true"] {
            let v = Values {
                clickhouse_prefix: bad.into(),
                ..values()
            };
            assert_eq!(v.validate(), Err(ValueError::Prefix(bad.into())), "{bad:?}");
        }
    }

    #[test]
    fn the_dockerfile_builds_and_pushes_the_default_image() {
        let dockerfile = include_str!("../../../Dockerfile");
        let commands: Vec<&str> = dockerfile
            .lines()
            .filter_map(|l| l.strip_prefix("#   docker "))
            .collect();
        assert_eq!(
            commands,
            [
                "build -t ghcr.io/sentry-tenants/sentry-tenants:v0.1.0 .",
                "push ghcr.io/sentry-tenants/sentry-tenants:v0.1.0",
            ]
        );
        assert_eq!(
            crate::DEFAULT_IMAGE,
            "ghcr.io/sentry-tenants/sentry-tenants:v0.1.0"
        );
    }

    /// The bundle of `v` through [`check_all`]: how many objects passed.
    fn checked(v: Values) -> (usize, String) {
        let yaml = v.validate().unwrap().render_yaml();
        let n = check_all(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        (n, yaml)
    }

    #[test]
    fn the_bundle_parses_into_typed_objects_with_nothing_dropped() {
        for read_only in [false, true] {
            let (n, yaml) = checked(Values {
                read_only_dashboard: read_only,
                ..values()
            });
            assert_eq!(
                n, 14,
                "2 CRDs, Namespace, 2 ServiceAccounts, 2 Roles, 2 RoleBindings, ConfigMap, Deployment, Service, 2 ClusterRoles\n{yaml}"
            );
        }
    }

    #[test]
    fn the_opt_in_objects_pass_the_same_check() {
        let (n, yaml) = checked(Values {
            network_policy: true,
            monitoring: true,
            ..values()
        });
        assert_eq!(
            n, 19,
            "the 14, 2 NetworkPolicies (the operator's, the Jobs'), a ServiceMonitor, a PrometheusRule and the Grafana dashboard's ConfigMap\n{yaml}"
        );
    }

    #[test]
    fn a_misspelt_field_is_caught_by_the_round_trip() {
        let doc: Value = serde_norway::from_str(
            "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selectr: {a: b}}\n",
        )
        .unwrap();
        let err = check_typed(0, &doc).unwrap_err();
        assert!(
            matches!(&err, BundleError::DroppedFields { fields, .. } if fields == &[".spec.selectr".to_owned()]),
            "{err}"
        );
    }

    #[test]
    fn a_round_trip_difference_is_named_by_its_path() {
        let diff = |raw: Value, back: Value| {
            let mut out = Vec::new();
            diff_paths(&raw, &back, String::new(), &mut out);
            out
        };
        // Read back the same (an integer may come back as a float, a field may be added): nothing.
        assert_eq!(
            diff(
                serde_json::json!({"n": 1, "xs": [1, "s"], "s": "x"}),
                serde_json::json!({"n": 1.0, "xs": [1.0, "s"], "s": "x", "added": true}),
            ),
            Vec::<String>::new()
        );
        let one = |raw: Value, back: Value, path: &str| assert_eq!(diff(raw, back), [path]);
        one(
            serde_json::json!({"xs": [1, 2]}),
            serde_json::json!({"xs": [1, 3]}),
            ".xs[1]",
        );
        one(
            serde_json::json!({"xs": [1, 2]}),
            serde_json::json!({"xs": [1]}),
            ".xs",
        );
        one(
            serde_json::json!({"n": 1}),
            serde_json::json!({"n": 2}),
            ".n",
        );
        one(
            serde_json::json!({"s": "x"}),
            serde_json::json!({"s": "y"}),
            ".s",
        );
        one(
            serde_json::json!({"o": {"k": 1}}),
            serde_json::json!({"o": {}}),
            ".o.k",
        );
    }

    #[test]
    fn cluster_and_ca_settings_reach_the_operators_configmap_only_when_given() {
        let data = |v: &Values| -> serde_json::Value {
            let objects = v.objects().unwrap();
            let cm = objects
                .iter()
                .find(|o| o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap"))
                .unwrap();
            cm.data["data"].clone()
        };
        let plain = data(&values());
        assert!(plain.get("SENTRY_TENANTS_CLICKHOUSE_CLUSTER").is_none());
        assert!(
            plain
                .get("SENTRY_TENANTS_CLICKHOUSE_CA_CONFIGMAP")
                .is_none()
        );
        let both = Values {
            clickhouse_cluster: Some("prod-eu.1".into()),
            clickhouse_ca_configmap: Some("corp-ca".into()),
            ..values()
        }
        .validate()
        .unwrap();
        let with = data(&both);
        assert_eq!(with["SENTRY_TENANTS_CLICKHOUSE_CLUSTER"], "prod-eu.1");
        assert_eq!(with["SENTRY_TENANTS_CLICKHOUSE_CA_CONFIGMAP"], "corp-ca");
        assert_ne!(
            both.settings_checksum(),
            values().settings_checksum(),
            "pods roll"
        );
    }

    #[test]
    fn values_are_validated_before_rendering() {
        let bad = [
            Values {
                namespace: "Bad NS".into(),
                ..values()
            },
            Values {
                namespace: "x\n  evil: true".into(),
                ..values()
            },
            Values {
                image: "img:tag\nkind: Secret".into(),
                ..values()
            },
            Values {
                image: "img with space".into(),
                ..values()
            },
            Values {
                replicas: 0,
                ..values()
            },
            Values {
                replicas: 11,
                ..values()
            },
            Values {
                clickhouse_url: "ftp://x".into(),
                ..values()
            },
            Values {
                clickhouse_url: "http://x\"y".into(),
                ..values()
            },
            Values {
                clickhouse_admin_secret: "UPPER".into(),
                ..values()
            },
            Values {
                clickhouse_cluster: Some("prod\n  evil: true".into()),
                ..values()
            },
            Values {
                clickhouse_ca_configmap: Some("Corp CA".into()),
                ..values()
            },
        ];
        for v in bad {
            assert!(v.clone().validate().is_err(), "accepted {v:?}");
        }
        assert!(
            Values {
                image: "registry.local:5000/team/st@sha256:abcd".into(),
                ..values()
            }
            .validate()
            .is_ok()
        );
    }

    /// Each flag's rule at its edges: the longest name accepted and one longer refused, each character
    /// class, each end. `ok` lists values the check must accept, `bad` ones it must refuse with its own
    /// error (the flag it names).
    #[test]
    fn each_flag_check_accepts_and_refuses_known_values() {
        type Check = fn(&str) -> Result<(), ValueError>;
        let label63 = "a".repeat(63);
        let label64 = "a".repeat(64);
        // 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters, every label within 63.
        let subdomain253 = format!("{0}.{0}.{0}.{1}", "b".repeat(63), "c".repeat(61));
        let subdomain254 = format!("{0}.{0}.{0}.{1}", "b".repeat(63), "c".repeat(62));
        let image512 = "i".repeat(512);
        let image513 = "i".repeat(513);
        let label_ok = ["a", "0", "a-b", "a0-9z", label63.as_str()];
        let label_bad = ["", "-a", "a-", "A", "a_b", "a.b", "a b", label64.as_str()];
        let subdomain_ok = [
            "a",
            "a.b",
            "a-b.c0",
            subdomain253.as_str(),
            label63.as_str(),
        ];
        let subdomain_bad = [
            "",
            ".a",
            "a.",
            "a..b",
            "A.b",
            "a_b",
            "-a.b",
            "a.b-",
            label64.as_str(),
            subdomain254.as_str(),
        ];
        let accepts_and_refuses =
            |check: Check, ok: &[&str], bad: &[&str], error: fn(String) -> ValueError| {
                for v in ok {
                    assert_eq!(check(v), Ok(()), "{v:?} refused");
                }
                for v in bad {
                    assert_eq!(check(v), Err(error((*v).to_owned())), "{v:?}");
                }
            };
        accepts_and_refuses(
            ValueError::check_namespace,
            &label_ok,
            &label_bad,
            ValueError::Namespace,
        );
        accepts_and_refuses(
            ValueError::check_secret,
            &subdomain_ok,
            &subdomain_bad,
            ValueError::Secret,
        );
        accepts_and_refuses(
            ValueError::check_service_account,
            &subdomain_ok,
            &subdomain_bad,
            ValueError::ServiceAccount,
        );
        accepts_and_refuses(
            ValueError::check_image,
            &[
                "a",
                "0",
                "img:tag",
                "registry.local:5000/team/st@sha256:abcd",
                "r/t_x-y.z:v1",
                &image512,
            ],
            &[
                "", "-a", "_a", ".a", "/a", "a:", "a/", "a@", "a b", "a\"b", "a'b", "a\nb", "a+b",
                &image513,
            ],
            ValueError::Image,
        );
        accepts_and_refuses(
            ValueError::check_image_tag,
            &[
                "sentry-tenants",
                "registry.local:5000/team/st",
                "registry.local:5000/team/st:v1.2.3",
                "ghcr.io/sentry-tenants/sentry-tenants:V1_Upper-ok",
            ],
            &[
                "",
                "registry.local:5000/team/st@sha256:abcd",
                "registry.local:5000/Team/st:v1",
                "Sentry-Tenants",
                "a:",
                "a b",
            ],
            ValueError::ImageTag,
        );
        accepts_and_refuses(
            ValueError::check_clickhouse_url,
            &[
                "http://x",
                "https://x",
                "http://clickhouse.db:8123/?user=a&x=1",
                "https://[::1]:8443",
            ],
            &[
                "",
                "x",
                "ftp://x",
                "http://",
                "https://",
                "http:///x",
                "http:x",
                "http://x y",
                "http://x\"",
                "http://x'",
                "http://x`",
                "http://x\\",
                "http://x<",
                "http://x>",
                "http://x{",
                "http://x}",
                "http://x|",
                "http://x^",
                "http://x\n",
            ],
            ValueError::ClickHouseUrl,
        );
        // Credentials in the URL would sit in a ConfigMap anyone with `get` can read.
        for with_credentials in [
            "http://admin:s3cret@clickhouse:8123",
            "https://admin@ch.example.com",
            "http://:pw@x/",
        ] {
            assert_eq!(
                ValueError::check_clickhouse_url(with_credentials),
                Err(ValueError::ClickHouseUrlCredentials),
                "{with_credentials}"
            );
        }
        assert_eq!(
            ValueError::check_clickhouse_url("http://x/path@not-userinfo?q=a@b"),
            Ok(()),
            "an @ after the authority is no credential"
        );
        for (replicas, ok) in [(0, false), (1, true), (10, true), (11, false)] {
            let result = Values {
                replicas,
                ..values()
            }
            .validate();
            assert_eq!(result.is_ok(), ok, "replicas {replicas}: {result:?}");
        }
    }

    #[test]
    fn the_yaml_filter_quotes_values_so_they_cannot_inject_structure() {
        // Validation would refuse these; the filter must hold on its own anyway.
        let v = Values {
            clickhouse_url: "http://x\n  injected: true # \"".into(),
            ..values()
        };
        let docs = parse_documents(&v.render_yaml()).unwrap();
        let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
        assert_eq!(
            cm["data"]["SENTRY_TENANTS_CLICKHOUSE_URL"],
            "http://x\n  injected: true # \""
        );
        assert!(cm["data"].get("injected").is_none());
    }
}
