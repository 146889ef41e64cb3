//! What the apiserver itself does with our CRDs, as a user meets it through kubectl: the CEL rules
//! refuse bad names and changes to a run's tenant or action, and `kubectl get` shows our columns.

use sentry_tenants_tests::control_plane::wait_until;
use sentry_tenants_tests::doc_block;

use crate::setup;

/// The words of line `n` of kubectl's table output.
fn words(out: &str, n: usize) -> Vec<&str> {
    out.lines()
        .nth(n)
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

fn tenant(name: &str) -> String {
    format!(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\nspec:\n  displayName: Acme\n"
    )
}

fn run(name: &str, tenant: &str, action: &str) -> String {
    format!(
        "apiVersion: sentry.io/v1alpha1\nkind: RunJob\nmetadata:\n  name: {name}\nspec:\n  tenant: {tenant}\n  action: {action}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiserver_refuses_what_the_crd_rules_forbid_with_our_messages() {
    let s = setup("api-rules").await;
    s.install_idle().await;
    let apply = |yaml: String| {
        s.plane
            .kubectl(&["apply", "-n", &s.ns, "-f", "-"], Some(&yaml))
    };

    let (ok, _, err) = apply(tenant("acme"));
    assert!(ok, "a valid tenant is admitted: {err}");

    let name_rule = "metadata.name must be at most 40 characters of lowercase letters, digits and '-', start with a letter and end with a letter or digit";
    // Valid Kubernetes names that our rule refuses: a leading digit, and 41 characters.
    for bad in ["1acme".to_owned(), "a".repeat(41)] {
        let (ok, _, err) = apply(tenant(&bad));
        assert!(!ok, "{bad} admitted");
        assert!(err.contains(name_rule), "{bad}: {err}");
    }

    // A RunJob only for the test's sake: no operator runs here, so nothing acts on it.
    let (ok, _, err) = apply(run("acme-provision-1", "acme", "Provision"));
    assert!(ok, "{err}");
    let (ok, _, err) = apply(run("acme-provision-1", "globex", "Provision"));
    assert!(!ok && err.contains("spec.tenant is immutable"), "{err}");
    let (ok, _, err) = apply(run("acme-provision-1", "acme", "Suspend"));
    assert!(!ok && err.contains("spec.action is immutable"), "{err}");
    let (ok, _, err) = apply(run("acme-provision-1", "acme", "Delete"));
    assert!(
        !ok && err.contains("Unsupported value: \"Delete\""),
        "{err}"
    );

    // Copies of the credentials: one entry per place, and keys that are qualified names and not ours.
    let with_copies =
        |copies: &str| format!("{}  credentials:\n    copies:\n{copies}", tenant("acme"));
    let entry = |ns: &str, extra: &str| {
        format!("    - namespace: {ns}\n      secretName: acme-db\n{extra}")
    };
    let (ok, _, err) = apply(with_copies(&format!(
        "{}{}",
        entry("app", "      labels: {example.com/team: a}\n"),
        entry(
            "app2",
            "      annotations: {reloader.stakater.com/match: \"true\"}\n"
        )
    )));
    assert!(ok, "two copies with labels and annotations: {err}");
    let (ok, _, err) = apply(with_copies(&format!(
        "{}{}",
        entry("app", ""),
        entry("app", "")
    )));
    assert!(!ok && err.contains("Duplicate value"), "{err}");
    let labels_rule = "label keys must be qualified names (prefix/name), not sentry.io/ ones or app.kubernetes.io/managed-by";
    for key in [
        "sentry.io/tenant",
        "app.kubernetes.io/managed-by",
        "bad key",
    ] {
        let (ok, _, err) = apply(with_copies(&entry(
            "app",
            &format!("      labels: {{\"{key}\": x}}\n"),
        )));
        assert!(!ok && err.contains(labels_rule), "{key}: {err}");
    }
    let (ok, _, err) = apply(with_copies(&entry(
        "app",
        "      annotations: {sentry.io/credentials-hash: forged}\n",
    )));
    assert!(
        !ok && err
            .contains("annotation keys must be qualified names (prefix/name), not sentry.io/ ones"),
        "{err}"
    );
    let (ok, _, err) = apply(with_copies(&entry("App", "")));
    assert!(
        !ok && err.contains("spec.credentials.copies[0].namespace"),
        "{err}"
    );

    // A rotation schedule: durations CEL can read, every at least a minute, overlap shorter.
    let schedule =
        |fields: &str| format!("{}  credentials:\n    rotation:\n{fields}", tenant("acme"));
    let (ok, _, err) = apply(schedule("      every: 720h\n      overlap: 1h\n"));
    assert!(ok, "{err}");
    for (fields, refusal) in [
        ("      every: 30s\n", "every must be at least 1m"),
        (
            "      every: 1h\n      overlap: 1h\n",
            "overlap must be shorter than every",
        ),
        (
            "      every: 30d\n",
            "spec.credentials.rotation.every in body should match",
        ),
    ] {
        let (ok, _, err) = apply(schedule(fields));
        assert!(!ok && err.contains(refusal), "{fields}: {err}");
        assert!(!err.contains("type conversion error"), "{fields}: {err}");
    }

    // What a deleted credentials Secret calls for: one of the two words.
    let on_loss = |word: &str| {
        format!(
            "{}  credentials:\n    onSecretLoss: {word}\n",
            tenant("acme")
        )
    };
    for word in ["Report", "Rotate"] {
        let (ok, _, err) = apply(on_loss(word));
        assert!(ok, "{word}: {err}");
    }
    let (ok, _, err) = apply(on_loss("Revoke"));
    assert!(
        !ok && err.contains("spec.credentials.onSecretLoss")
            && err.contains(r#"supported values: "Report", "Rotate""#),
        "{err}"
    );
}

/// The quick start's YAML (the install guide) and the README's tenant are what the apiserver admits,
/// field for field: applied with strict field validation, where a field the CRDs do not have is refused
/// (the misspelt copy shows it would be).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_yaml_is_admitted_under_strict_field_validation() {
    let s = setup("docs-yaml").await;
    s.install_idle().await;
    let in_ns =
        |yaml: String| yaml.replace("namespace: sentry-tenants", &format!("namespace: {}", s.ns));
    let apply = |yaml: &str| {
        s.plane
            .kubectl(&["apply", "--validate=strict", "-f", "-"], Some(yaml))
    };

    let quick_start = in_ns(doc_block("docs/install.md", "Quick start", "yaml"));
    let (ok, out, err) = apply(&quick_start);
    assert!(ok, "{err}");
    for created in [
        "tenant.sentry.io/acme-corp created",
        "tenant.sentry.io/globex created",
        "runjob.sentry.io/globex-provision-1 created",
    ] {
        assert!(out.contains(created), "{created}: {out}");
    }
    // The README's tenant is the quick start's acme-corp, shorter: applied over it, the apiserver takes it.
    let readme = in_ns(doc_block("README.md", "In sixty seconds", "yaml"));
    let (ok, out, err) = apply(&readme);
    assert!(ok, "{err}");
    assert!(
        out.contains("tenant.sentry.io/acme-corp configured"),
        "{out}"
    );

    // The concepts guide's spec.credentials examples, each on a tenant of its own.
    for (heading, name) in [
        ("Copies of the credentials", "copies-doc"),
        ("Rotation on a schedule", "schedule-doc"),
        ("A deleted credentials Secret", "secret-loss-doc"),
    ] {
        let spec = doc_block("docs/concepts.md", heading, "yaml");
        let tenant = format!(
            "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\n  namespace: {}\n{spec}",
            s.ns
        );
        let (ok, out, err) = apply(&tenant);
        assert!(
            ok && out.contains(&format!("tenant.sentry.io/{name} created")),
            "{heading}: {err}"
        );
    }

    for yaml in [&quick_start, &readme] {
        let misspelt = yaml.replace("  suspended:", "  suspend:");
        assert_ne!(&misspelt, yaml, "the example sets spec.suspended");
        let (ok, _, err) = apply(&misspelt);
        assert!(
            !ok && err.contains(r#"unknown field "spec.suspend""#),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_shows_the_printer_columns_and_short_names() {
    let s = setup("columns").await;
    s.install_idle().await;
    let (ok, _, err) = s
        .plane
        .kubectl(&["apply", "-n", &s.ns, "-f", "-"], Some(&tenant("acme")));
    assert!(ok, "{err}");
    let (ok, _, err) = s.plane.kubectl(
        &["apply", "-n", &s.ns, "-f", "-"],
        Some(&run("acme-provision-1", "acme", "Provision")),
    );
    assert!(ok, "{err}");

    let (ok, out, err) = s.plane.kubectl(&["get", "tn", "-n", &s.ns], None);
    assert!(ok, "{err}");
    let header = words(&out, 0);
    assert_eq!(
        header,
        [
            "NAME",
            "PHASE",
            "READY",
            "SUSPENDED",
            "LOGINS",
            "DATABASE",
            "AGE"
        ],
        "{out}"
    );
    assert!(
        out.lines().nth(1).unwrap_or_default().starts_with("acme "),
        "{out}"
    );

    let (ok, out, err) = s.plane.kubectl(&["get", "rj", "-n", &s.ns], None);
    assert!(ok, "{err}");
    let header = words(&out, 0);
    assert_eq!(
        header,
        [
            "NAME", "TENANT", "ACTION", "PHASE", "JOB", "FINISHED", "AGE"
        ],
        "{out}"
    );
    let row = words(&out, 1);
    assert_eq!(row[..3], ["acme-provision-1", "acme", "Provision"], "{out}");

    // -o wide adds the Ready condition's message; the category lists both kinds at once.
    let (ok, out, err) = s
        .plane
        .kubectl(&["get", "tn", "-o", "wide", "-n", &s.ns], None);
    assert!(ok, "{err}");
    assert_eq!(words(&out, 0).last(), Some(&"MESSAGE"), "{out}");
    // The apiserver serves a CRD's new category in discovery a moment after the CRD changed.
    let listed = wait_until("the category sentry to list both kinds", async || {
        let (ok, out, _) = s
            .plane
            .kubectl(&["get", "sentry", "-o", "name", "-n", &s.ns], None);
        let mut listed: Vec<String> = out.lines().map(str::to_owned).collect();
        listed.sort_unstable();
        ok.then_some(listed)
    })
    .await;
    assert_eq!(
        listed,
        ["runjob.sentry.io/acme-provision-1", "tenant.sentry.io/acme"]
    );
}

/// Found on this tier: the apiserver refused a Tenant written without `spec:` ("spec: Required
/// value"), though every field of the spec is optional. Now it is admitted and defaulted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_no_spec_is_admitted_and_defaulted() {
    let s = setup("bare-tenant").await;
    s.install_idle().await;
    let bare = "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: bare\n";
    let (ok, _, err) = s
        .plane
        .kubectl(&["apply", "-n", &s.ns, "-f", "-"], Some(bare));
    assert!(ok, "{err}");
    let (ok, out, err) = s.plane.kubectl(
        &[
            "get",
            "tenant",
            "bare",
            "-n",
            &s.ns,
            "-o",
            "jsonpath={.spec}",
        ],
        None,
    );
    assert!(ok, "{err}");
    let spec: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        spec,
        serde_json::json!({"suspended": false, "provisioning": "Automatic", "reclaimPolicy": "Retain", "rotationGracePeriod": "1h"}),
        "defaulted by the apiserver"
    );
}
