//! `install` against the in-memory API: order, waits, idempotent re-runs, pruning on upgrade, conflicts.

use std::collections::BTreeMap;
use std::time::Duration;

use http::Method;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch, PatchParams,
    PostParams,
};
use sentry_tenants::install::apply::NAMESPACED_KINDS;
use sentry_tenants::install::{InstallError, InstallOptions, Progress, Values, install};
use sentry_tenants_tests::{Cluster, status_body};
use serde_json::Value;

const NS: &str = "sentry-tenants";

fn values() -> Values {
    sentry_tenants_tests::install_values(NS)
}

fn no_wait() -> InstallOptions {
    InstallOptions {
        wait: false,
        poll: Duration::from_millis(20),
        timeout: sentry_tenants_tests::PATIENCE,
        ..InstallOptions::default()
    }
}

/// Everything an install owns, without the fields the server changes on every write.
async fn snapshot(c: &Cluster) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let selector = ListParams::default().labels("sentry.io/bundle=install");
    for (group, version, kind) in NAMESPACED_KINDS {
        let api: Api<DynamicObject> = Api::namespaced_with(
            c.admin.clone(),
            NS,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
        );
        for mut o in api.list(&selector).await.unwrap().items {
            o.metadata.resource_version = None;
            o.metadata.managed_fields = None;
            o.metadata.generation = None;
            out.insert(
                format!("{kind}/{}", o.metadata.name.clone().unwrap()),
                serde_json::to_value(o).unwrap(),
            );
        }
    }
    out
}

#[tokio::test]
async fn install_applies_crds_first_waits_for_them_then_the_rest_and_the_rollout() {
    let c = Cluster::new().await;
    let opts = InstallOptions {
        wait: true,
        ..no_wait()
    };
    let v = values();
    let report = tokio::select! {
        report = install(&c.client, &v, &opts, &Progress::Quiet) => report,
        () = c.play_deployment_controller() => unreachable!("plays the controller until the install ends"),
    };
    let report = report.unwrap();
    assert_eq!(report.applied.len(), 14, "{:#?}", report.applied);
    assert!(
        report.applied[12..]
            .iter()
            .all(|a| a.starts_with("ClusterRole sentry-tenants:sentry-tenants:credential-")),
        "the two consent roles: {:#?}",
        report.applied
    );
    assert!(report.applied[0].starts_with("CustomResourceDefinition tenants.sentry.io"));
    assert!(report.applied[1].starts_with("CustomResourceDefinition runjobs.sentry.io"));
    assert_eq!(report.applied[2], "Namespace sentry-tenants");

    let log = c.log.all();
    let applies: Vec<_> = log.iter().filter(|r| r.method == Method::PATCH).collect();
    assert!(
        applies
            .iter()
            .all(|r| r.query.contains("fieldManager=sentry-tenants")),
        "one field manager"
    );
    assert!(
        applies.iter().all(|r| !r.query.contains("force=true")),
        "no force unless asked"
    );
    // Both CRDs were read back (Established) before the first non-CRD object was applied.
    let first_other = log
        .iter()
        .position(|r| r.method == Method::PATCH && !r.path.contains("customresourcedefinitions"))
        .unwrap();
    let crd_reads = log[..first_other]
        .iter()
        .filter(|r| r.method == Method::GET && r.path.contains("customresourcedefinitions"))
        .count();
    assert!(
        crd_reads >= 2,
        "waited for both CRDs before applying the rest"
    );
    // And the rollout was waited for.
    assert!(
        log.iter()
            .any(|r| r.method == Method::GET && r.path.ends_with("/deployments/sentry-tenants"))
    );
}

#[tokio::test]
async fn rerunning_install_changes_nothing() {
    let c = Cluster::new().await;
    install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap();
    let before = snapshot(&c).await;
    assert_eq!(before.len(), 9, "{:#?}", before.keys());
    c.log.clear();
    let report = install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap();
    assert!(report.pruned.is_empty());
    assert_eq!(snapshot(&c).await, before);
    let writes: Vec<_> = c
        .log
        .all()
        .into_iter()
        .filter(|r| r.method == Method::POST || r.method == Method::DELETE)
        .collect();
    assert!(
        writes.is_empty(),
        "no creates or deletes on a re-run: {writes:?}"
    );
}

