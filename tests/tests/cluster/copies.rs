//! Copies of a tenant's credentials in the namespaces its applications run in, on the real control
//! plane with the operator installed (its pods and the provisioner's Jobs on the node): nothing is
//! written where the namespace's owner has not consented — the Tenant says so and no run is started
//! for it — and once they consent the copy appears, follows a rotation, and goes with its entry or
//! with its tenant; a Secret of that name that is not ours is left alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use sentry_tenants::crd::{RunJob, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_until, wait_until_within};
use sentry_tenants_tests::{app_copy_of, secret_data};

use crate::provision::{finished, tenant_in_phase};
use crate::{Setup, setup};

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

/// Patience for what waits on the operator's once-a-minute look at a namespace's consent (it does
/// not watch RoleBindings): two looks, a Job's run, and room for a loaded machine.
const LOOKS_AGAIN: std::time::Duration = std::time::Duration::from_secs(300);

fn tenant_with_copies(name: &str, copies: &[(&str, &str)]) -> String {
    let entries: String = copies
        .iter()
        .map(|(ns, secret)| {
            format!(
                "    - namespace: {ns}\n      secretName: {secret}\n      annotations:\n        reloader.example.com/match: \"true\"\n      labels:\n        example.com/team: payments\n"
            )
        })
        .collect();
    format!(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\nspec:\n  reclaimPolicy: Delete\n  credentials:\n    copies:\n{entries}"
    )
}

/// The `CredentialsDelivered` condition's (status, reason, message), once it is there.
async fn delivered_condition(s: &Setup, tenant: &str) -> Option<(String, String, String)> {
    let t = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns)
        .get(tenant)
        .await
        .ok()?;
    let c = t
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "CredentialsDelivered")?;
    Some((c.status, c.reason, c.message))
}

async fn wait_for_reason(s: &Setup, tenant: &str, reason: &str) -> (String, String) {
    wait_until(
        &format!("{tenant}'s CredentialsDelivered to be {reason}"),
        async || {
            let (status, r, message) = delivered_condition(s, tenant).await?;
            (r == reason).then_some((status, message))
        },
    )
    .await
}

/// What an application's copy must hold: the source's keys an application connects with.
pub async fn expected_copy(s: &Setup, tenant: &str) -> BTreeMap<String, Vec<u8>> {
    let source = Api::<Secret>::namespaced(s.admin.clone(), &s.ns)
        .get(&format!("{tenant}-clickhouse"))
        .await
        .unwrap();
    app_copy_of(&source)
}

async fn runs_of(s: &Setup, action: &str) -> Vec<String> {
    Api::<RunJob>::namespaced(s.admin.clone(), &s.ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.spec.action.as_str() == action)
        .filter_map(|r| r.metadata.name)
        .collect()
}

/// The operator's consent checks of `namespace` so far: its SelfSubjectAccessReviews asking whether
/// it may ask there (the audit policy logs their bodies; its other reviews ask other things).
fn consent_checks(s: &Setup, namespace: &str) -> usize {
    let operator = format!("system:serviceaccount:{}:sentry-tenants", s.ns);
    s.plane
        .audit_events()
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "selfsubjectaccessreviews")
        .filter(|e| e["user"]["username"] == operator.as_str())
        .filter(|e| {
            let asked = &e["requestObject"]["spec"]["resourceAttributes"];
            asked["resource"] == "localsubjectaccessreviews" && asked["namespace"] == namespace
        })
        .count()
}

/// The app namespace's owner (an account bound to `admin` there) consents to copies, as a
/// namespace's owner does: `grant-credentials --apply` with their own kubeconfig.
pub async fn owner_consents(s: &Setup, app: &Setup) {
    app.account_bound_to("owner", "admin");
    let (_, owner) = app.as_account("owner").await;
    grant_credentials(s, &owner, &app.ns);
}

