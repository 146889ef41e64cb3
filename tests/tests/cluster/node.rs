//! What only a real node shows: the operator's image run by the kubelet, containerd and runc as the
//! Deployment says (user, read-only root, memory limit, probes), reached through kube-proxy's Services
//! and CoreDNS, and `install`'s diagnosis of pull errors and crash loops as a kubelet reports them.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use sentry_tenants::crd::TenantPhase;
use sentry_tenants::install::{InstallError, InstallOptions, Progress, Values, install};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{ImageDocument, wait_until};
use sentry_tenants_tests::http_get;

use crate::provision::{tenant_in_phase, tenant_with};
use crate::{Setup, setup};
use sentry_tenants_tests::node::{cgroup_pids, container_cgroup, proc_status, root_mount_options};

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

/// A namespace of its own with the operator installed against a ClickHouse stand-in, and its pod once
/// it runs.
async fn installed(prefix: &str) -> (Setup, ClickHouseStandIn, Pod) {
    let s = setup(prefix).await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    let pod = operator_pod(&s).await;
    (s, ch, pod)
}

/// The operator's pod of the namespace's install, once there is exactly one and it is Ready.
async fn operator_pod(s: &Setup) -> Pod {
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until("one Ready operator pod", async || {
        let list = pods
            .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
            .await
            .ok()?;
        let [pod] = list.items.as_slice() else {
            return None;
        };
        let ready = pod
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then(|| pod.clone())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_container_runs_as_65532_read_only_within_the_deployments_memory_limit() {
    let (s, _clickhouse, pod) = installed("node-limits").await;

    let memory = container_cgroup(&pod, "memory");
    let limit = std::fs::read_to_string(memory.join("memory.limit_in_bytes")).unwrap();
    assert_eq!(
        limit.trim(),
        (512u64 << 20).to_string(),
        "the Deployment's 512Mi"
    );
    let pids = cgroup_pids(&memory);
    let main = *pids.first().expect("the container's process");
    assert!(
        proc_status(main, "Name").starts_with("sentry-tenants"),
        "{}",
        proc_status(main, "Name")
    );
    // Real, effective, saved and filesystem ids alike.
    assert_eq!(proc_status(main, "Uid"), "65532\t65532\t65532\t65532");
    assert_eq!(proc_status(main, "Gid"), "65532\t65532\t65532\t65532");
    assert_eq!(proc_status(main, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(main, "NoNewPrivs"), "1");
    assert_eq!(
        proc_status(main, "Seccomp"),
        "2",
        "filtered: RuntimeDefault"
    );
    let root = root_mount_options(main);
    assert!(root.split(',').any(|o| o == "ro"), "root mounted {root}");

    // The operator does its work with that root: a tenant provisioned end to end.
    s.apply(&tenant_with("acme", false, "Automatic"));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    assert_eq!(
        cgroup_pids(&memory).first(),
        Some(&main),
        "the same process did it"
    );
}

/// The stand-in ClickHouse behind a Service of the test's namespace named `clickhouse` (an
/// EndpointSlice naming this host), so the install's default URL shape resolves through CoreDNS.
fn clickhouse_service(s: &Setup, ch: &ClickHouseStandIn) {
    let port = ch.url.rsplit(':').next().unwrap();
    s.apply(&format!(
        "apiVersion: v1
kind: Service
metadata: {{name: clickhouse}}
spec:
  ports: [{{name: http, port: 8123, targetPort: {port}, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: clickhouse-host
  labels: {{kubernetes.io/service-name: clickhouse}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: [\"{}\"]}}]
",
        s.plane.host_address()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_reach_clickhouse_by_service_name_and_metrics_answer_on_the_services_cluster_ip() {
    let s = setup("node-services").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    clickhouse_service(&s, &ch);
    // The install's default shape: the name of a Service in a namespace, resolved by cluster DNS.
    let url = format!("http://clickhouse.{}.svc:8123", s.ns);
    s.install_with_clickhouse(&url, ADMIN).await;
    s.apply(&tenant_with("acme", false, "Automatic"));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    assert!(
        ch.statements()
            .iter()
            .any(|q| q.starts_with("CREATE USER") && q.contains(&s.ch_user("acme"))),
        "the Job's statements reached the stand-in through the Service"
    );

    // /metrics through the operator's Service: its ClusterIP, routed to the node and DNATed by
    // kube-proxy to the pod.
    let services: Api<Service> = Api::namespaced(s.admin.clone(), &s.ns);
    let ip = services
        .get("sentry-tenants")
        .await
        .unwrap()
        .spec
        .unwrap()
        .cluster_ip
        .unwrap();
    operator_pod(&s).await;
    let body = wait_until("/metrics through the Service", async || {
        http_get(&format!("{ip}:8081"), "/metrics").await.ok()
    })
    .await;
    assert!(
        body.contains("sentry_tenants_tenants{phase=\"Active\"} 1"),
        "the pod's own figures: {body}"
    );
}

fn rolled_out() -> InstallOptions {
    InstallOptions {
        timeout: sentry_tenants_tests::PATIENCE,
        ..InstallOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_ends_with_the_pull_error_for_a_tag_the_registry_lacks_within_30_s() {
    let s = setup("node-pull").await;
    s.create_admin_secret(ADMIN).await;
    let registry = s.plane.image().split('/').next().unwrap().to_owned();
    let image = format!("{registry}/sentry-tenants:no-such-tag");
    let values = Values {
        image: image.clone(),
        ..s.values()
    };
    let started = Instant::now();
    let err = install(&s.admin, &values, &rolled_out(), &Progress::Quiet)
        .await
        .expect_err("the image cannot be pulled");
    let elapsed = started.elapsed();
    let InstallError::RolloutStuck { reason, .. } = &err else {
        panic!("not a stuck rollout: {err}");
    };
    assert!(
        reason.contains(", container operator: ErrImagePull: ")
            || reason.contains(", container operator: ImagePullBackOff: "),
        "{reason}"
    );
    assert!(reason.contains(&image), "names the image: {reason}");
    assert!(reason.contains("not found"), "says why: {reason}");
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_ends_with_the_crash_loop_and_the_containers_last_log_line() {
    let s = setup("node-crash").await;
    s.create_admin_secret(ADMIN).await;
    // The operator's image whose entrypoint names a kubeconfig the container does not have: `run`
    // says so and exits at once, on every restart.
    let image = s.plane.push_image_variant(
        "exits-at-once",
        r#"["/usr/local/bin/sentry-tenants", "--kubeconfig", "/nonexistent/kubeconfig"]"#,
    );
    let values = Values {
        image,
        ..s.values()
    };
    let err = install(&s.admin, &values, &rolled_out(), &Progress::Quiet)
        .await
        .expect_err("the container cannot stay up");
    let InstallError::RolloutStuck { reason, .. } = &err else {
        panic!("not a stuck rollout: {err}");
    };
    assert!(
        reason.contains(", container operator: CrashLoopBackOff: "),
        "{reason}"
    );
    let last_line = reason
        .split_once("; its last log line: ")
        .map(|(_, l)| l)
        .unwrap_or_else(|| panic!("no log line: {reason}"));
    assert_eq!(
        last_line,
        "error: cannot read the kubeconfig /nonexistent/kubeconfig: No such file or directory (os error 2)",
        "the container's own last words"
    );
}

/// Whether the Service's EndpointSlices list `ip` as ready.
async fn ready_endpoint(s: &Setup, service: &str, ip: &str) -> Option<bool> {
    let slices: Api<EndpointSlice> = Api::namespaced(s.admin.clone(), &s.ns);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await
        .ok()?;
    list.items
        .iter()
        .flat_map(|slice| slice.endpoints.iter())
        .find(|e| e.addresses.iter().any(|a| a == ip))
        .map(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_probes_take_a_hung_operator_out_of_the_service_then_restart_it() {
    let (s, _clickhouse, pod) = installed("node-probes").await;
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    wait_until("the pod a ready endpoint of its Service", async || {
        ready_endpoint(&s, "sentry-tenants", &ip)
            .await
            .filter(|r| *r)
    })
    .await;

    // Hang the process (SIGSTOP from this host, as a deadlock would): it answers no probe.
    let main = cgroup_pids(&container_cgroup(&pod, "memory"))[0];
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &main.to_string()])
        .status()
        .unwrap();
    assert!(stop.success());
    // Readiness (every 5 s, 3 failures) takes it out before liveness (every 10 s, 3 failures) restarts
    // it.
    wait_until("the hung pod no longer a ready endpoint", async || {
        ready_endpoint(&s, "sentry-tenants", &ip)
            .await
            .filter(|r| !*r)
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let name = pod.metadata.name.clone().unwrap();
    let restarts = |p: &Pod| {
        let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
        Some(statuses.first()?.restart_count)
    };
    assert_eq!(
        restarts(&pods.get(&name).await.unwrap()),
        Some(0),
        "the readiness probe took it out, not a restart by the liveness probe"
    );
    wait_until("the kubelet to restart the hung container", async || {
        let p = pods.get(&name).await.ok()?;
        let c = p.status?.container_statuses?.into_iter().next()?;
        (c.restart_count >= 1 && c.ready).then_some(())
    })
    .await;
    wait_until("the restarted pod a ready endpoint again", async || {
        ready_endpoint(&s, "sentry-tenants", &ip)
            .await
            .filter(|r| *r)
    })
    .await;
}

/// What the Dockerfile's final stage declares of the image.
#[derive(Default)]
struct Declared {
    user: String,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    ports: Vec<String>,
    labels: Vec<(String, String)>,
}

fn dockerfile_image() -> Declared {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile");
    let text = std::fs::read_to_string(path).unwrap().replace("\\\n", " ");
    let last_stage = text.rsplit("\nFROM ").next().unwrap();
    let mut d = Declared::default();
    for line in last_stage.lines().map(str::trim) {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "USER" => d.user = rest.trim().to_owned(),
            "ENTRYPOINT" => d.entrypoint = serde_json::from_str(rest).unwrap(),
            "CMD" => d.cmd = serde_json::from_str(rest).unwrap(),
            "EXPOSE" => d
                .ports
                .extend(rest.split_whitespace().map(|p| format!("{p}/tcp"))),
            "LABEL" => d.labels.extend(rest.split_whitespace().map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_owned(), v.trim_matches('"').to_owned())
            })),
            _ => {}
        }
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_in_the_registry_is_the_one_the_dockerfile_describes() {
    let s = setup("node-image").await;
    let manifest = s.plane.image_document(ImageDocument::Manifest).await;
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    let config = s
        .plane
        .image_document(ImageDocument::Blob(config_digest))
        .await;
    let config = &config["config"];

    let declared = dockerfile_image();
    assert_eq!(config["User"], declared.user.as_str());
    assert_eq!(config["Entrypoint"], serde_json::json!(declared.entrypoint));
    assert_eq!(config["Cmd"], serde_json::json!(declared.cmd));
    let exposed: Vec<&String> = config["ExposedPorts"].as_object().unwrap().keys().collect();
    assert_eq!(exposed, declared.ports.iter().collect::<Vec<_>>());
    assert!(!declared.labels.is_empty());
    for (key, value) in &declared.labels {
        assert_eq!(config["Labels"][key], value.as_str(), "label {key}");
    }
    // Not in the Dockerfile's hands: which commit and version the binary is.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"],
        version
    );
}
