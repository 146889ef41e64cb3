//! `grant-credentials` against the real apiserver: a namespace's admin consents to copies of tenants'
//! credentials, and the apiserver's own access reviews — asked as the operator's ServiceAccount —
//! then say the provisioner may write Secrets there and nowhere else; someone who may only view the
//! namespace cannot consent; a revoke takes it back.

use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, ResourceAttributes, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use super::setup;

/// Whether `namespace` consents, as the operator can find out without ever being refused (a 403 for
/// a ServiceAccount is what security tooling alerts on): may it ask there at all (a
/// SelfSubjectAccessReview, which everyone may make), and if so, the apiserver's answer to "may the
/// provisioner of the install in `install` create Secrets here" (a LocalSubjectAccessReview there).
async fn consents(operator: &Client, install: &str, namespace: &str) -> bool {
    let may_ask = sentry_tenants::cluster::access_review(
        operator,
        Some(namespace),
        "authorization.k8s.io",
        ("create", "localsubjectaccessreviews"),
    )
    .await
    .expect("a self review is always answered");
    if !may_ask.allowed {
        return false;
    }
    let review = LocalSubjectAccessReview {
        metadata: ObjectMeta {
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{install}:sentry-tenants-provisioner"
            )),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some("create".into()),
                group: Some(String::new()),
                resource: Some("secrets".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        status: None,
    };
    let api: Api<LocalSubjectAccessReview> = Api::namespaced(operator.clone(), namespace);
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("the operator may ask in {namespace}, yet: {e}"));
    answer.status.expect("a review has an answer").allowed
}

/// `sentry-tenants --kubeconfig K grant-credentials ARGS…`: (exit code, stdout, stderr).
fn grant_credentials(
    s: &super::Setup,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(s.plane.project_binary())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("grant-credentials")
        .args(args)
        .output()
        .expect("run sentry-tenants");
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_admin_consents_with_grant_credentials_and_only_there() {
    let s = setup("consent").await;
    s.install_idle().await;
    let app = s.another_namespace("consent-app").await;
    let elsewhere = s.another_namespace("consent-other").await;
    let (operator, _) = s.as_account("sentry-tenants").await;

    assert!(!consents(&operator, &s.ns, &app.ns).await, "before consent");

    // Someone who may only view the namespace cannot consent for it: one error line, nothing made.
    app.account_bound_to("viewer", "view");
    let (_, viewer) = app.as_account("viewer").await;
    let (code, _, stderr) = grant_credentials(&s, &viewer, &[&app.ns, "-n", &s.ns, "--apply"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: cannot create RoleBinding sentry-tenants:{}:credential-copies in {}: forbidden (",
            s.ns, app.ns
        )) && stderr.contains("consent must come from someone who may write Secrets in that namespace"),
        "{stderr}"
    );
    let bindings: Api<RoleBinding> = Api::namespaced(s.admin.clone(), &app.ns);
    let ours = ListParams::default().labels(&format!("sentry.io/install-namespace={}", s.ns));
    assert!(bindings.list(&ours).await.unwrap().items.is_empty());

    // Its admin can.
    app.account_bound_to("owner", "admin");
    let (_, owner) = app.as_account("owner").await;
    let (code, _, stderr) = grant_credentials(&s, &owner, &[&app.ns, "-n", &s.ns, "--apply"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(bindings.list(&ours).await.unwrap().items.len(), 2);
    assert!(
        consents(&operator, &s.ns, &app.ns).await,
        "after the admin's consent"
    );
    assert!(
        !consents(&operator, &s.ns, &elsewhere.ns).await,
        "nowhere else"
    );

    // What it printed without --apply is what it applied.
    let (code, printed, _) = grant_credentials(&s, &owner, &[&app.ns, "-n", &s.ns]);
    assert_eq!(code, Some(0));
    let mut printed: Vec<RoleBinding> = serde_norway::Deserializer::from_str(&printed)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let mut applied = bindings.list(&ours).await.unwrap().items;
    applied.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    printed.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    assert_eq!(printed.len(), 2);
    for (p, a) in printed.iter().zip(&applied) {
        assert_eq!(
            (&p.metadata.name, &p.role_ref, &p.subjects),
            (&a.metadata.name, &a.role_ref, &a.subjects)
        );
    }

    // A revoke takes it back.
    let (code, _, stderr) = grant_credentials(&s, &owner, &[&app.ns, "-n", &s.ns, "--revoke"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !consents(&operator, &s.ns, &app.ns).await,
        "after the revoke"
    );
    // No request of our accounts was refused on the way: asking is never a 403.
    s.assert_no_forbidden();
}

/// Consent for an install that does not exist would bind roles that are not there: refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_to_an_install_that_is_not_there_is_refused() {
    let s = setup("consent-none").await;
    let (code, _, stderr) = grant_credentials(
        &s,
        &s.plane.kubeconfig,
        &[&s.ns, "-n", "no-such-install", "--apply"],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "error: no sentry-tenants install in namespace no-such-install (its ClusterRole sentry-tenants:no-such-install:credential-copies is missing): install it first, or name its namespace with -n"
    );
}