fn grant_credentials(s: &Setup, kubeconfig: &std::path::Path, namespace: &str) {
    let out = std::process::Command::new(s.plane.project_binary())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["grant-credentials", namespace, "-n", &s.ns, "--apply"])
        .output()
        .expect("run sentry-tenants");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_waits_for_consent_then_follows_a_rotation_and_goes_with_its_entry() {
    let s = setup("copies").await;
    let app = s.another_namespace("copies-app").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    let app_secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &app.ns);

    // Without consent: the tenant is provisioned, says whose consent it waits for and how to give
    // it, and nothing is written or started for the copy.
    let waiting_since = std::time::Instant::now();
    s.apply(&tenant_with_copies("acme", &[(&app.ns, "acme-db")]));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let (status, message) = wait_for_reason(&s, "acme", "AwaitingConsent").await;
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!("{}/acme-db", app.ns))
            && message.contains(&format!(
                "sentry-tenants grant-credentials {} -n {}",
                app.ns, s.ns
            )),
        "{message}"
    );
    // The operator looks again once a minute, not in a loop: seen asking twice more, and having
    // started nothing.
    let before = consent_checks(&s, &app.ns);
    assert!(before >= 1, "the operator asked before it said it waits");
    wait_until_within("the operator to ask twice more", LOOKS_AGAIN, async || {
        (consent_checks(&s, &app.ns) >= before + 2).then_some(())
    })
    .await;
    assert!(
        runs_of(&s, "Deliver").await.is_empty(),
        "no Deliver run without consent"
    );
    assert!(app_secrets.get_opt("acme-db").await.unwrap().is_none());
    let minutes = waiting_since.elapsed().as_secs() / 60 + 1;
    let checks = consent_checks(&s, &app.ns);
    assert!(
        checks as u64 <= minutes + 3,
        "{checks} consent checks by the operator in {minutes} minutes of waiting"
    );

    // The namespace's admin consents: the copy appears, equal to the source's keys, marked as ours.
    owner_consents(&s, &app).await;
    let copy = wait_until_within("the copy in the app's namespace", LOOKS_AGAIN, async || {
        app_secrets.get_opt("acme-db").await.ok()?
    })
    .await;
    assert_eq!(secret_data(&copy), expected_copy(&s, "acme").await);
    let acme = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns)
        .get("acme")
        .await
        .unwrap();
    let labels = copy.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("sentry.io/tenant-uid"),
        acme.metadata.uid.as_ref()
    );
    assert_eq!(
        labels.get("example.com/team").map(String::as_str),
        Some("payments")
    );
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("reloader.example.com/match")
            .map(String::as_str),
        Some("true")
    );
    let first_hash = annotations["sentry.io/credentials-hash"].clone();
    let (status, _) = wait_for_reason(&s, "acme", "Delivered").await;
    assert_eq!(status, "True");
    assert_eq!(runs_of(&s, "Deliver").await.len(), 1, "one Deliver run");

    // A rotation updates the copy in the same run, with a new hash for tools that restart apps.
    s.apply(
        "apiVersion: sentry.io/v1alpha1\nkind: RunJob\nmetadata:\n  name: acme-rotate-1\nspec:\n  tenant: acme\n  action: Rotate\n",
    );
    let run = finished(&s, "acme-rotate-1").await;
    assert!(
        run.status.as_ref().unwrap().phase == Some(sentry_tenants::crd::RunPhase::Succeeded),
        "{:?}",
        run.status
    );
    let expected = expected_copy(&s, "acme").await;
    let copy = app_secrets.get("acme-db").await.unwrap();
    assert_eq!(
        secret_data(&copy),
        expected,
        "the copy holds the rotated password"
    );
    let hash = &copy.metadata.annotations.as_ref().unwrap()["sentry.io/credentials-hash"];
    assert_ne!(*hash, first_hash);
    wait_for_reason(&s, "acme", "Delivered").await;

    // The entry goes: so does the copy, and the condition.
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  reclaimPolicy: Delete\n");
    wait_until("the copy to go with its entry", async || {
        app_secrets
            .get_opt("acme-db")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    wait_until("the condition to go", async || {
        delivered_condition(&s, "acme")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(ch.refused().is_empty(), "refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_that_is_not_ours_is_left_alone_and_copies_go_with_their_tenant() {
    let s = setup("copies-conflict").await;
    let app = s.another_namespace("copies-taken").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    owner_consents(&s, &app).await;
    let app_secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &app.ns);
    let theirs: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "taken"},
        "stringData": {"password": "someone else's"},
    }))
    .unwrap();
    let theirs = app_secrets
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();

    s.apply(&tenant_with_copies(
        "acme",
        &[(&app.ns, "acme-db"), (&app.ns, "taken")],
    ));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let (status, message) = wait_for_reason(&s, "acme", "Conflict").await;
    assert_eq!(status, "False");
    assert!(message.contains(&format!("{}/taken", app.ns)), "{message}");
    let copy = wait_until("the copy that is free to write", async || {
        app_secrets.get_opt("acme-db").await.ok()?
    })
    .await;
    assert_eq!(secret_data(&copy), expected_copy(&s, "acme").await);
    let after = app_secrets.get("taken").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, theirs.metadata.resource_version,
        "their Secret untouched"
    );

    // The tenant goes: its copy with it, their Secret stays.
    let (ok, _, err) = s.plane.kubectl(
        &["delete", "tenant", "acme", "-n", &s.ns, "--wait=false"],
        None,
    );
    assert!(ok, "{err}");
    wait_until("the tenant to be gone", async || {
        Api::<Tenant>::namespaced(s.admin.clone(), &s.ns)
            .get_opt("acme")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(app_secrets.get_opt("acme-db").await.unwrap().is_none());
    assert!(app_secrets.get_opt("taken").await.unwrap().is_some());
    s.assert_no_forbidden();
}
