//! The rendered bundle's RBAC and Pod Security, checked as exact rule sets: loosening either fails here.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use sentry_tenants::config::OperatorConfig;
use sentry_tenants::controller::job::build_job;
use sentry_tenants::crd::{RunAction, RunJob, RunJobSpec};
use sentry_tenants::install::bundle::parse_documents;
use sentry_tenants::install::{Values, pss};
use serde_json::Value;

/// The Job the operator makes for a Provision run of `acme` in the default namespace.
fn a_provisioning_job() -> k8s_openapi::api::batch::v1::Job {
    let mut run = RunJob::new(
        "acme-provision-1",
        RunJobSpec::new("acme", RunAction::Provision),
    );
    run.metadata.namespace = Some("sentry-tenants".into());
    run.metadata.uid = Some("uid".into());
    build_job(&run, &OperatorConfig::for_namespace("sentry-tenants"))
}

fn values(read_only: bool) -> Values {
    Values {
        namespace: "sentry-tenants".into(),
        image: sentry_tenants::DEFAULT_IMAGE.into(),
        replicas: 2,
        clickhouse_url: "http://clickhouse:8123".into(),
        clickhouse_admin_secret: "clickhouse-admin".into(),
        clickhouse_cluster: None,
        clickhouse_prefix: "st4051f908cd".into(),
        clickhouse_ca_configmap: None,
        max_concurrent_runs: sentry_tenants::config::DEFAULT_MAX_CONCURRENT_RUNS,
        read_only_dashboard: read_only,
        aggregate_to_view_edit: false,
        network_policy: false,
        metrics_from_namespaces: Vec::new(),
        image_pull_secret: None,
        monitoring: false,
        shards: Vec::new(),
        version: "0.1.0".into(),
    }
    .validate()
    .unwrap()
}

fn docs(read_only: bool) -> Vec<Value> {
    parse_documents(&values(read_only).render_yaml()).unwrap()
}

fn role(docs: &[Value], name: &str) -> Role {
    let raw = docs
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == name)
        .unwrap();
    serde_json::from_value(raw.clone()).unwrap()
}

/// (group, resource, resourceNames, verb) for every grant, so a test can compare whole sets.
fn grants(rules: &[PolicyRule]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for r in rules {
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    let names = r.resource_names.clone().unwrap_or_default().join(",");
                    out.insert(format!("{g}/{res}[{names}]:{v}"));
                }
            }
        }
    }
    out
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

const OPERATOR_READ_ONLY: &[&str] = &[
    "sentry.io/tenants[]:get",
    "sentry.io/tenants[]:list",
    "sentry.io/tenants[]:watch",
    // The reclaim finalizer, added to every tenant and removed after its Deprovision run.
    "sentry.io/tenants[]:patch",
    "sentry.io/tenants/status[]:patch",
    "sentry.io/runjobs[]:list",
    "sentry.io/runjobs[]:watch",
    "sentry.io/runjobs[]:create",
    "sentry.io/runjobs[]:patch",
    "sentry.io/runjobs[]:delete",
    "sentry.io/runjobs/status[]:patch",
    "sentry.io/runjobs/finalizers[]:update",
    "batch/jobs[]:get",
    "batch/jobs[]:list",
    "batch/jobs[]:watch",
    "batch/jobs[]:create",
    "batch/jobs[]:delete",
    "/pods[]:list",
    "/pods/log[]:get",
    "/events[]:list",
    "events.k8s.io/events[]:create",
    "events.k8s.io/events[]:patch",
    "/configmaps[]:get",
    "/configmaps[]:list",
    "/configmaps[]:watch",
    "coordination.k8s.io/leases[]:create",
    "coordination.k8s.io/leases[sentry-tenants-leader]:get",
    "coordination.k8s.io/leases[sentry-tenants-leader]:update",
];

#[test]
fn operator_role_is_exactly_what_it_needs_and_never_secrets() {
    let read_only = grants(&role(&docs(true), "sentry-tenants").rules.unwrap());
    assert_eq!(read_only, set(OPERATOR_READ_ONLY));
    let writable = grants(&role(&docs(false), "sentry-tenants").rules.unwrap());
    let mut expected = set(OPERATOR_READ_ONLY);
    expected.extend(set(&[
        "sentry.io/tenants[]:create",
        "sentry.io/tenants[]:delete",
    ]));
    assert_eq!(
        writable, expected,
        "the dashboard's Create and Delete add exactly create and delete on tenants"
    );
    assert!(writable.iter().all(|g| !g.contains("secrets")));
}

