//! `sentry-tenants image export` on the real node: the archive it writes is imported by containerd's
//! own `ctr`, and the operator and its provisioning Jobs run from it under a name no registry serves —
//! the air-gapped install. `install --push-image` pushes it to a registry that wants a password over
//! TLS from a private CA and rolls out pinned to its digest. And the image's root filesystem runs the
//! binary with nothing from the host.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use sentry_tenants::crd::TenantPhase;
use sentry_tenants::install::Values;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{control_plane, wait_until};
use sentry_tenants_tests::registry::TestRegistry;

use crate::provision::{tenant_in_phase, tenant_with};
use crate::{Setup, setup};

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

/// A directory of the test's own under cargo's scratch directory (target/tmp), emptied first.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("image")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The project binary without its debug sections (as `scripts/image.sh` exports it): made once per
/// test process and shared, since every test here exports the same binary.
pub(crate) fn stripped_binary() -> PathBuf {
    static STRIPPED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    STRIPPED
        .get_or_init(|| {
            let binary = scratch("stripped").join("sentry-tenants");
            run(Command::new("objcopy")
                .arg("--strip-debug")
                .arg(control_plane().project_binary())
                .arg(&binary));
            binary
        })
        .clone()
}

/// `image export -o FILE --tag TAG`; the digest it prints.
fn export(binary: &Path, file: &Path, tag: &str) -> String {
    let out = run(Command::new(binary)
        .args(["image", "export", "-o"])
        .arg(file)
        .args(["--tag", tag]));
    out.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_image_imported_with_ctr_runs_the_operator_and_its_jobs_under_a_name_no_registry_serves()
 {
    let s = setup("image-airgap").await;
    let dir = scratch(&s.ns);
    let binary = stripped_binary();
    // `.invalid` resolves nowhere (RFC 2606): the kubelet can only run what the node already has.
    let tag = format!("airgap.invalid/sentry-tenants:{}", s.ns);
    let archive = dir.join("sentry-tenants.tar");
    let digest = export(&binary, &archive, &tag);

    s.plane
        .ctr(&["images", "import", archive.to_str().unwrap()]);
    let listed = s.plane.ctr(&["images", "list", &format!("name=={tag}")]);
    assert!(
        listed.contains(&digest),
        "imported as exported, {digest}: {listed}"
    );

    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    let values = Values {
        image: tag.clone(),
        clickhouse_url: ch.url.clone(),
        ..s.values()
    };
    s.install_with(ADMIN, values).await;
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let operator = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .unwrap();
    let container = &operator.items[0].spec.as_ref().unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some(tag.as_str()));
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));

    // The provisioning Job runs the same imported image: its pod is seen while it exists, and the
    // tenant's Active says it ran to success.
    s.apply(&tenant_with("acme", false, "Automatic"));
    let of_run = ListParams::default()
        .labels("app.kubernetes.io/component=provisioner,sentry.io/tenant=acme");
    let job_pod = wait_until("the provisioning Job's pod", async || {
        pods.list(&of_run).await.ok()?.items.into_iter().next()
    })
    .await;
    let job_container = &job_pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(job_container.image.as_deref(), Some(tag.as_str()));
    assert_eq!(
        job_container.image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    s.assert_no_forbidden();
    s.plane.ctr(&["images", "rm", &tag]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_exports_of_one_binary_have_one_digest_and_skopeo_and_podman_read_them() {
    let s = setup("image-export").await;
    let dir = scratch(&s.ns);
    let binary = stripped_binary();
    let first = export(
        &binary,
        &dir.join("a.tar"),
        "example.com/a/sentry-tenants:one",
    );
    let second = export(
        &binary,
        &dir.join("b.tar"),
        "example.com/b/sentry-tenants:two",
    );
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
    assert_eq!(first, second, "the tag is the archive's, not the image's");

    let inspect = |what: &str| -> serde_json::Value {
        let archive = format!("oci-archive:{}", dir.join("a.tar").display());
        let out = run(Command::new("skopeo").args(["inspect", what, &archive]));
        serde_json::from_str(&out).unwrap()
    };
    let config = inspect("--config");
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/sentry-tenants"])
    );
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.source"],
        "https://github.com/sentry-tenants/sentry-tenants"
    );
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );

    // podman loads it under its tag with the same digest, into a store of the test's own (under
    // /tmp: podman refuses a run root path longer than 50 characters).
    let store = std::env::temp_dir().join(format!("st-podman-{}", std::process::id()));
    let podman = |args: &[&str]| {
        run(Command::new("podman")
            .arg("--root")
            .arg(store.join("root"))
            .arg("--runroot")
            .arg(store.join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args))
    };
    let loaded = podman(&["load", "-i", dir.join("a.tar").to_str().unwrap()]);
    assert!(
        loaded.contains("Loaded image: example.com/a/sentry-tenants:one"),
        "{loaded}"
    );
    let inspected = podman(&[
        "image",
        "inspect",
        "example.com/a/sentry-tenants:one",
        "--format",
        "{{.Digest}} {{.Config.User}}",
    ]);
    assert_eq!(inspected.trim(), format!("{first} 65532:65532"));
    let _ = std::fs::remove_dir_all(&store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_images_root_filesystem_runs_the_binary_with_nothing_from_the_host() {
    let dir = scratch("rootfs");
    let binary = stripped_binary();
    let archive = dir.join("image.tar");
    export(&binary, &archive, "example.com/sentry-tenants:rootfs");
    let layout = dir.join("layout");
    std::fs::create_dir_all(&layout).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout));
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let blob = |digest: &str| layout.join("blobs").join(digest.replace(':', "/"));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(blob(index["manifests"][0]["digest"].as_str().unwrap())).unwrap(),
    )
    .unwrap();
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    for layer in manifest["layers"].as_array().unwrap() {
        let layer = blob(layer["digest"].as_str().unwrap());
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&layer)
            .arg("-C")
            .arg(&rootfs));
    }
    // chroot: the image's files are all the process sees, as the user the image names.
    let version = run(Command::new("chroot")
        .args(["--userspec=65532:65532"])
        .arg(&rootfs)
        .args(["/usr/local/bin/sentry-tenants", "version", "--client"]));
    assert_eq!(version, format!("client: {}\n", env!("CARGO_PKG_VERSION")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sentry-tenants install` as a person runs it, with `password` on stdin; (exit code, stderr).
fn install_cli(s: &Setup, binary: &Path, args: &[&str], password: &str) -> (Option<i32>, String) {
    use std::io::Write;
    let mut child = Command::new(binary)
        .arg("--kubeconfig")
        .arg(&s.plane.kubeconfig)
        .args(["install", "-n", &s.ns, "--timeout", "5m"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8(out.stderr).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_push_image_to_a_registry_with_basic_auth_and_a_private_ca_rolls_out_by_digest() {
    let s = setup("image-push").await;
    let dir = scratch(&s.ns);
    let registry = TestRegistry::start(
        &dir.join("registry"),
        &s.plane.host_address(),
        "pusher",
        "correct horse",
    )
    .await;
    s.plane.trust_registry(&registry.address, &registry.ca);
    let binary = stripped_binary();
    s.create_admin_secret(ADMIN).await;
    let (ok, _, err) = s.plane.kubectl(
        &[
            "-n",
            &s.ns,
            "create",
            "secret",
            "docker-registry",
            "regcred",
            &format!("--docker-server={}", registry.address),
            "--docker-username=pusher",
            "--docker-password=correct horse",
        ],
        None,
    );
    assert!(ok, "{err}");
    let repository = format!("{}/team/sentry-tenants", registry.address);
    let ca = registry.ca.to_str().unwrap();
    let args = [
        "--push-image",
        &repository,
        "--registry-username",
        "pusher",
        "--registry-password-stdin",
        "--registry-ca",
        ca,
        "--image-pull-secret",
        "regcred",
    ];

    // A wrong password: one line that says so, and nothing applied.
    let (code, stderr) = install_cli(&s, &binary, &args, "battery staple");
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "error: the registry {} refused the credentials of \"pusher\" (401 Unauthorized)\n",
            registry.address
        )
    );
    let deployments: Api<Deployment> = Api::namespaced(s.admin.clone(), &s.ns);
    assert!(
        deployments
            .get_opt("sentry-tenants")
            .await
            .unwrap()
            .is_none()
    );

    // The right one: pushed, pinned to the digest, pulled by the kubelet with the pull Secret.
    let (code, stderr) = install_cli(&s, &binary, &args, "correct horse");
    assert_eq!(code, Some(0), "{stderr}");
    let pushed = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Pushed "))
        .unwrap_or_else(|| panic!("no Pushed line: {stderr}"))
        .to_owned();
    let digest = pushed
        .strip_prefix(&format!("{repository}@"))
        .unwrap_or_else(|| panic!("not {repository} by digest: {pushed}"));
    assert_eq!(registry.manifest(&pushed).map(|m| m.is_empty()), Ok(false));
    // The image pushed is the one `image export` writes from the same binary.
    let exported = export(&binary, &dir.join("exported.tar"), "example.com/st:same");
    assert_eq!(digest, exported, "push and export make one image");
    let deployment = deployments.get("sentry-tenants").await.unwrap();
    let template = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        template.containers[0].image.as_deref(),
        Some(pushed.as_str())
    );
    let pods: Api<Pod> = Api::namespaced(s.admin.clone(), &s.ns);
    let operator = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=operator"))
        .await
        .unwrap();
    let pod = &operator.items[0];
    let pull_secrets = pod.spec.as_ref().unwrap().image_pull_secrets.clone();
    assert_eq!(
        pull_secrets.unwrap_or_default()[0].name,
        "regcred",
        "the ServiceAccount's pull Secret is on the pod"
    );
    let status = &pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert!(status.ready, "{status:?}");
    assert!(status.image_id.ends_with(digest), "{}", status.image_id);
    s.assert_no_forbidden();
    let _ = std::fs::remove_dir_all(&dir);
}
