//! `install`, `check --pre`, re-install, upgrade and field conflicts against the real apiserver.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use sentry_tenants::install::OPERATOR_POD_SELECTOR;
use sentry_tenants::install::apply::AdminCredentials;
use sentry_tenants::install::apply::{
    BUNDLE_SELECTOR, CREATED_BY_INSTALL, NAMESPACED_KINDS, api_for,
};
use sentry_tenants::install::check::{Installed, all_passed, installed, post_install, preflight};
use sentry_tenants::install::{InstallError, InstallOptions, Progress, install};
use sentry_tenants_tests::cluster_tier::IDLE_IMAGE;
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

/// Waits until the Deployment controller observed the operator Deployment's generation and counted
/// every pod of it: with the idle image's pods stuck pulling, it writes the status no more after that.
async fn deployment_status_settled(s: &crate::Setup) {
    let deployments: Api<Deployment> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(
        "the Deployment controller to settle the status",
        async || {
            let d = deployments.get("sentry-tenants").await.ok()?;
            let status = d.status?;
            let wanted = d.spec?.replicas.unwrap_or(1);
            let settled = status.observed_generation == d.metadata.generation
                && status.replicas == Some(wanted)
                && status.updated_replicas == Some(wanted)
                && status.unavailable_replicas == Some(wanted);
            settled.then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_into_an_empty_namespace_rolls_out_and_every_check_passes() {
    let s = setup("install").await;
    // install creates its namespace itself: use a name nobody made.
    let ns_api: Api<Namespace> = Api::all(s.admin.clone());
    let target = format!("{}-own", s.ns);
    let values = s.plane.install_values(&target);
    // Everything passes but the admin Secret: the namespace is not there yet.
    let pre = preflight(&s.admin, &target, "clickhouse-admin", false).await;
    let failed = sentry_tenants_tests::failed_checks(&pre);
    assert_eq!(
        failed,
        [format!(
            "ClickHouse admin Secret {target}/clickhouse-admin does not exist"
        )],
        "{pre:#?}"
    );
    // Waits for the rollout: the Deployment's pod run on the node, Ready by its probe.
    // The admin Secret is made by install, as --clickhouse-admin-password-stdin does.
    let wait = InstallOptions {
        timeout: sentry_tenants_tests::PATIENCE,
        clickhouse_admin: Some(AdminCredentials {
            username: "sentry_admin".into(),
            password: "from stdin".into(),
        }),
        ..InstallOptions::default()
    };
    install(&s.admin, &values, &wait, &Progress::Quiet)
        .await
        .unwrap();
    let pre = preflight(&s.admin, &target, "clickhouse-admin", false).await;
    assert!(all_passed(&pre), "{pre:#?}");
    let admin_secret = Api::<Secret>::namespaced(s.admin.clone(), &target)
        .get("clickhouse-admin")
        .await
        .unwrap();
    assert!(
        !admin_secret.labels().contains_key("sentry.io/bundle"),
        "no prune may ever find the admin Secret"
    );
    let data = admin_secret.data.unwrap_or_default();
    assert_eq!(data["username"].0, b"sentry_admin");
    assert_eq!(data["password"].0, b"from stdin");
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
        // NetworkPolicies are opt-in (`--network-policy`): a default install ships none.
        if *kind == "NetworkPolicy" {
            assert!(
                found.items.is_empty(),
                "a {kind} without the flag in {target}"
            );
        } else {
            assert!(
                !found.items.is_empty(),
                "no {kind} of the bundle in {target}"
            );
        }
    }
}

fn rolled_out() -> InstallOptions {
    InstallOptions {
        timeout: sentry_tenants_tests::PATIENCE,
        ..InstallOptions::default()
    }
}

/// A ConfigMap carrying the bundle's labels, as `manager` server-side applied it.
async fn labelled_config_map(s: &crate::Setup, name: &str, manager: &str) {
    let configmaps: Api<ConfigMap> = Api::namespaced(s.admin.clone(), &s.ns);
    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "sentry-tenants".to_owned(),
        ),
        ("sentry.io/bundle".to_owned(), "install".to_owned()),
    ]);
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    configmaps
        .patch(name, &PatchParams::apply(manager), &Patch::Apply(&object))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_running_install_changes_nothing_and_an_upgrade_prunes_only_what_install_applied() {
    let s = setup("reinstall").await;
    s.install_idle().await;
    // The Deployment controller writes the Deployment's status after any install (a resourceVersion
    // of its own): compare only once it has nothing left to write.
    deployment_status_settled(&s).await;
    let before = versions(&s).await;
    s.install_idle().await;
    assert_eq!(
        versions(&s).await,
        before,
        "a second install wrote something"
    );

    // What an older bundle applied and this one does not ship, and an object someone else made with
    // the same labels: only the first is the install's.
    labelled_config_map(&s, "sentry-tenants-dropped", "sentry-tenants").await;
    labelled_config_map(&s, "copied-labels", "someone-else").await;
    let report = install(&s.admin, &s.values(), &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    assert_eq!(
        report.pruned,
        [format!("ConfigMap {}/sentry-tenants-dropped", s.ns)],
        "{report:#?}"
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_gone(&configmaps, "sentry-tenants-dropped").await;
    assert!(configmaps.get_opt("copied-labels").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_ends_the_install_with_the_pull_error_and_prunes_nothing() {
    let s = setup("pull-error").await;
    s.install_idle().await;
    labelled_config_map(&s, "sentry-tenants-dropped", "sentry-tenants").await;
    // The whole patience to wait: the install must end on the pod's reason, not on the clock.
    let started = std::time::Instant::now();
    let err = install(&s.admin, &s.idle_values(), &rolled_out(), &Progress::Quiet)
        .await
        .expect_err("the rollout cannot finish");
    let elapsed = started.elapsed();
    let InstallError::RolloutStuck { deployment, reason } = &err else {
        panic!("not a stuck rollout: {err}");
    };
    assert_eq!(deployment, &format!("{}/sentry-tenants", s.ns));
    assert!(reason.starts_with("pod sentry-tenants-"), "{reason}");
    // The kubelet's own words: the first pull's error, or the back-off after it.
    assert!(
        reason.contains(", container operator: ErrImagePull: ")
            || reason.contains(", container operator: ImagePullBackOff: "),
        "{reason}"
    );
    assert!(reason.contains(IDLE_IMAGE), "names the image: {reason}");
    assert!(
        err.to_string().ends_with("or pass --image)"),
        "the hint says what to do: {err}"
    );
    // Past the harness's capture, so CI's log shows the figure for a passing test too.
    let _ = writeln!(
        std::io::stderr(),
        "install ended with the pull error after {elapsed:?} (its timeout: {:?})",
        sentry_tenants_tests::PATIENCE
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(s.admin.clone(), &s.ns);
    assert!(
        configmaps
            .get_opt("sentry-tenants-dropped")
            .await
            .unwrap()
            .is_some(),
        "a failed rollout prunes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_change_rolls_the_operator_pods() {
    let s = setup("settings-roll").await;
    install(&s.admin, &s.values(), &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let operator_pods = async || -> BTreeSet<String> {
        pods.list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect()
    };
    let first = operator_pods().await;
    assert_eq!(first.len(), 1, "{first:?}");
    let checksum = |pod: &Pod| {
        pod.annotations()
            .get("sentry.io/settings-checksum")
            .cloned()
    };
    let before = checksum(&pods.get(first.first().unwrap()).await.unwrap());

    // Only a setting changes (the ConfigMap the pods read through envFrom), not the pod template's
    // own fields: the checksum annotation is what rolls them.
    let url = "http://clickhouse.elsewhere:8123";
    let changed = sentry_tenants::install::Values {
        clickhouse_url: url.into(),
        ..s.values()
    }
    .validate()
    .unwrap();
    install(&s.admin, &changed, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    let second = wait_until("the old operator pod to be gone", async || {
        let now = operator_pods().await;
        (now.len() == 1 && now.is_disjoint(&first)).then_some(now)
    })
    .await;
    let pod = wait_until("the new operator pod running", async || {
        let pod = pods.get(second.first().unwrap()).await.ok()?;
        let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
        statuses.first()?.state.as_ref()?.running.as_ref()?;
        Some(pod)
    })
    .await;
    let after = checksum(&pod);
    assert!(
        after.as_ref().is_some_and(|c| c.len() == 64) && after != before,
        "a new checksum: {before:?} then {after:?}"
    );
    // What the new container really runs with, read from its process on the node.
    let main = sentry_tenants_tests::node::cgroup_pids(
        &sentry_tenants_tests::node::container_cgroup(&pod, "memory"),
    )[0];
    let environ = sentry_tenants_tests::node::proc_environ(main);
    assert!(
        environ.contains(&format!("SENTRY_TENANTS_CLICKHOUSE_URL={url}")),
        "the new setting in the container's environment: {environ:?}"
    );
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
    s.create_admin_secret(("ch-admin", "ch-admin-password"))
        .await;
    let pre = preflight(&s.admin, &s.ns, "clickhouse-admin", false).await;
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
    let pre = preflight(&client, &other, "clickhouse-admin", false).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_roles_let_namespace_viewers_and_editors_use_tenants_until_dropped() {
    use sentry_tenants::crd::Tenant;
    let s = setup("aggregate").await;
    let with_roles = sentry_tenants::install::Values {
        aggregate_to_view_edit: true,
        ..s.values()
    };
    let report = install(&s.admin, &with_roles, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    assert!(
        report
            .applied
            .contains(&format!("ClusterRole sentry-tenants:{}:view", s.ns)),
        "{report:#?}"
    );
    // People bound to Kubernetes' own view and edit roles in this namespace, nothing else.
    s.account_bound_to("viewer", "view");
    s.account_bound_to("editor", "edit");
    let viewer: Api<Tenant> = Api::namespaced(s.as_account("viewer").await.0, &s.ns);
    let editor: Api<Tenant> = Api::namespaced(s.as_account("editor").await.0, &s.ns);
    let acme: Tenant = serde_json::from_value(serde_json::json!({
        "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"}, "spec": {},
    }))
    .unwrap();
    // The aggregation controller folds our rules into view/edit a moment after they exist.
    wait_until("an editor to create a tenant", async || {
        editor.create(&PostParams::default(), &acme).await.ok()
    })
    .await;
    let listed = wait_until("a viewer to list tenants", async || {
        viewer.list(&ListParams::default()).await.ok()
    })
    .await;
    assert_eq!(listed.items.len(), 1);
    let refused = viewer
        .create(&PostParams::default(), &acme)
        .await
        .expect_err("a viewer may not create");
    assert!(
        matches!(refused, kube::Error::Api(ref e) if e.code == 403),
        "{refused}"
    );

    // Installed again without the flag: the roles go (after the rollout), and with them the access.
    let report = install(&s.admin, &s.values(), &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    assert_eq!(
        report.pruned,
        [
            format!("ClusterRole sentry-tenants:{}:edit", s.ns),
            format!("ClusterRole sentry-tenants:{}:view", s.ns),
        ],
        "{report:#?}"
    );
    wait_until("the viewer to lose tenants", async || {
        match viewer.list(&ListParams::default()).await {
            Err(kube::Error::Api(e)) if e.code == 403 => Some(()),
            _ => None,
        }
    })
    .await;
}

/// The real apiserver accepts the policies (a named port, a namespace selector), their selectors pick
/// the running operator pods and the Jobs' pods and nothing else, the operator still rolls out, and
/// dropping the flag prunes them. Whether traffic is then refused is the network plugin's part: the
/// node's bridge plugin enforces no NetworkPolicy (docs/install.md says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policies_select_the_operator_and_job_pods_and_go_when_dropped() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let s = setup("netpol").await;
    let with_policy = sentry_tenants::install::Values {
        network_policy: true,
        metrics_from_namespaces: vec!["monitoring".into()],
        ..s.values()
    };
    let report = install(&s.admin, &with_policy, &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    let ours = [
        format!("NetworkPolicy {}/sentry-tenants", s.ns),
        format!("NetworkPolicy {}/sentry-tenants-provisioner", s.ns),
    ];
    for what in &ours {
        assert!(report.applied.contains(what), "{what}: {report:#?}");
    }
    let policies: Api<NetworkPolicy> = Api::namespaced(s.admin.clone(), &s.ns);
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    // The pods a label selector picks, by the real apiserver's matching.
    let pod_names = async |selector: &str| -> BTreeSet<String> {
        let listed = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        listed.items.iter().map(|p| p.name_any()).collect()
    };
    let selected = async |policy: &str| -> BTreeSet<String> {
        let p = policies.get(policy).await.unwrap();
        let labels = p.spec.unwrap().pod_selector.unwrap().match_labels.unwrap();
        let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pod_names(&selector.join(",")).await
    };
    let operator_pods = pod_names(OPERATOR_POD_SELECTOR).await;
    assert!(!operator_pods.is_empty());
    assert_eq!(selected("sentry-tenants").await, operator_pods);
    let stored = policies.get("sentry-tenants").await.unwrap().spec.unwrap();
    let rule = &stored.ingress.unwrap()[0];
    assert_eq!(
        serde_json::to_value(&rule.ports).unwrap(),
        serde_json::json!([{"port": "probes", "protocol": "TCP"}])
    );

    // A provisioning Job's pod, made by the real Job controller from the product's template.
    let mut run = sentry_tenants::crd::RunJob::new(
        "acme-provision-1",
        sentry_tenants::crd::RunJobSpec::new("acme", sentry_tenants::crd::RunAction::Provision),
    );
    run.metadata.namespace = Some(s.ns.clone());
    run.metadata.uid = Some("0b6e4c2e-0000-4000-8000-000000000001".into());
    let mut job = sentry_tenants::controller::job::build_job(
        &run,
        &sentry_tenants::config::OperatorConfig::for_namespace(&s.ns),
    );
    job.metadata.owner_references = None;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(s.admin.clone(), &s.ns);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let job_pod = "batch.kubernetes.io/job-name=acme-provision-1";
    wait_until("the Job's pod", async || {
        let listed = pods
            .list(&ListParams::default().labels(job_pod))
            .await
            .ok()?;
        (!listed.items.is_empty()).then_some(())
    })
    .await;
    // The Job may have made a second pod by now (its first failed): every pod selected is the Job's.
    let selected_pods = selected("sentry-tenants-provisioner").await;
    let jobs_pods = pod_names(job_pod).await;
    assert!(!selected_pods.is_empty());
    assert!(
        selected_pods.is_subset(&jobs_pods),
        "{selected_pods:?} {jobs_pods:?}"
    );
    assert!(selected_pods.is_disjoint(&operator_pods));

    let report = install(&s.admin, &s.values(), &rolled_out(), &Progress::Quiet)
        .await
        .unwrap();
    let mut pruned = report.pruned.clone();
    pruned.sort();
    assert_eq!(pruned, ours, "{report:#?}");
    assert!(
        policies
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// The binary as a person runs it against the real apiserver: the last stderr line is the one error
/// line, nothing before it is a log line, and nothing is created when the admin Secret is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_install_names_a_missing_admin_secret_and_an_image_it_cannot_pull() {
    let s = setup("cli-install").await;
    let target = format!("{}-own", s.ns);
    let kubeconfig = s.plane.kubeconfig.to_str().unwrap().to_owned();
    let run = |args: &[&str], stdin: &str| {
        let mut child = sentry_tenants_tests::processes::Owned::spawn(
            std::process::Command::new(s.plane.project_binary())
                .args(["--kubeconfig", &kubeconfig, "install", "-n", &target])
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped()),
        )
        .unwrap();
        child
            .child_mut()
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(!stderr.contains('\u{1b}'), "no colour on a pipe: {stderr}");
        (out.status.code(), stderr)
    };

    let (code, stderr) = run(&[], "");
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: ClickHouse admin Secret {target}/clickhouse-admin does not exist: create it (kubectl -n {target} create secret generic clickhouse-admin --from-literal=username=… --from-literal=password=…), or let install create it: --clickhouse-admin-password-stdin"
        )
    );
    let namespaces: Api<Namespace> = Api::all(s.admin.clone());
    assert!(
        namespaces.get_opt(&target).await.unwrap().is_none(),
        "nothing was created"
    );

    // A token the apiserver no longer accepts (an expired login) is named as such.
    let admin_config: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(&s.plane.kubeconfig).unwrap()).unwrap();
    let expired = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": admin_config["clusters"][0]["cluster"]}],
        "users": [{"name": "u", "user": {"token": "expired-or-revoked"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    });
    let expired_path = s.plane.dir.join(format!("{}-expired.kubeconfig", s.ns));
    std::fs::write(&expired_path, expired.to_string()).unwrap();
    let out = std::process::Command::new(s.plane.project_binary())
        .args([
            "--kubeconfig",
            expired_path.to_str().unwrap(),
            "version",
            "-n",
            &s.ns,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap().trim_end(),
        "error: cannot get the operator Deployment: the API server rejected your credentials (Unauthorized): they may have expired; log in again or refresh the kubeconfig"
    );

    let (code, stderr) = run(
        &[
            "--clickhouse-admin-password-stdin",
            "--image",
            IDLE_IMAGE,
            "--timeout",
            "1h",
        ],
        "s3cret\n",
    );
    assert_eq!(code, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let (last, progress) = lines.split_last().unwrap();
    assert!(
        last.starts_with(&format!(
            "error: the operator Deployment {target}/sentry-tenants cannot roll out: pod sentry-tenants-"
        )) && last.contains("ErrImagePull"),
        "{stderr}"
    );
    assert!(
        progress.iter().all(|l| l.starts_with("✓ ")),
        "only progress lines before the error: {stderr}"
    );
    assert!(!stderr.contains("s3cret"), "the password is never printed");
}

/// `install` prints who can act through the dashboard: whoever the RBAC lets port-forward to the
/// operator's pod, read as the authorizer reads it (aggregated `edit` included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_can_act_through_the_dashboard_is_read_off_the_rbac() {
    use sentry_tenants::install::who_can::port_forwarders;
    let s = setup("who-can").await;
    // An account bound to the built-in edit role, and one bound to view, in the install namespace.
    s.account_bound_to("helper", "edit");
    s.account_bound_to("reader", "view");
    let who = wait_until("the edit binding among the port-forwarders", async || {
        let who = port_forwarders(&s.admin, &s.ns).await.ok()?;
        who.contains_key(&format!("ServiceAccount {}/helper", s.ns))
            .then_some(who)
    })
    .await;
    assert_eq!(
        who[&format!("ServiceAccount {}/helper", s.ns)]
            .iter()
            .collect::<Vec<_>>(),
        [&format!("RoleBinding {}/helper", s.ns)]
    );
    assert!(
        who["Group system:masters"].contains("ClusterRoleBinding cluster-admin"),
        "{who:#?}"
    );
    assert!(
        !who.contains_key(&format!("ServiceAccount {}/reader", s.ns)),
        "view may not port-forward: {who:#?}"
    );
}
