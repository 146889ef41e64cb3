//! The binary as a user runs it.

use std::io::Write as _;
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

#[test]
fn provision_dry_run_prints_the_statements_redacted_without_cluster_or_clickhouse() {
    let out = bin()
        .args(["provision-tenant", "acme-corp", "--dry-run"])
        .env("KUBECONFIG", "/nonexistent")
        .env("SENTRY_TENANTS_CLICKHOUSE_URL", "http://127.0.0.1:1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    // Offline the Tenant's uid is unknown: the owner role carries a zero uid.
    let role = "`sentry-tenants/sentry-tenants/acme-corp/00000000-0000-0000-0000-000000000000`";
    assert_eq!(
        lines,
        [
            "SELECT version();",
            "SELECT count() FROM system.users WHERE name = 'st4051f908cd_acme_corp_user';",
            "SELECT granted_role_name FROM system.role_grants WHERE user_name = 'st4051f908cd_acme_corp_user';",
            "SELECT count() FROM system.databases WHERE name = 'st4051f908cd_acme_corp';",
            "SELECT DISTINCT role_name FROM system.grants WHERE database = 'st4051f908cd_acme_corp';",
            &format!("CREATE ROLE IF NOT EXISTS {role};"),
            &format!("GRANT SHOW TABLES ON `st4051f908cd_acme_corp`.* TO {role};"),
            "CREATE DATABASE IF NOT EXISTS `st4051f908cd_acme_corp`;",
            "CREATE USER IF NOT EXISTS `st4051f908cd_acme_corp_user` IDENTIFIED WITH sha256_hash BY '<redacted>' HOST ANY DEFAULT DATABASE `st4051f908cd_acme_corp`;",
            &format!("GRANT {role} TO `st4051f908cd_acme_corp_user`;"),
            "GRANT SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW, DROP TABLE, DROP VIEW, TRUNCATE, OPTIMIZE, SHOW TABLES ON `st4051f908cd_acme_corp`.* TO `st4051f908cd_acme_corp_user`;",
            // Sent only when the user already existed (a retried run): its hosts are made to match the spec.
            "ALTER USER `st4051f908cd_acme_corp_user` HOST ANY;",
        ]
    );

    let out = bin()
        .args([
            "provision-tenant",
            "acme",
            "--action",
            "resume",
            "--clickhouse-prefix",
            "tenant",
            "--dry-run",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .ends_with("ALTER USER `tenant_acme_user` HOST ANY;\n")
    );

    // Deprovision prints what each reclaim policy sends.
    for (policy, want) in [
        (
            "retain",
            "SELECT version();\nSELECT count() FROM system.users WHERE name = 'tenant_acme_user';\nSELECT granted_role_name FROM system.role_grants WHERE user_name = 'tenant_acme_user';\nSELECT count() FROM system.databases WHERE name = 'tenant_acme';\nSELECT DISTINCT role_name FROM system.grants WHERE database = 'tenant_acme';\nALTER USER `tenant_acme_user` HOST NONE;\n",
        ),
        (
            "Delete",
            "SELECT version();\nSELECT count() FROM system.users WHERE name = 'tenant_acme_user';\nSELECT granted_role_name FROM system.role_grants WHERE user_name = 'tenant_acme_user';\nSELECT count() FROM system.databases WHERE name = 'tenant_acme';\nSELECT DISTINCT role_name FROM system.grants WHERE database = 'tenant_acme';\nDROP USER IF EXISTS `tenant_acme_user`;\nDROP SETTINGS PROFILE IF EXISTS `tenant_acme_profile`;\nDROP QUOTA IF EXISTS `tenant_acme_quota`;\nDROP DATABASE IF EXISTS `tenant_acme`;\nDROP ROLE IF EXISTS `sentry-tenants/sentry-tenants/acme/00000000-0000-0000-0000-000000000000`;\n",
        ),
    ] {
        let out = bin()
            .args([
                "provision-tenant",
                "acme",
                "--action",
                "deprovision",
                "--reclaim-policy",
                policy,
                "--clickhouse-prefix",
                "tenant",
                "--dry-run",
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), want, "{policy}");
    }

    // SetLimits with the limits to print, on a cluster: the checks first, ON CLUSTER in each change.
    let out = bin()
        .args([
            "provision-tenant",
            "acme",
            "--action",
            "setlimits",
            "--max-memory-per-query",
            "2Gi",
            "--queries-per-hour",
            "500",
            "--clickhouse-cluster",
            "prod",
            "--clickhouse-prefix",
            "tenant",
            "--dry-run",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "SELECT version();\n\
         SELECT count() FROM system.clusters WHERE cluster = 'prod';\n\
         SELECT count() FROM system.user_directories WHERE type = 'replicated';\n\
         SELECT count() FROM system.users WHERE name = 'tenant_acme_user';\n\
         SELECT granted_role_name FROM system.role_grants WHERE user_name = 'tenant_acme_user';\n\
         SELECT count() FROM system.databases WHERE name = 'tenant_acme';\n\
         SELECT DISTINCT role_name FROM system.grants WHERE database = 'tenant_acme';\n\
         CREATE SETTINGS PROFILE OR REPLACE `tenant_acme_profile` ON CLUSTER `prod` SETTINGS max_memory_usage = 2147483648 READONLY TO `tenant_acme_user`;\n\
         CREATE QUOTA OR REPLACE `tenant_acme_quota` ON CLUSTER `prod` FOR INTERVAL 1 hour MAX queries = 500 TO `tenant_acme_user`;\n"
    );
}

#[test]
fn provision_dry_run_still_validates_the_name_and_action() {
    let out = bin()
        .args(["provision-tenant", "Acme_Corp", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: tenant name \"Acme_Corp\" is invalid: use lowercase letters, digits and '-', start with a letter and end with a letter or digit\n"
    );
    let out = bin()
        .args([
            "provision-tenant",
            "acme",
            "--action",
            "delete",
            "--dry-run",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("expected one of Provision, Suspend, Resume")
    );
}

/// Every command's `--help`: exit 0, on stdout, no colour on a pipe, and the options a person
/// looks for, the global ones included.
#[test]
fn every_commands_help_documents_its_options() {
    let global = ["--kubeconfig", "--context", "--verbose", "--log-format"];
    let table: &[(&[&str], &[&str])] = &[
        (
            &["--help"],
            &[
                "install",
                "uninstall",
                "check",
                "dashboard",
                "run",
                "version",
                "completion",
                "provision-tenant",
                "crd",
            ],
        ),
        (
            &["install", "--help"],
            &[
                "--namespace",
                "--image",
                "--replicas",
                "--clickhouse-url",
                "--clickhouse-admin-secret",
                "--clickhouse-admin-password-stdin",
                "--clickhouse-admin-user",
                "--read-only-dashboard",
                "--aggregate-to-view-edit",
                "--network-policy",
                "--metrics-from-namespace",
                "--dry-run",
                "--output",
                "--wait",
                "--timeout",
                "--force-conflicts",
                "--push-image",
                "--registry-username",
                "--registry-password-stdin",
                "--registry-ca",
                "--plain-http",
                "--image-pull-secret",
                "the only ClusterRoles sentry-tenants ever creates",
                "The safe choice on a shared cluster",
            ],
        ),
        (
            &["uninstall", "--help"],
            &["--namespace", "--delete-crds", "--yes", "--timeout"],
        ),
        (
            &["check", "--help"],
            &[
                "--namespace",
                "--pre",
                "--clickhouse-admin-secret",
                "--output",
            ],
        ),
        (
            &["dashboard", "--help"],
            &["--namespace", "--port", "--no-browser"],
        ),
        (
            &["version", "--help"],
            &["--namespace", "--client", "--output"],
        ),
        (&["completion", "--help"], &["bash", "zsh", "fish"]),
        (&["crd", "--help"], &[]),
        (
            &["image", "export", "--help"],
            &["--output", "--tag", "ctr -n k8s.io images import"],
        ),
        (
            &["image", "push", "--help"],
            &[
                "--username",
                "--password-stdin",
                "--registry-ca",
                "--plain-http",
                "--index",
            ],
        ),
        (
            &["run", "--help"],
            &[
                "--namespace",
                "--image",
                "--probe-addr",
                "[default: [::]:8081]",
                "--dashboard-addr",
                "--read-only-dashboard",
                "--lease-seconds",
                "--clickhouse-url",
                "--clickhouse-admin-secret",
            ],
        ),
        (
            &["provision-tenant", "--help"],
            &[
                "--action",
                "--namespace",
                "--clickhouse-url",
                "--clickhouse-auth",
                "--rotate",
                "--dry-run",
            ],
        ),
    ];
    let mut missing = Vec::new();
    for (args, wanted) in table {
        let out = bin().args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(out.stderr.is_empty(), "{args:?}");
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(!help.contains('\u{1b}'), "{args:?}: colour on a pipe");
        let globals: &[&str] = if args[0] == "--help" { &[] } else { &global };
        for word in wanted.iter().chain(globals) {
            if !help.contains(word) {
                missing.push(format!("{args:?}: {word}"));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn install_dry_run_renders_the_bundle_without_a_cluster() {
    let out = bin()
        .args([
            "install",
            "--dry-run",
            "-o",
            "yaml",
            "--namespace",
            "tenants-prod",
            "--replicas",
            "2",
        ])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    // Read by a YAML parser of the test's own, not by the bundle's checker.
    let kinds: Vec<String> = serde_norway::Deserializer::from_str(&yaml)
        .map(|doc| <serde_json::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|doc| !doc.is_null())
        .map(|doc| {
            format!(
                "{} {}",
                doc["kind"].as_str().unwrap(),
                doc["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition tenants.sentry.io",
            "CustomResourceDefinition runjobs.sentry.io",
            "Namespace tenants-prod",
            "ServiceAccount sentry-tenants",
            "ServiceAccount sentry-tenants-provisioner",
            "Role sentry-tenants",
            "RoleBinding sentry-tenants",
            "Role sentry-tenants-provisioner",
            "RoleBinding sentry-tenants-provisioner",
            "ConfigMap sentry-tenants",
            "Deployment sentry-tenants",
            "Service sentry-tenants",
            "ClusterRole sentry-tenants:tenants-prod:credential-copies",
            "ClusterRole sentry-tenants:tenants-prod:credential-consent",
        ]
    );
    assert!(yaml.contains("namespace: \"tenants-prod\""));
    // The default prefix is the namespace's: `st` and FNV-1a of "tenants-prod", by Python as in names.rs.
    assert!(yaml.contains("SENTRY_TENANTS_CLICKHOUSE_PREFIX: \"sta45ac7c109\""));
    assert!(yaml.ends_with('\n'));
}

#[test]
fn install_rejects_bad_values_before_touching_anything() {
    let out = bin()
        .args(["install", "--image", "img:1 ; rm", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: --image \"img:1 ; rm\" is not a valid image reference (e.g. registry.example.com/team/sentry-tenants:v1.2.3)\n"
    );
}

#[test]
fn metrics_from_namespace_needs_network_policy_and_a_namespace_name() {
    let run = |args: &[&str]| {
        let out = bin()
            .args(["install", "--dry-run"])
            .args(args)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stderr).unwrap())
    };
    let (code, err) = run(&["--metrics-from-namespace", "monitoring"]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with(
            "error: the following required arguments were not provided:\n  --network-policy\n"
        ),
        "{err}"
    );
    assert_eq!(
        run(&["--network-policy", "--metrics-from-namespace", "Monitoring"]),
        (
            Some(1),
            "error: --metrics-from-namespace \"Monitoring\" is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)\n".to_owned()
        )
    );
}

/// A kubeconfig (file named `tag`) for a cluster at `127.0.0.1:port`.
fn kubeconfig_for(port: u16, tag: &str) -> std::path::PathBuf {
    let path =
        std::env::temp_dir().join(format!("sentry-tenants-{tag}-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    path
}

/// A kubeconfig naming a port where nothing listens: the cluster is "unreachable".
fn unreachable_kubeconfig() -> std::path::PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    kubeconfig_for(port, "unreachable")
}

#[test]
fn an_unreachable_cluster_is_one_line_and_a_failure_for_every_command() {
    let kubeconfig = unreachable_kubeconfig();
    for args in [
        &["install", "--timeout", "5s"][..],
        &["uninstall"],
        &["check"],
        &["check", "--pre"],
        &["dashboard", "--no-browser"],
        &["version"],
        &["run"],
    ] {
        let out = bin()
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        let said = format!("{stdout}{stderr}");
        assert!(
            said.to_lowercase().contains("unreachable"),
            "{args:?}: {said}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("stack backtrace"),
            "{args:?}: {stderr}"
        );
        // `check` reports on stdout, line by line; the others fail with exactly one line, no log before it.
        if args[0] != "check" {
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        }
    }
}

#[test]
fn deleting_crds_needs_a_confirmation() {
    let out = bin()
        .args(["uninstall", "--delete-crds"])
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("Refusing without confirmation: re-run with --yes"),
        "{stderr}"
    );
}

/// A kubeconfig naming a local port that counts the connections made to it: a malformed flag must be
/// refused before the binary contacts anything.
struct CountingCluster {
    kubeconfig: std::path::PathBuf,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingCluster {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = std::sync::Arc::clone(&connections);
        std::thread::spawn(move || {
            // Counted, then dropped: the client sees a closed connection.
            for _ in listener.incoming() {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let kubeconfig = kubeconfig_for(port, "counting");
        Self {
            kubeconfig,
            connections,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Malformed input sweep, CLI part: every bad flag gets its exact one-line error (clap's usage error,
/// exit 2, for a value of the wrong type or range; ours, exit 1, for a value of the right type that
/// breaks a rule), and the binary never connects to the cluster.
#[test]
fn every_malformed_flag_gets_its_exact_error_before_anything_is_contacted() {
    let cluster = CountingCluster::start();
    let table: &[(&[&str], i32, &str)] = &[
        (
            &["install", "--namespace", "Bad_NS"],
            1,
            "error: --namespace \"Bad_NS\" is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)",
        ),
        (
            &["install", "--image", "img:1 ; rm"],
            1,
            "error: --image \"img:1 ; rm\" is not a valid image reference (e.g. registry.example.com/team/sentry-tenants:v1.2.3)",
        ),
        (
            &["install", "--replicas", "0"],
            2,
            "error: invalid value '0' for '--replicas <REPLICAS>': 0 is not in 1..=10",
        ),
        (
            &["install", "--replicas", "many"],
            2,
            "error: invalid value 'many' for '--replicas <REPLICAS>': invalid digit found in string",
        ),
        (
            &["install", "--clickhouse-url", "ftp://x"],
            1,
            "error: --clickhouse-url \"ftp://x\" must be an http:// or https:// URL without spaces or quotes",
        ),
        (
            &[
                "install",
                "--clickhouse-url",
                "http://admin:s3cret@clickhouse:8123",
            ],
            1,
            "error: --clickhouse-url must not carry credentials (user:password@): it is stored in a ConfigMap and shown by `kubectl get`; put them in the admin Secret",
        ),
        (
            &["install", "--clickhouse-admin-secret", "Bad_Secret"],
            1,
            "error: --clickhouse-admin-secret \"Bad_Secret\" is not a valid Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)",
        ),
        (
            &["install", "--timeout", "forever"],
            2,
            "error: invalid value 'forever' for '--timeout <TIMEOUT>': invalid duration \"forever\": use a Go duration such as 90s, 5m, 1m30s or 1h",
        ),
        (
            &["install", "-o", "json"],
            2,
            "error: invalid value 'json' for '--output <OUTPUT>'",
        ),
        (
            &["install", "--dry-run", "--clickhouse-admin-password-stdin"],
            1,
            "error: --clickhouse-admin-password-stdin cannot be used with --dry-run: a printed bundle must not carry a password; create the Secret with your secrets tooling",
        ),
        (
            &["install", "--clickhouse-admin-password-stdin"],
            1,
            "error: --clickhouse-admin-password-stdin read no password from standard input (pipe it in: printf '%s' \"$PASSWORD\" | sentry-tenants install …)",
        ),
        (
            &[
                "install",
                "--clickhouse-admin-password-stdin",
                "--clickhouse-admin-user",
                "",
            ],
            1,
            "error: --clickhouse-admin-user must be a non-empty name without control characters",
        ),
        (
            &["install", "--clickhouse-admin-user", "root"],
            2,
            "error: the following required arguments were not provided:",
        ),
        (
            &["check", "--pre", "--clickhouse-admin-secret", "Bad_Secret"],
            1,
            "error: --clickhouse-admin-secret \"Bad_Secret\" is not a valid Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)",
        ),
        (
            &["check", "-n", "Bad_NS"],
            1,
            "error: --namespace \"Bad_NS\" is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)",
        ),
        (
            &["run", "--namespace", "Bad_NS"],
            1,
            "error: --namespace \"Bad_NS\" is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)",
        ),
        (
            &["run", "--image", "a b"],
            1,
            "error: --image \"a b\" is not a valid image reference (e.g. registry.example.com/team/sentry-tenants:v1.2.3)",
        ),
        (
            &["run", "--provisioner-service-account", "Bad SA"],
            1,
            "error: --provisioner-service-account \"Bad SA\" is not a valid ServiceAccount name (lowercase letters, digits, '-' and '.', at most 253 characters)",
        ),
        (
            &["run", "--clickhouse-url", "clickhouse:8123"],
            1,
            "error: --clickhouse-url \"clickhouse:8123\" must be an http:// or https:// URL without spaces or quotes",
        ),
        (
            &["run", "--tantivy-root", "relative/path"],
            1,
            "error: --tantivy-root \"relative/path\" must be an absolute path without spaces or quotes",
        ),
        (
            &["run", "--lease-seconds", "0"],
            2,
            "error: invalid value '0' for '--lease-seconds <SECONDS>': 0 is not in 3..=300",
        ),
        (
            &["run", "--dashboard-addr", "nowhere"],
            2,
            "error: invalid value 'nowhere' for '--dashboard-addr <DASHBOARD_ADDR>': invalid socket address syntax",
        ),
        (
            &["run", "--read-only-dashboard", "maybe"],
            2,
            "error: invalid value 'maybe' for '--read-only-dashboard [<READ_ONLY_DASHBOARD>]'",
        ),
        (
            &["provision-tenant", ""],
            1,
            "error: tenant name must not be empty",
        ),
        (
            &["provision-tenant", "Acme_Corp"],
            1,
            "error: tenant name \"Acme_Corp\" is invalid: use lowercase letters, digits and '-', start with a letter and end with a letter or digit",
        ),
        (
            &["provision-tenant", "acme", "--action", "delete"],
            2,
            "error: invalid value 'delete' for '--action <ACTION>': unknown action \"delete\": expected one of Provision, Suspend, Resume, Deprovision, Rotate, Revoke, SetLimits, Deliver",
        ),
        (
            &["install", "--dry-run", "--clickhouse-prefix", "prod_eu"],
            1,
            "error: --clickhouse-prefix \"prod_eu\" is not a ClickHouse name prefix (1 to 24 lowercase letters and digits, starting with a letter; no '_')",
        ),
        (
            &["provision-tenant", "acme", "--clickhouse-prefix", "Prod"],
            2,
            "error: invalid value 'Prod' for '--clickhouse-prefix <CLICKHOUSE_PREFIX>': ClickHouse prefix \"Prod\" is invalid: use 1 to 24 lowercase letters and digits, starting with a letter (no '_': it separates the prefix from the tenant's name)",
        ),
        (
            &["install", "--dry-run", "--clickhouse-cluster", "a b"],
            1,
            "error: --clickhouse-cluster \"a b\" is not a ClickHouse cluster name (letters, digits, '_', '-', '.', starting with a letter or '_')",
        ),
        (
            &[
                "install",
                "--dry-run",
                "--clickhouse-ca-configmap",
                "Corp CA",
            ],
            1,
            "error: --clickhouse-ca-configmap \"Corp CA\" is not a valid ConfigMap name (lowercase letters, digits, '-' and '.', at most 253 characters)",
        ),
        (
            &["provision-tenant", "acme", "--clickhouse-cluster", "a b"],
            2,
            "error: invalid value 'a b' for '--clickhouse-cluster <CLICKHOUSE_CLUSTER>': \"a b\" is not a ClickHouse cluster name (letters, digits, '_', '-', '.', starting with a letter or '_')",
        ),
        (
            &[
                "provision-tenant",
                "acme",
                "--dry-run",
                "--max-memory-per-query",
                "4GB",
            ],
            2,
            "error: invalid value '4GB' for '--max-memory-per-query <MAX_MEMORY_PER_QUERY>': max memory per query \"4GB\" must be 1 to 9999 followed by Mi or Gi (512Mi, 4Gi), or empty for no limit",
        ),
        (
            &[
                "provision-tenant",
                "acme",
                "--dry-run",
                "--queries-per-hour",
                "0",
            ],
            2,
            "error: invalid value '0' for '--queries-per-hour <QUERIES_PER_HOUR>': 0 is not in 1..=100000000",
        ),
        (
            &["provision-tenant", "acme", "--reclaim-policy", "keep"],
            2,
            "error: invalid value 'keep' for '--reclaim-policy <RECLAIM_POLICY>': unknown reclaim policy \"keep\": expected Retain or Delete",
        ),
        (
            &["provision-tenant", "acme", "--clickhouse-url", "ftp://x"],
            1,
            "error: --clickhouse-url \"ftp://x\" must be an http:// or https:// URL without spaces or quotes",
        ),
        (
            &["provision-tenant", "acme", "--namespace", "ns.with.dots"],
            1,
            "error: --namespace \"ns.with.dots\" is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)",
        ),
        (
            &["uninstall", "--delete-crds"],
            1,
            "error: This deletes the Tenant and RunJob CRDs and every tenant object in the cluster (ClickHouse data is not touched). Refusing without confirmation: re-run with --yes",
        ),
        (
            &["check", "--bogus"],
            2,
            "error: unexpected argument '--bogus' found",
        ),
        (&["explode"], 2, "error: unrecognized subcommand 'explode'"),
    ];
    let mut wrong = Vec::new();
    for (args, code, first_line) in table {
        let before = cluster.connections();
        let out = bin()
            .args(*args)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let said = stderr.lines().next().unwrap_or_default();
        let contacted = cluster.connections() - before;
        let coloured = stderr.contains('\u{1b}');
        if out.status.code() != Some(*code) || said != *first_line || contacted > 0 || coloured {
            wrong.push(format!(
                "{args:?}: exit {:?}, {said:?}, {contacted} connections, colour {coloured}; want exit {code}, {first_line:?}",
                out.status.code()
            ));
        }
    }
    // The control: a well-formed command does reach the counting port.
    let refused = cluster.connections();
    let _ = bin()
        .args(["check"])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .unwrap();
    assert!(
        cluster.connections() > refused,
        "the counting cluster saw no connection"
    );
    // Past the harness's capture, so CI's log shows it for a passing test too.
    let _ = writeln!(
        std::io::stderr(),
        "input sweep (CLI flags): cases={} wrong={} connections={}",
        table.len(),
        wrong.len(),
        refused
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn stderr_lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn an_explicit_kubeconfig_that_cannot_be_read_is_named_in_one_line() {
    let out = bin()
        .args(["--kubeconfig", "/nonexistent/kubeconfig", "run"])
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_lines(&out),
        [
            "error: cannot read the kubeconfig /nonexistent/kubeconfig: No such file or directory (os error 2)"
        ]
    );
}

#[test]
fn kubeconfig_and_context_flags_choose_the_cluster_and_a_missing_context_is_named() {
    let path = unreachable_kubeconfig();
    let kubeconfig = path.to_str().unwrap();
    let with_env = |kubeconfig_env: &str, args: &[&str]| {
        bin()
            .args(args)
            .env("KUBECONFIG", kubeconfig_env)
            .output()
            .unwrap()
    };
    let no_context = format!(
        "error: the kubeconfig {kubeconfig} has no context \"nope\" (`kubectl config get-contexts` lists them)"
    );

    let out = with_env(
        "/nonexistent",
        &["check", "--kubeconfig", kubeconfig, "--context", "nope"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr_lines(&out), std::slice::from_ref(&no_context));

    // The flags win over KUBECONFIG (which names nothing): the run reaches the kubeconfig's server,
    // where nothing listens.
    let out = with_env(
        "/nonexistent",
        &["run", "--kubeconfig", kubeconfig, "--context", "c"],
    );
    assert_eq!(out.status.code(), Some(1));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "no log line before the error: {lines:#?}");
    assert!(
        lines[0].starts_with("error: cannot list tenants: the Kubernetes API is unreachable ("),
        "{lines:#?}"
    );

    // -v shows the failed request underneath, still without colour on a pipe.
    let out = with_env(
        "/nonexistent",
        &["-v", "run", "--kubeconfig", kubeconfig, "--context", "c"],
    );
    let lines = stderr_lines(&out);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("kube_client") && l.contains("failed with error")),
        "{lines:#?}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("error: cannot list tenants: "),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.contains('\x1b')), "{lines:#?}");

    // --context alone reads KUBECONFIG.
    let out = with_env(kubeconfig, &["run", "--context", "nope"]);
    assert_eq!(stderr_lines(&out), [no_context]);
}

#[test]
fn bash_completion_completes_subcommands_and_global_flags() {
    let script = bin().args(["completion", "bash"]).output().unwrap();
    assert!(script.status.success());
    let dir = std::env::temp_dir().join("sentry-tenants-cli-completion");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sentry-tenants.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    // What bash does on <TAB>: the registered function fills COMPREPLY for the words typed so far.
    let complete = |words: &str| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; spec=$(complete -p sentry-tenants); f=${{spec#*-F }}; f=${{f%% *}}; \
                 COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
                 \"$f\" sentry-tenants \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
                 printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                path.display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut got: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        got.sort();
        got
    };
    assert_eq!(complete("sentry-tenants prov"), ["provision-tenant"]);
    assert_eq!(complete("sentry-tenants ch"), ["check"]);
    // A subcommand's own options, which clap_complete's script misses for a hyphenated binary name.
    assert_eq!(complete("sentry-tenants check --p"), ["--pre"]);
    assert_eq!(
        complete("sentry-tenants provision-tenant acme --act"),
        ["--action"]
    );
    assert_eq!(complete("sentry-tenants check --kube"), ["--kubeconfig"]);
}

#[test]
fn completion_scripts_exist_for_zsh_and_fish() {
    for (shell, first_line) in [
        ("zsh", "#compdef sentry-tenants"),
        (
            "fish",
            "# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.",
        ),
    ] {
        let out = bin().args(["completion", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert_eq!(script.lines().next(), Some(first_line), "{shell}");
        assert!(script.contains("provision-tenant"), "{shell}");
    }
}

#[test]
fn version_prints_the_client_then_the_server_or_why_not() {
    let version = env!("CARGO_PKG_VERSION");
    for (args, want) in [
        (&["version", "--client"][..], format!("client: {version}\n")),
        (
            &["version", "--client", "-o", "json"],
            format!("{{\n  \"client\": {{\n    \"version\": \"{version}\"\n  }}\n}}\n"),
        ),
        (
            &["version", "--client", "-o", "yaml"],
            format!("client:\n  version: {version}\n"),
        ),
    ] {
        let out = bin().args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert_eq!(String::from_utf8(out.stdout).unwrap(), want, "{args:?}");
    }

    // The client's line shows even when the cluster does not answer; the failure is one line.
    let path = unreachable_kubeconfig();
    let out = bin()
        .args(["version", "--kubeconfig", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stdout.clone()).unwrap(),
        format!("client: {version}\n")
    );
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].starts_with(
            "error: cannot get the operator Deployment: the Kubernetes API is unreachable ("
        ),
        "{lines:#?}"
    );
}

#[test]
fn check_reports_as_json_with_the_same_exit_code() {
    let kubeconfig = unreachable_kubeconfig();
    let out = bin()
        .args(["check", "-o", "json"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], false);
    let first = &report["checks"][0];
    assert_eq!(first["ok"], false);
    assert!(
        first["what"]
            .as_str()
            .unwrap()
            .starts_with("cannot get CRD tenants.sentry.io: the Kubernetes API is unreachable ("),
        "{report:#}"
    );
    assert_eq!(first["hint"], "check your kubeconfig");
}

/// An expired cloud login: the kubeconfig's credential plugin exits non-zero. The error names the
/// plugin and what it said, in one line, before anything is sent to the cluster.
#[test]
fn a_failing_credential_plugin_is_named_with_what_it_said() {
    let dir = std::env::temp_dir().join(format!("sentry-tenants-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        r#"apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: sh
      args: ["-c", "echo 'ERROR: Reauthentication failed. cannot prompt during non-interactive execution.' >&2; exit 1"]
      interactiveMode: Never
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"#,
    )
    .unwrap();
    let expected = "error: the kubeconfig's credential plugin `sh -c echo 'ERROR: Reauthentication failed. cannot prompt during non-interactive execution.' >&2; exit 1` failed (exit status: 1: ERROR: Reauthentication failed. cannot prompt during non-interactive execution.): log in again (an expired cloud login is the usual cause), or run it yourself to see why";
    for args in [&["install"][..], &["check"], &["uninstall"], &["version"]] {
        let out = bin()
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(stderr_lines(&out), [expected], "{args:?}");
    }
}

#[test]
fn install_push_image_dry_run_pins_the_digest_image_export_gives_without_pushing() {
    let dir = std::env::temp_dir().join(format!("st-cli-push-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let export = bin()
        .args(["image", "export", "-o"])
        .arg(dir.join("image.tar"))
        .output()
        .unwrap();
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let digest = String::from_utf8(export.stdout).unwrap().trim().to_owned();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    // The registry does not exist: a dry run never reaches for it.
    let out = bin()
        .args([
            "install",
            "--push-image",
            "registry.invalid/team/sentry-tenants:v9",
        ])
        .args(["--dry-run", "-o", "yaml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    let pinned = format!("registry.invalid/team/sentry-tenants@{digest}");
    let images: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .chain(
            yaml.lines()
                .filter_map(|l| l.trim().strip_prefix("SENTRY_TENANTS_IMAGE: ")),
        )
        .collect();
    assert_eq!(
        images.len(),
        2,
        "the Deployment's and the Jobs' (ConfigMap): {yaml}"
    );
    for image in images {
        assert_eq!(image.trim_matches(['"', '\'']), pinned);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn push_image_refuses_a_repository_without_its_registry_and_a_second_image() {
    let out = bin()
        .args(["image", "push", "team/sentry-tenants"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: \"team/sentry-tenants\" is not where to push: registry[:port]/repository[:tag], the registry first (docker.io/team/sentry-tenants for Docker Hub), lowercase, no @digest\n"
    );
    let out = bin()
        .args([
            "install",
            "--push-image",
            "r.example.com/st",
            "--image",
            "r.example.com/st:v1",
        ])
        .args(["--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap refuses both");
    assert!(
        String::from_utf8(out.stderr)
            .unwrap()
            .contains("cannot be used with")
    );
}
