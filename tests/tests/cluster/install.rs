//! `install`, `check --pre`, re-install, upgrade and field conflicts against the real apiserver.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use sentry_tenants::install::apply::{
    BUNDLE_SELECTOR, CREATED_BY_INSTALL, NAMESPACED_KINDS, api_for,
};
use sentry_tenants::install::check::{Installed, all_passed, installed, post_install, preflight};
use sentry_tenants::install::{InstallError, InstallOptions, Progress, install};
use sentry_tenants_tests::control_plane::{fresh_namespace, wait_gone, wait_until};

use crate::setup;

fn no_wait() -> InstallOptions {
    InstallOptions {
        wait: false,
        ..InstallOptions::default()
    }
}

/// resourceVersion of every object the install owns in `ns`, and of the CRDs.
async fn versions(s: &crate::Setup) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for obj in s.idle_values().objects().unwrap() {
        let live = api_for(&s.admin, &obj).get(&obj.name_any()).await.unwrap();
        out.insert(
            sentry_tenants::install::apply::describe_obj(&obj),
            live.resource_version().unwrap(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_into_an_empty_namespace_rolls_out_and_every_check_passes() {
    let s = setup("install").await;
    // install creates its namespace itself: use a name nobody made.
    let ns_api: Api<Namespace> = Api::all(s.admin.clone());
    let target = format!("{}-own", s.ns);
    let values = sentry_tenants_tests::install_values(&target);
    let pre = preflight(&s.admin, &target).await;
    assert!(all_passed(&pre), "{pre:#?}");
    // Waits for the rollout: the Deployment's pod run by the stand-in kubelet, Ready by its probe.
    let wait = InstallOptions {
        timeout: sentry_tenants_tests::PATIENCE,
        ..InstallOptions::default()
    };
    install(&s.admin, &values, &wait, &Progress::Quiet)
        .await
        .unwrap();
    let checks = wait_until("every post-install check to pass", async || {
        let lines = post_install(
            &s.admin,
            &target,
            env!("CARGO_PKG_VERSION"),
            jiff::Timestamp::now(),
        )
        .await;
        all_passed(&lines).then_some(lines)
    })
    .await;
    assert_eq!(checks.len(), 5, "{checks:#?}");
    // What `version` reports of it, and of a namespace with no install.
    assert_eq!(
        installed(&s.admin, &target).await.unwrap(),
        Some(Installed {
            namespace: target.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            image: values.image.clone(),
            replicas: 1,
            available_replicas: 1,
        })
    );
    assert_eq!(installed(&s.admin, &s.ns).await.unwrap(), None);

    let crds: Api<CustomResourceDefinition> = Api::all(s.admin.clone());
    for name in ["tenants.sentry.io", "runjobs.sentry.io"] {
        let crd = crds.get(name).await.unwrap();
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "{name} Established by the apiserver");
    }
    let ns = ns_api.get(&target).await.unwrap();
    assert_eq!(
        ns.labels()
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
    assert!(
        ns.annotations().contains_key(CREATED_BY_INSTALL),
        "install made it"
    );
    for (group, version, kind) in NAMESPACED_KINDS {
        let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            group, version, kind,
        ));
        let api: Api<DynamicObject> = Api::namespaced_with(s.admin.clone(), &target, &resource);
        let found = api
            .list(&ListParams::default().labels(BUNDLE_SELECTOR))
            .await
            .unwrap();
        assert!(
            !found.items.is_empty(),
            "no {kind} of the bundle in {target}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_running_install_changes_nothing_and_an_upgrade_prunes_what_was_dropped() {
    let s = setup("reinstall").await;
    s.install_idle().await;
    let before = versions(&s).await;
    s.install_idle().await;
    assert_eq!(
        versions(&s).await,
        before,
        "a second install wrote something"
    );

    // What an older bundle shipped and this one does not: labelled as ours, so it goes.
    let configmaps: Api<ConfigMap> = Api::namespaced(s.admin.clone(), &s.ns);
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "sentry-tenants".to_owned(),
        ),
        ("sentry.io/bundle".to_owned(), "install".to_owned()),
    ]);
    let dropped = ConfigMap {
        metadata: ObjectMeta {
            name: Some("sentry-tenants-dropped".into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    configmaps
        .create(&PostParams::default(), &dropped)
        .await
        .unwrap();
    let report = install(&s.admin, &s.idle_values(), &no_wait(), &Progress::Quiet)
        .await
        .unwrap();
    assert_eq!(
        report.pruned,
        [format!("ConfigMap {}/sentry-tenants-dropped", s.ns)],
        "{report:#?}"
    );
    wait_gone(&configmaps, "sentry-tenants-dropped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_another_manager_took_stops_install_until_force_conflicts() {
    let s = setup("conflict").await;
    s.install_idle().await;
    let patch = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sentry-tenants\n  namespace: {}\nspec:\n  replicas: 3\n",
        s.ns
    );
    let (ok, _, err) = s.plane.kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=someone-else",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&patch),
    );
    assert!(ok, "{err}");
    let err = install(&s.admin, &s.idle_values(), &no_wait(), &Progress::Quiet)
        .await
        .expect_err("install must stop on the conflict");
    let InstallError::Conflict {
        kind,
        name,
        managers,
        fields,
    } = &err
    else {
        panic!("not a conflict: {err}");
    };
    assert_eq!(
        (kind.as_str(), name.as_str()),
        ("Deployment", "sentry-tenants")
    );
    assert!(managers.contains("someone-else"), "{err}");
    assert!(fields.contains(".spec.replicas"), "{err}");

    let forced = InstallOptions {
        force_conflicts: true,
        ..no_wait()
    };
    install(&s.admin, &s.idle_values(), &forced, &Progress::Quiet)
        .await
        .unwrap();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(s.admin.clone(), &s.ns);
    let d = deployments.get("sentry-tenants").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(1), "taken back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_pre_passes_for_an_admin_and_names_what_a_plain_user_may_not_do() {
    let s = setup("preflight").await;
    let pre = preflight(&s.admin, &s.ns).await;
    assert!(all_passed(&pre), "{pre:#?}");
    assert!(pre[1].what.starts_with("Kubernetes v1.36"), "{pre:#?}");

    // A ServiceAccount with no rights at all.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(s.admin.clone(), &s.ns);
    let nobody = k8s_openapi::api::core::v1::ServiceAccount {
        metadata: ObjectMeta {
            name: Some("nobody".into()),
            ..ObjectMeta::default()
        },
        ..Default::default()
    };
    accounts
        .create(&PostParams::default(), &nobody)
        .await
        .unwrap();
    let (client, _) = s.as_account("nobody").await;
    let other = fresh_namespace(&s.admin, "preflight-target").await;
    let pre = preflight(&client, &other).await;
    let crd = pre
        .iter()
        .find(|l| l.what.starts_with("may create customresourcedefinitions"))
        .expect("a CRD line");
    assert!(!crd.ok, "{pre:#?}");
    assert!(crd.what.ends_with("denied"), "{crd:?}");
    assert!(
        crd.hint.as_deref().unwrap().contains("cluster-admin"),
        "{crd:?}"
    );
}