#[tokio::test]
async fn an_upgrade_prunes_what_the_new_bundle_dropped_and_nothing_else() {
    let c = Cluster::new().await;
    install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(c.admin.clone(), NS);
    let labelled = |labels: &[(&str, &str)]| ConfigMap {
        metadata: ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    // What an older version applied and this one no longer ships, and a copy of its labels on an
    // object someone else made: only the first carries the install's identity (its managedFields).
    let bundle_labels = [
        ("app.kubernetes.io/managed-by", "sentry-tenants"),
        ("sentry.io/bundle", "install"),
    ];
    let mut old = labelled(&bundle_labels);
    old.metadata.name = Some("sentry-tenants-legacy".into());
    cms.patch(
        "sentry-tenants-legacy",
        &PatchParams::apply("sentry-tenants"),
        &Patch::Apply(&old),
    )
    .await
    .unwrap();
    let mut copied = labelled(&bundle_labels);
    copied.metadata.name = Some("copied-labels".into());
    cms.create(&PostParams::default(), &copied).await.unwrap();
    // Ours, but not from the bundle (like a tenant's Secret), and someone else's.
    let mut runtime = labelled(&[("app.kubernetes.io/managed-by", "sentry-tenants")]);
    runtime.metadata.name = Some("made-at-runtime".into());
    cms.create(&PostParams::default(), &runtime).await.unwrap();
    let mut foreign = labelled(&[("team", "other")]);
    foreign.metadata.name = Some("someone-elses".into());
    cms.create(&PostParams::default(), &foreign).await.unwrap();

    // Without waiting for the rollout nothing is pruned; after a successful one, only the legacy map.
    let report = install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap();
    assert!(report.pruned.is_empty(), "{report:?}");
    let report = installed_and_rolled_out(&c).await;
    assert_eq!(
        report.pruned,
        ["ConfigMap sentry-tenants/sentry-tenants-legacy"]
    );
    assert!(cms.get_opt("copied-labels").await.unwrap().is_some());
    assert!(
        cms.get_opt("sentry-tenants-legacy")
            .await
            .unwrap()
            .is_none()
    );
    assert!(cms.get_opt("made-at-runtime").await.unwrap().is_some());
    assert!(cms.get_opt("someone-elses").await.unwrap().is_some());
    assert!(cms.get_opt("sentry-tenants").await.unwrap().is_some());
}

#[tokio::test]
async fn a_conflict_with_another_field_manager_is_reported_and_force_takes_over() {
    let c = Cluster::new().await;
    c.intercept.set(|method, path, query, _| {
        let conflicting = method == Method::PATCH && path.ends_with("/deployments/sentry-tenants") && !query.contains("force=true");
        conflicting.then(|| {
            let msg = "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using apps/v1: .spec.replicas";
            (409, status_body(409, "Conflict", msg))
        })
    });
    let err = install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap_err();
    assert!(matches!(err, InstallError::Conflict { .. }));
    assert_eq!(
        err.to_string(),
        "cannot apply Deployment sentry-tenants: its fields .spec.replicas are managed by \"kubectl-edit\"; re-run with --force-conflicts to take them over"
    );
    let forced = InstallOptions {
        force_conflicts: true,
        ..no_wait()
    };
    install(&c.client, &values(), &forced, &Progress::Quiet)
        .await
        .unwrap();
    assert!(
        c.log
            .all()
            .iter()
            .any(|r| r.path.ends_with("/deployments/sentry-tenants")
                && r.query.contains("force=true"))
    );
}

#[tokio::test]
async fn forbidden_and_timeouts_are_one_clear_line() {
    let c = Cluster::new().await;
    c.intercept.set(|method, path, _, _| {
        (method == Method::PATCH && path.contains("customresourcedefinitions")).then(|| {
            (403, status_body(403, "Forbidden", "customresourcedefinitions.apiextensions.k8s.io \"tenants.sentry.io\" is forbidden: User \"dev\" cannot patch resource"))
        })
    });
    let err = install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot apply CustomResourceDefinition tenants.sentry.io: forbidden ("),
        "{err}"
    );
    assert!(
        err.ends_with(
            "your account needs permission to apply CustomResourceDefinition tenants.sentry.io"
        ),
        "{err}"
    );
    assert!(!err.contains('\n'));

    c.intercept.clear();
    let opts = InstallOptions {
        wait: true,
        timeout: Duration::from_millis(200),
        ..no_wait()
    };
    let err = install(&c.client, &values(), &opts, &Progress::Quiet)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "timed out after 0s waiting for Deployment sentry-tenants/sentry-tenants to roll out"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_dropped_crd_is_never_deleted_only_reported() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let c = Cluster::new().await;
    install(&c.client, &values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap();
    // Pretend an older version shipped the RunJob CRD under another name: apply a renamed copy as
    // install would have.
    let crds: Api<CustomResourceDefinition> = Api::all(c.admin.clone());
    let mut legacy = sentry_tenants::crd::RunJob::crd();
    legacy.metadata.name = Some("legacyruns.sentry.io".into());
    legacy.spec.names.plural = "legacyruns".into();
    legacy.spec.names.kind = "LegacyRun".into();
    legacy.metadata.labels = Some(
        [
            ("app.kubernetes.io/managed-by", "sentry-tenants"),
            ("sentry.io/bundle", "install"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    crds.patch(
        "legacyruns.sentry.io",
        &PatchParams::apply("sentry-tenants"),
        &Patch::Apply(&legacy),
    )
    .await
    .unwrap();
    // Deleting a CRD deletes every object of it, and one could be created between any check and the
    // delete: install keeps it, whether or not objects of it exist, and says so.
    let report = installed_and_rolled_out(&c).await;
    assert!(report.pruned.is_empty(), "{report:?}");
    assert_eq!(
        report.kept,
        ["CustomResourceDefinition legacyruns.sentry.io"]
    );
    assert!(
        crds.get_opt("legacyruns.sentry.io")
            .await
            .unwrap()
            .is_some()
    );
}

/// `install` with `--wait`, the in-memory API's Deployment controller played until it ends.
async fn installed_and_rolled_out(c: &Cluster) -> sentry_tenants::install::InstallReport {
    let opts = InstallOptions {
        wait: true,
        ..no_wait()
    };
    let v = values();
    tokio::select! {
        report = install(&c.client, &v, &opts, &Progress::Quiet) => report.unwrap(),
        () = c.play_deployment_controller() => unreachable!("plays the controller until the install ends"),
    }
}

/// `install`'s "who can act through the dashboard" list, read off RBAC objects in the in-memory
/// API: a binding counts when the role it names (a Role in the namespace, or a ClusterRole) grants
/// port-forward; RoleBindings elsewhere and roles that do not grant it are left out. The cluster
/// tier proves the same against the built-in roles of a real apiserver.
#[tokio::test]
async fn who_can_port_forward_is_read_off_the_roles_and_their_bindings() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use sentry_tenants::install::who_can::port_forwarders;
    use serde_json::json;

    let c = Cluster::new().await;
    let forward =
        json!([{"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["create"]}]);
    let read = json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]);
    let everything = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    async fn create<K>(api: &Api<K>, object: serde_json::Value)
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
    {
        let object: K = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let cluster_roles: Api<ClusterRole> = Api::all(c.admin.clone());
    for (name, rules) in [
        ("admin-all", &everything),
        ("forwarder", &forward),
        ("viewer", &read),
    ] {
        let role = json!({"metadata": {"name": name}, "rules": rules});
        create(&cluster_roles, role).await;
    }
    // A Role that shares a granting ClusterRole's name but does not grant: the binding's kind decides.
    for (ns, name, rules) in [
        (NS, "forwarder-ns", &forward),
        (NS, "forwarder", &read),
        ("other", "forwarder-ns", &forward),
    ] {
        let role = json!({"metadata": {"name": name, "namespace": ns}, "rules": rules});
        create(&Api::<Role>::namespaced(c.admin.clone(), ns), role).await;
    }
    let subject = |kind: &str, name: &str| match kind {
        "ServiceAccount" => json!({"kind": kind, "name": name}),
        _ => json!({"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}),
    };
    let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    for (name, role, subjects) in [
        (
            "root",
            "admin-all",
            json!([subject("Group", "system:masters")]),
        ),
        (
            "forwarders",
            "forwarder",
            json!([subject("User", "alice"), subject("Group", "ops")]),
        ),
        ("viewers", "viewer", json!([subject("User", "vera")])),
    ] {
        let binding = json!({"metadata": {"name": name}, "roleRef": role_ref("ClusterRole", role), "subjects": subjects});
        create(&Api::<ClusterRoleBinding>::all(c.admin.clone()), binding).await;
    }
    for (ns, name, kind, role, who) in [
        (
            NS,
            "helper",
            "ClusterRole",
            "forwarder",
            subject("ServiceAccount", "helper"),
        ),
        (
            NS,
            "alice-too",
            "Role",
            "forwarder-ns",
            subject("User", "alice"),
        ),
        (
            NS,
            "not-a-forwarder",
            "Role",
            "forwarder",
            subject("User", "mallory"),
        ),
        (
            NS,
            "viewer",
            "ClusterRole",
            "viewer",
            subject("User", "vera"),
        ),
        (
            "other",
            "elsewhere",
            "Role",
            "forwarder-ns",
            subject("User", "olga"),
        ),
        (
            "other",
            "elsewhere-too",
            "ClusterRole",
            "forwarder",
            subject("User", "oscar"),
        ),
    ] {
        let binding = json!({"metadata": {"name": name, "namespace": ns}, "roleRef": role_ref(kind, role), "subjects": [who]});
        create(
            &Api::<RoleBinding>::namespaced(c.admin.clone(), ns),
            binding,
        )
        .await;
    }

    let who = port_forwarders(&c.admin, NS).await.unwrap();
    let expected: BTreeMap<String, std::collections::BTreeSet<String>> = [
        ("Group system:masters", vec!["ClusterRoleBinding root"]),
        ("Group ops", vec!["ClusterRoleBinding forwarders"]),
        (
            "User alice",
            vec![
                "ClusterRoleBinding forwarders",
                "RoleBinding sentry-tenants/alice-too",
            ],
        ),
        (
            "ServiceAccount sentry-tenants/helper",
            vec!["RoleBinding sentry-tenants/helper"],
        ),
    ]
    .into_iter()
    .map(|(who, via)| (who.to_owned(), via.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(who, expected);
}
