//! The generated CRD schema itself rejects bad input — tested against the YAML an apiserver would get,
//! not just the Rust validators: OpenAPI keywords with `jsonschema`, CEL rules (including the
//! `oldSelf` transition rules) with `kube-cel`, the client-side evaluator of Kubernetes' CEL libraries.

use sentry_tenants::crd::{RunJob, Tenant};
use serde_json::{Value, json};

use sentry_tenants_tests::schema_errors as errors;

fn tenant(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "sentry.io/v1alpha1", "kind": "Tenant", "metadata": {"name": name}, "spec": spec})
}

fn run(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "sentry.io/v1alpha1", "kind": "RunJob", "metadata": {"name": name}, "spec": spec})
}

#[test]
fn valid_objects_pass() {
    assert_eq!(
        errors::<Tenant>(
            &tenant(
                "acme-corp",
                json!({"displayName": "Acme Corp", "suspended": false})
            ),
            None
        ),
        Vec::<String>::new()
    );
    let max = "a".repeat(40);
    assert_eq!(
        errors::<Tenant>(&tenant(&max, json!({})), None),
        Vec::<String>::new()
    );
    assert_eq!(
        errors::<RunJob>(
            &run(
                "acme-provision-1",
                json!({"tenant": "acme", "action": "Provision"})
            ),
            None
        ),
        Vec::<String>::new()
    );
}

#[test]
fn invalid_tenant_names_are_rejected_by_the_schema() {
    for bad in ["Acme", "1acme", "acme-", "ac_me", "ac.me", &"a".repeat(41)] {
        let errs = errors::<Tenant>(&tenant(bad, json!({})), None);
        assert!(
            errs.iter()
                .any(|e| e.contains("metadata.name must be at most 40")),
            "{bad:?} accepted: {errs:?}"
        );
    }
}

/// The apiserver's rule for `spec.displayName` (the CRD's pattern, as a JSON Schema validator reads
/// it) and the Rust rule the dashboard and the provisioner apply admit exactly the same characters,
/// over every Unicode scalar value.
#[test]
fn the_display_name_pattern_admits_exactly_what_the_rust_rule_admits() {
    use kube::CustomResourceExt;
    let crd = serde_json::to_value(Tenant::crd()).unwrap();
    let pattern =
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["displayName"]["pattern"]
            .as_str()
            .expect("displayName has a pattern")
            .to_owned();
    let schema = jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
    let differ: Vec<String> = ('\0'..=char::MAX)
        .filter(|c| {
            let one = c.to_string();
            schema.is_valid(&json!(one))
                != sentry_tenants::names::validate_display_name(&one).is_ok()
        })
        .map(|c| format!("U+{:04X}", c as u32))
        .collect();
    assert!(
        differ.is_empty(),
        "{} code points where the schema and the Rust rule disagree, first {:?}",
        differ.len(),
        &differ[..differ.len().min(10)]
    );
}

#[test]
fn overlong_or_control_character_display_names_are_rejected() {
    let errs = errors::<Tenant>(
        &tenant("acme", json!({"displayName": "x".repeat(129)})),
        None,
    );
    assert!(
        errs.iter()
            .any(|e| e.contains("/spec/displayName") && e.contains("longer than 128")),
        "{errs:?}"
    );
    let errs = errors::<Tenant>(&tenant("acme", json!({"displayName": "two\nlines"})), None);
    assert!(
        errs.iter().any(|e| e.contains("/spec/displayName")),
        "{errs:?}"
    );
    let errs = errors::<Tenant>(
        &tenant("acme", json!({"displayName": "é".repeat(128)})),
        None,
    );
    assert!(
        errs.is_empty(),
        "128 characters (not bytes) are allowed: {errs:?}"
    );
}

#[test]
fn runjob_action_is_one_of_the_eight_exactly() {
    let errors_for = |action: &str| {
        errors::<RunJob>(
            &run("acme-x-1", json!({"tenant": "acme", "action": action})),
            None,
        )
    };
    for action in [
        "Provision",
        "Suspend",
        "Resume",
        "Rotate",
        "Revoke",
        "SetLimits",
        "Deliver",
        "Deprovision",
    ] {
        let errs = errors_for(action);
        assert!(errs.is_empty(), "{action} refused: {errs:?}");
    }
    assert_eq!(
        sentry_tenants::crd::RunAction::ALL.len(),
        8,
        "a new action is added to the list above"
    );
    for action in ["Delete", "provision", "PROVISION", "Provision ", ""] {
        let errs = errors_for(action);
        assert!(
            errs.iter().any(|e| e.contains("/spec/action")),
            "{action:?} admitted: {errs:?}"
        );
    }
    let errs = errors::<RunJob>(&run("acme-x-1", json!({"tenant": "acme"})), None);
    assert!(
        errs.iter().any(|e| e.contains("action")),
        "required: {errs:?}"
    );
}

#[test]
fn runjob_numbers_are_bounded() {
    let cases = [
        ("ttlSecondsAfterFinished", json!(-1)),
        ("ttlSecondsAfterFinished", json!(604_801)),
        ("backoffLimit", json!(11)),
        ("backoffLimit", json!(-1)),
        ("activeDeadlineSeconds", json!(0)),
        ("activeDeadlineSeconds", json!(86_401)),
    ];
    for (field, value) in cases {
        let spec = json!({"tenant": "acme", "action": "Provision", field: value});
        let errs = errors::<RunJob>(&run("acme-provision-1", spec), None);
        assert!(
            errs.iter().any(|e| e.contains(&format!("/spec/{field}"))),
            "{field}={value} accepted"
        );
    }
}

#[test]
fn runjob_names_and_tenant_refs_are_validated() {
    let errs = errors::<RunJob>(
        &run(
            &"r".repeat(64),
            json!({"tenant": "acme", "action": "Provision"}),
        ),
        None,
    );
    assert!(errs.iter().any(|e| e.contains("DNS label")), "{errs:?}");
    let errs = errors::<RunJob>(
        &run("ok", json!({"tenant": "Bad_Name", "action": "Provision"})),
        None,
    );
    assert!(errs.iter().any(|e| e.contains("/spec/tenant")), "{errs:?}");
}

#[test]
fn runjob_tenant_and_action_are_immutable() {
    let old = run(
        "acme-provision-1",
        json!({"tenant": "acme", "action": "Provision"}),
    );
    let same = old.clone();
    assert!(errors::<RunJob>(&same, Some(&old)).is_empty());
    let moved = run(
        "acme-provision-1",
        json!({"tenant": "other", "action": "Provision"}),
    );
    assert!(
        errors::<RunJob>(&moved, Some(&old))
            .iter()
            .any(|e| e.contains("spec.tenant is immutable"))
    );
    let changed = run(
        "acme-provision-1",
        json!({"tenant": "acme", "action": "Suspend"}),
    );
    assert!(
        errors::<RunJob>(&changed, Some(&old))
            .iter()
            .any(|e| e.contains("spec.action is immutable"))
    );
    // Other fields stay editable.
    let ttl = run(
        "acme-provision-1",
        json!({"tenant": "acme", "action": "Provision", "ttlSecondsAfterFinished": 60}),
    );
    assert!(errors::<RunJob>(&ttl, Some(&old)).is_empty());
}
