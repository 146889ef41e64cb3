//! A deleted credentials Secret on the real control plane (rule 11): the real garbage collector
//! deletes the marker the provisioner wrote beside it, the operator — which may not read Secrets —
//! learns of it from its ConfigMap watch and says so on the `CredentialsSecret` condition, and starts
//! nothing until the spec says `onSecretLoss: Rotate`; then a Rotate run, run by a real Job, makes the
//! Secret again with a new password, the only one ClickHouse accepts, and the app's copy follows.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};

use crate::copies::{expected_copy, owner_consents};
use crate::provision::{finished, password, tenant_in_phase};
use crate::setup;
use sentry_tenants_tests::secret_data;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_secret_is_reported_and_made_again_only_when_the_spec_says_so() {
    let s = setup("secret-loss").await;
    let app = s.another_namespace("secret-loss-app").await;
    let user = s.ch_user("acme");
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    owner_consents(&s, &app).await;
    let tenant = |on_loss: &str| {
        format!(
            "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  credentials:\n    onSecretLoss: {on_loss}\n    copies:\n    - namespace: {}\n      secretName: acme-db\n",
            app.ns
        )
    };
    s.apply(&tenant("Report"));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let condition = async || {
        let status = tenants.get("acme").await.ok()?.status?;
        let c = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "CredentialsSecret")?;
        Some((c.reason, c.message))
    };
    wait_until("the Secret reported present", async || {
        condition().await.filter(|(reason, _)| reason == "Present")
    })
    .await;
    let old = password(&s, "acme").await;
    let markers: Api<ConfigMap> = Api::namespaced(s.admin.clone(), &s.ns);
    let old_marker = marker_name(&tenants).await;
    assert!(markers.get_opt(&old_marker).await.unwrap().is_some());

    let (deleted, _, err) = s
        .plane
        .kubectl(&["delete", "secret", "acme-clickhouse", "-n", &s.ns], None);
    assert!(deleted, "{err}");
    // The garbage collector, not the provisioner, deletes the marker.
    wait_gone(&markers, &old_marker).await;
    let (_, message) = wait_until("the deletion reported", async || {
        condition()
            .await
            .filter(|(reason, _)| reason == "SecretDeleted")
    })
    .await;
    assert!(
        message.starts_with("Secret acme-clickhouse was deleted"),
        "{message}"
    );
    // The reconcile that reported it decided on no run: never a rotation the spec did not ask for.
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    let rotations = async || {
        runs.list(&ListParams::default().labels("sentry.io/action=rotate"))
            .await
            .unwrap()
            .items
    };
    assert!(rotations().await.is_empty());
    let logs_in = async |password: &str| ch.query_as(&user, password, "SELECT 1").await.is_ok();
    assert!(
        logs_in(&old).await,
        "ClickHouse untouched: the old password still works"
    );

    s.apply(&tenant("Rotate"));
    let run = wait_until("the Rotate run rule 11 starts", async || {
        rotations().await.into_iter().next()
    })
    .await;
    let run = finished(&s, &run.metadata.name.unwrap()).await;
    let status = run.status.clone().unwrap();
    assert_eq!(status.phase, Some(RunPhase::Succeeded), "{status:#?}");
    let new = password(&s, "acme").await;
    assert_ne!(new, old);
    assert!(logs_in(&new).await, "the new password");
    assert!(
        !logs_in(&old).await,
        "the old one's hash went with the Secret: refused at once"
    );
    let copy = Api::<Secret>::namespaced(s.admin.clone(), &app.ns)
        .get("acme-db")
        .await
        .unwrap();
    assert_eq!(
        secret_data(&copy),
        expected_copy(&s, "acme").await,
        "the copy follows"
    );
    wait_until("the Secret reported present again", async || {
        condition().await.filter(|(reason, _)| reason == "Present")
    })
    .await;
    let new_marker = marker_name(&tenants).await;
    assert_ne!(new_marker, old_marker, "a marker of the new Secret");
    assert!(markers.get_opt(&new_marker).await.unwrap().is_some());
    assert_eq!(rotations().await.len(), 1, "one run made it again");
    assert!(ch.refused().is_empty(), "refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

/// The marker the tenant's status names: the Secret's name and its reported uid.
async fn marker_name(tenants: &Api<Tenant>) -> String {
    let status = tenants.get("acme").await.unwrap().status.unwrap();
    let uid = status.credentials.unwrap().secret_uid.unwrap();
    format!("{}.{uid}", status.click_house_secret_ref.unwrap().name)
}