#[test]
fn provisioner_role_is_exactly_what_it_needs() {
    let g = grants(
        &role(&docs(false), "sentry-tenants-provisioner")
            .rules
            .unwrap(),
    );
    assert_eq!(
        g,
        set(&[
            "sentry.io/tenants[]:get",
            "sentry.io/tenants/status[]:patch",
            "/secrets[]:get",
            "/secrets[]:create",
            "/secrets[]:patch",
            "/secrets[]:delete",
            "/configmaps[]:get",
            "/configmaps[]:create",
            "events.k8s.io/events[]:create",
        ])
    );
}

#[test]
fn aggregate_to_view_edit_adds_exactly_two_cluster_roles_that_read_and_edit_tenants() {
    let v = Values {
        aggregate_to_view_edit: true,
        ..values(false)
    };
    let docs = parse_documents(&v.render_yaml()).unwrap();
    // Counted by a YAML parser of the test's own, not by the bundle's checker.
    let objects: Vec<String> = serde_norway::Deserializer::from_str(&v.render_yaml())
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .map(|doc| format!("{} {}", doc["kind"], doc["metadata"]["name"]))
        .collect();
    assert_eq!(objects.len(), 16, "{objects:#?}");
    assert_eq!(docs.len(), objects.len(), "the bundle's parser agrees");
    let roles: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .filter(|d| {
            !d["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains(":credential-")
        })
        .collect();
    assert!(docs.iter().all(|d| d["kind"] != "ClusterRoleBinding"));
    let summary: Vec<(String, Vec<String>, BTreeSet<String>)> = roles
        .iter()
        .map(|d| {
            let role: ClusterRole = serde_json::from_value((*d).clone()).unwrap();
            let labels = role.metadata.labels.clone().unwrap_or_default();
            let aggregates: Vec<String> = labels
                .iter()
                .filter(|(k, v)| {
                    k.starts_with("rbac.authorization.k8s.io/aggregate-to-") && *v == "true"
                })
                .map(|(k, _)| k["rbac.authorization.k8s.io/aggregate-to-".len()..].to_owned())
                .collect();
            assert_eq!(labels["sentry.io/install-namespace"], "sentry-tenants");
            (
                role.metadata.name.unwrap(),
                aggregates,
                grants(&role.rules.unwrap()),
            )
        })
        .collect();
    let read = ["get", "list", "watch"];
    let view: BTreeSet<String> = ["tenants", "tenants/status", "runjobs", "runjobs/status"]
        .iter()
        .flat_map(|r| read.iter().map(move |v| format!("sentry.io/{r}[]:{v}")))
        .collect();
    let write = ["create", "update", "patch", "delete", "deletecollection"];
    let edit: BTreeSet<String> = ["tenants", "runjobs"]
        .iter()
        .flat_map(|r| write.iter().map(move |v| format!("sentry.io/{r}[]:{v}")))
        .collect();
    assert_eq!(
        summary,
        [
            (
                "sentry-tenants:sentry-tenants:view".to_owned(),
                vec!["admin".to_owned(), "edit".to_owned(), "view".to_owned()],
                view
            ),
            (
                "sentry-tenants:sentry-tenants:edit".to_owned(),
                vec!["admin".to_owned(), "edit".to_owned()],
                edit
            ),
        ]
    );
}

/// The only ClusterRoles by default are the two a namespace binds to consent to credential copies
/// (see `install::consent`): the provisioner's write on Secrets, the operator's access reviews. No
/// ClusterRoleBinding: they grant nothing until a namespace's owner binds them there.
#[test]
fn no_cluster_role_binding_no_wildcards_and_only_the_consent_roles_cluster_wide() {
    let cluster_roles: BTreeMap<String, BTreeSet<String>> = docs(false)
        .into_iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .map(|d| {
            let role: ClusterRole = serde_json::from_value(d).unwrap();
            (role.metadata.name.unwrap(), grants(&role.rules.unwrap()))
        })
        .collect();
    let set = |grants: &[&str]| {
        grants
            .iter()
            .map(|g| g.to_string())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        cluster_roles,
        BTreeMap::from([
            (
                "sentry-tenants:sentry-tenants:credential-consent".to_owned(),
                set(&["authorization.k8s.io/localsubjectaccessreviews[]:create"])
            ),
            (
                "sentry-tenants:sentry-tenants:credential-copies".to_owned(),
                set(&[
                    "/secrets[]:create",
                    "/secrets[]:delete",
                    "/secrets[]:get",
                    "/secrets[]:patch",
                    "/secrets[]:update"
                ])
            ),
        ])
    );
    // The names `grant-credentials` binds.
    let bound: BTreeSet<String> =
        sentry_tenants::install::consent::bindings("sentry-tenants", "shop")
            .into_iter()
            .map(|b| b.role_ref.name)
            .collect();
    assert_eq!(bound, cluster_roles.keys().cloned().collect());
    for d in docs(false) {
        assert_ne!(d["kind"], "ClusterRoleBinding");
        if d["kind"] == "Role" {
            let text = serde_json::to_string(&d["rules"]).unwrap();
            assert!(
                !text.contains("\"*\""),
                "wildcard in {}",
                d["metadata"]["name"]
            );
        }
    }
    let bindings: Vec<_> = docs(false)
        .into_iter()
        .filter(|d| d["kind"] == "RoleBinding")
        .collect();
    assert_eq!(bindings.len(), 2);
    for b in bindings {
        assert_eq!(b["roleRef"]["kind"], "Role");
        assert_eq!(b["roleRef"]["name"], b["metadata"]["name"]);
        assert_eq!(
            b["subjects"][0]["name"], b["metadata"]["name"],
            "each identity gets its own role"
        );
    }
}

#[test]
fn every_pod_in_the_bundle_and_every_job_passes_restricted() {
    let deployment: Deployment = serde_json::from_value(
        docs(false)
            .into_iter()
            .find(|d| d["kind"] == "Deployment")
            .unwrap(),
    )
    .unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(pss::violations(&pod), Vec::<String>::new());
    let container = &pod.containers[0];
    assert!(container.liveness_probe.is_some() && container.readiness_probe.is_some());
    assert!(container.resources.as_ref().unwrap().requests.is_some());

    let job = a_provisioning_job();
    assert_eq!(
        pss::violations(&job.spec.unwrap().template.spec.unwrap()),
        Vec::<String>::new()
    );

    let ns = docs(false)
        .into_iter()
        .find(|d| d["kind"] == "Namespace")
        .unwrap();
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
}

/// The first container's securityContext, to loosen.
fn container_sc(
    p: &mut k8s_openapi::api::core::v1::PodSpec,
) -> &mut k8s_openapi::api::core::v1::SecurityContext {
    p.containers[0].security_context.as_mut().unwrap()
}

#[test]
fn the_restricted_check_catches_each_loosening() {
    let deployment: Deployment = serde_json::from_value(
        docs(false)
            .into_iter()
            .find(|d| d["kind"] == "Deployment")
            .unwrap(),
    )
    .unwrap();
    let base = deployment.spec.unwrap().template.spec.unwrap();
    type Loosen = fn(&mut k8s_openapi::api::core::v1::PodSpec);
    // Each loosening, and the words of the one violation it must cause.
    let loosenings: [(&str, Loosen); 16] = [
        ("allowPrivilegeEscalation must be false", |p| {
            container_sc(p).allow_privilege_escalation = Some(true)
        }),
        ("runAsNonRoot must be true", |p| {
            container_sc(p).run_as_non_root = None;
            p.security_context.as_mut().unwrap().run_as_non_root = None;
        }),
        ("runAsUser must not be 0", |p| {
            container_sc(p).run_as_user = Some(0)
        }),
        ("runAsUser must not be 0", |p| {
            container_sc(p).run_as_user = None;
            p.security_context.as_mut().unwrap().run_as_user = Some(0);
        }),
        ("capabilities must drop ALL", |p| {
            container_sc(p).capabilities = None
        }),
        ("only NET_BIND_SERVICE may be added", |p| {
            let caps = container_sc(p).capabilities.as_mut().unwrap();
            caps.add = Some(vec!["NET_BIND_SERVICE".into(), "SYS_ADMIN".into()]);
        }),
        ("seccompProfile must be RuntimeDefault or Localhost", |p| {
            container_sc(p).seccomp_profile = None;
            p.security_context.as_mut().unwrap().seccomp_profile = None;
        }),
        ("seccompProfile must be RuntimeDefault or Localhost", |p| {
            container_sc(p).seccomp_profile =
                Some(serde_json::from_value(serde_json::json!({"type": "Unconfined"})).unwrap());
        }),
        ("readOnlyRootFilesystem must be true", |p| {
            container_sc(p).read_only_root_filesystem = Some(false)
        }),
        ("host namespaces", |p| p.host_network = Some(true)),
        ("host namespaces", |p| p.host_pid = Some(true)),
        ("host namespaces", |p| p.host_ipc = Some(true)),
        ("uses a type restricted forbids", |p| {
            p.volumes = Some(vec![
                serde_json::from_value(serde_json::json!({"name": "h", "hostPath": {"path": "/"}}))
                    .unwrap(),
            ])
        }),
        ("privileged", |p| container_sc(p).privileged = Some(true)),
        ("hostPort is not allowed", |p| {
            p.containers[0].ports = Some(vec![
                serde_json::from_value(
                    serde_json::json!({"containerPort": 8080, "hostPort": 8080}),
                )
                .unwrap(),
            ])
        }),
        ("a memory limit is required", |p| {
            let resources = p.containers[0].resources.as_mut().unwrap();
            resources.limits.as_mut().unwrap().remove("memory");
        }),
    ];
    for (words, loosen) in loosenings {
        let mut spec = base.clone();
        loosen(&mut spec);
        let found = pss::violations(&spec);
        assert!(
            found.len() == 1 && found[0].contains(words),
            "a loosening that breaks {words:?} gave {found:?}"
        );
    }
    // An init container is held to the same rules as the others.
    let mut spec = base.clone();
    let mut init = spec.containers[0].clone();
    init.name = "init".into();
    init.security_context
        .as_mut()
        .unwrap()
        .allow_privilege_escalation = None;
    spec.init_containers = Some(vec![init]);
    assert_eq!(
        pss::violations(&spec),
        vec!["init: allowPrivilegeEscalation must be false".to_owned()]
    );
    // What restricted allows stays allowed: the pod-level seccomp profile for every container, and
    // NET_BIND_SERVICE added.
    let mut spec = base.clone();
    let pod_seccomp = container_sc(&mut spec).seccomp_profile.take();
    spec.security_context.as_mut().unwrap().seccomp_profile = pod_seccomp.or_else(|| {
        Some(serde_json::from_value(serde_json::json!({"type": "RuntimeDefault"})).unwrap())
    });
    container_sc(&mut spec).capabilities.as_mut().unwrap().add =
        Some(vec!["NET_BIND_SERVICE".into()]);
    assert_eq!(pss::violations(&spec), Vec::<String>::new());
}

/// Whether `selector`'s matchLabels all appear in `labels` (NetworkPolicy podSelector semantics for a
/// selector without expressions — the bundle's use none).
fn selects(selector: &Value, labels: &std::collections::BTreeMap<String, String>) -> bool {
    assert!(selector.get("matchExpressions").is_none(), "{selector}");
    selector["matchLabels"]
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
}

#[test]
fn network_policy_is_opt_in_admits_only_the_probe_port_of_the_operator_and_nothing_to_a_job() {
    let kinds = |v: &Values| -> Vec<String> {
        parse_documents(&v.render_yaml())
            .unwrap()
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!kinds(&values(false)).contains(&"NetworkPolicy".to_owned()));

    let with = Values {
        network_policy: true,
        ..values(false)
    };
    let docs = parse_documents(&with.render_yaml()).unwrap();
    let policies: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "NetworkPolicy")
        .collect();
    assert_eq!(policies.len(), 2, "{policies:#?}");
    let (operator, provisioner) = (policies[0], policies[1]);
    assert_eq!(operator["metadata"]["name"], "sentry-tenants");
    assert_eq!(
        provisioner["metadata"]["name"],
        "sentry-tenants-provisioner"
    );
    for p in &policies {
        assert_eq!(p["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
        assert_eq!(p["metadata"]["labels"]["sentry.io/bundle"], "install");
    }

    // The operator's: exactly the Deployment's pods, one rule, one port — the container's named
    // probe port, from anywhere (no `from`).
    let deployment: Deployment = serde_json::from_value(
        docs.iter()
            .find(|d| d["kind"] == "Deployment")
            .unwrap()
            .clone(),
    )
    .unwrap();
    let template = deployment.spec.unwrap().template;
    let pod_labels = template.metadata.unwrap().labels.unwrap();
    assert!(selects(&operator["spec"]["podSelector"], &pod_labels));
    let rules = operator["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0]["ports"],
        serde_json::json!([{"port": "probes", "protocol": "TCP"}])
    );
    assert!(rules[0].get("from").is_none(), "{rules:#?}");
    let ports = template.spec.unwrap().containers[0].ports.clone().unwrap();
    assert_eq!(
        ports
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.container_port))
            .collect::<Vec<_>>(),
        [("probes".to_owned(), 8081)],
        "the named port is the only one the container declares"
    );

    // The provisioner's: every Job pod (and not the operator), no ingress rule at all.
    let job = a_provisioning_job();
    let job_pod_labels = job.spec.unwrap().template.metadata.unwrap().labels.unwrap();
    assert!(selects(
        &provisioner["spec"]["podSelector"],
        &job_pod_labels
    ));
    assert!(!selects(&provisioner["spec"]["podSelector"], &pod_labels));
    assert!(!selects(&operator["spec"]["podSelector"], &job_pod_labels));
    assert!(
        provisioner["spec"].get("ingress").is_none(),
        "{provisioner:#?}"
    );
}

