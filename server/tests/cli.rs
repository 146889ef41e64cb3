//! The binary as a user runs it.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sentry-tenants"))
}

#[test]
fn crd_prints_exactly_the_committed_manifests() {
    let out = bin().arg("crd").output().unwrap();
    assert!(out.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/crds/crds.yaml"
    ))
    .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), committed);
}

#[test]
fn run_without_a_cluster_fails_with_one_clear_line() {
    let home = std::env::temp_dir().join("sentry-tenants-no-home");
    let out = bin()
        .arg("run")
        .env("KUBECONFIG", home.join("missing-kubeconfig"))
        .env("HOME", &home)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, no backtrace: {stderr}");
    assert!(
        lines[0].starts_with("error: no Kubernetes configuration found"),
        "{stderr}"
    );
}

#[test]
fn unknown_subcommand_is_rejected_with_usage() {
    let out = bin().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("unrecognized subcommand 'frobnicate'")
    );
}
