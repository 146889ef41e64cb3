//! The README's install block, run as a reader runs it: each command of its `sh` block in the section
//! "In sixty seconds", by bash, on the real cluster, in the namespace it names (`sentry-tenants`).
//!
//! What stands in for the reader's machine, and nothing else changed in the commands:
//! - `REGISTRY` is an open registry of this test (TLS from a private CA, as a team's registry is) that
//!   the node's containerd trusts; the reader's machine trusts its CA too (`SSL_CERT_FILE`);
//! - `sentry-tenants` is this checkout's binary (stripped, as `image export` takes it), `kubectl` the
//!   cluster's, both first on `PATH`, with `KUBECONFIG` the cluster admin's;
//! - `sentry-tenants dashboard` gets `--no-browser --port <free port>` (no browser here, and 8080 may
//!   be taken), runs until its page answers, and is stopped.
//!
//! The ClickHouse URL stays the README's: nothing in these commands connects to ClickHouse.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};
use sentry_tenants_tests::processes::Owned;
use sentry_tenants_tests::registry::TestRegistry;
use sentry_tenants_tests::{doc_block, free_port, http_get, uninstall_quietly};

use crate::image::{scratch, stripped_binary};
use crate::setup_alone;

/// The namespace the README installs into.
const NS: &str = "sentry-tenants";

/// The block's commands: continuation lines joined, comments and blank lines dropped.
fn commands(block: &str) -> Vec<String> {
    let joined = block.replace("\\\n", " ");
    joined
        .lines()
        .map(|l| l.split(" # ").next().unwrap().trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn shell(command: &str, path: &str, env: &[(&str, &Path)]) -> Command {
    let mut bash = Command::new("bash");
    bash.args(["-euo", "pipefail", "-c", command])
        .env("PATH", path)
        .envs(env.iter().map(|(k, v)| (k, v.as_os_str())));
    bash
}

/// The README's namespace left by an earlier run on a reused cluster: uninstalled and deleted.
async fn without_the_readme_namespace(admin: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    if namespaces.get_opt(NS).await.unwrap().is_some() {
        uninstall_quietly(admin, NS).await;
        namespaces.delete(NS, &Default::default()).await.unwrap();
        wait_gone(&namespaces, NS).await;
    }
}

// Alone: the README's namespace and its dashboard are the only fixed names a test uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_install_block_runs_as_written() {
    let s = setup_alone("readme").await;
    without_the_readme_namespace(&s.admin).await;
    let dir = scratch("readme");
    let registry = TestRegistry::open(&dir.join("registry"), &s.plane.host_address()).await;
    s.plane.trust_registry(&registry.address, &registry.ca);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(stripped_binary(), bin.join("sentry-tenants")).unwrap();
    std::os::unix::fs::symlink(s.plane.bin("kubectl"), bin.join("kubectl")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env = [
        ("KUBECONFIG", s.plane.kubeconfig.as_path()),
        ("SSL_CERT_FILE", registry.ca.as_path()),
        // No docker or podman login of the host's is read: the registry is open.
        ("HOME", home.as_path()),
    ];

    let block = doc_block("README.md", "In sixty seconds", "sh");
    let commands = commands(&block);
    let programs: Vec<&str> = commands
        .iter()
        .map(|c| c.splitn(3, ' ').take(2).last().unwrap())
        .collect();
    assert_eq!(
        programs,
        ["create", "-n", "install", "check", "dashboard"],
        "the block's commands changed: {commands:#?}"
    );
    for command in &commands {
        let command = command.replace("REGISTRY", &registry.address);
        if command.starts_with("sentry-tenants dashboard") {
            let port = free_port();
            let mut dashboard = shell(
                &format!("exec {command} --no-browser --port {port}"),
                &path,
                &env,
            );
            let _running = Owned::spawn(
                dashboard
                    .stdout(std::process::Stdio::null())
                    .stderr(std::fs::File::create(dir.join("dashboard.log")).unwrap()),
            )
            .unwrap();
            let page = wait_until(
                "the dashboard's page through the port-forward",
                async || http_get(&format!("127.0.0.1:{port}"), "/").await.ok(),
            )
            .await;
            assert!(page.contains("sentry-tenants"), "{page}");
            continue;
        }
        let out = shell(&command, &path, &env).output().unwrap();
        assert!(
            out.status.success(),
            "`{command}` failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // install pushed this binary's image and rolled the operator out from it, by digest.
    let deployments: Api<Deployment> = Api::namespaced(s.admin.clone(), NS);
    let deployment = deployments.get("sentry-tenants").await.unwrap();
    let image = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone()
        .unwrap();
    let pushed = format!("{}/sentry-tenants@sha256:", registry.address);
    assert!(image.starts_with(&pushed), "{image}");
    assert_eq!(registry.manifest(&image).map(|m| m.is_empty()), Ok(false));
    assert_eq!(
        deployment.status.and_then(|s| s.ready_replicas),
        Some(1),
        "install waited for the rollout"
    );

    without_the_readme_namespace(&s.admin).await;
}