#[test]
fn metrics_from_namespaces_limit_the_probe_port_to_their_pods_and_are_validated() {
    let with = Values {
        network_policy: true,
        metrics_from_namespaces: vec!["monitoring".into(), "prometheus".into()],
        ..values(false)
    }
    .validate()
    .unwrap();
    let docs = parse_documents(&with.render_yaml()).unwrap();
    let operator = docs
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy" && d["metadata"]["name"] == "sentry-tenants")
        .unwrap();
    assert_eq!(
        operator["spec"]["ingress"][0]["from"],
        serde_json::json!([{"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name",
            "operator": "In",
            "values": ["monitoring", "prometheus"],
        }]}}])
    );
    let refused = Values {
        network_policy: true,
        metrics_from_namespaces: vec!["Monitoring".into()],
        ..values(false)
    }
    .validate()
    .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "--metrics-from-namespace \"Monitoring\" is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)"
    );
}

#[test]
fn an_image_pull_secret_goes_on_both_service_accounts_and_only_when_asked_for() {
    let pull_secrets = |v: &Values| -> Vec<(String, Value)> {
        parse_documents(&v.render_yaml())
            .unwrap()
            .into_iter()
            .filter(|d| d["kind"] == "ServiceAccount")
            .map(|d| {
                let name = d["metadata"]["name"].as_str().unwrap().to_owned();
                (name, d["imagePullSecrets"].clone())
            })
            .collect()
    };
    let none = pull_secrets(&values(false));
    assert_eq!(none.len(), 2);
    assert!(none.iter().all(|(_, s)| s.is_null()), "{none:?}");

    let with = Values {
        image_pull_secret: Some("regcred".into()),
        ..values(false)
    }
    .validate()
    .unwrap();
    assert_eq!(
        pull_secrets(&with),
        [
            (
                "sentry-tenants".to_owned(),
                serde_json::json!([{"name": "regcred"}])
            ),
            (
                "sentry-tenants-provisioner".to_owned(),
                serde_json::json!([{"name": "regcred"}])
            ),
        ]
    );
    let bad = Values {
        image_pull_secret: Some("Reg Cred".into()),
        ..values(false)
    };
    assert_eq!(
        bad.validate().unwrap_err().to_string(),
        "--image-pull-secret \"Reg Cred\" is not a valid Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)"
    );
}
