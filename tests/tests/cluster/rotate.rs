//! Rotation on the real control plane: a Rotate RunJob applied with kubectl, run by a real Job whose
//! pod the node runs, against the ClickHouse HTTP stand-in answering as a current server
//! (several passwords per user): during the grace period old and new password both log in, after it
//! only the new one; a second rotation keeps the first one's old password too; a Revoke refuses every
//! other password at once and ends the tenant's queries.

use kube::api::Api;
use sentry_tenants::crd::{RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

use crate::provision::{finished, password, tenant_in_phase};
use crate::setup;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotate_run_keeps_the_old_password_for_the_grace_period_then_only_the_new() {
    let s = setup("rotate").await;
    let user = s.ch_user("acme");
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    s.apply(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  rotationGracePeriod: 30s\n",
    );
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let old = password(&s, "acme").await;

    s.apply(
        "apiVersion: sentry.io/v1alpha1\nkind: RunJob\nmetadata:\n  name: acme-rotate-1\nspec:\n  tenant: acme\n  action: Rotate\n",
    );
    let run = finished(&s, "acme-rotate-1").await;
    let status = run.status.clone().unwrap();
    assert_eq!(status.phase, Some(RunPhase::Succeeded), "{status:#?}");
    let new = password(&s, "acme").await;
    assert_ne!(new, old, "the Secret holds a new password");
    // Within the 30 s grace (this check follows the run's end by moments): both log in.
    assert!(ch.may_log_in(&user, &new), "the new password");
    assert!(
        ch.may_log_in(&user, &old),
        "the old password, during the grace"
    );
    wait_until("the old password to expire", async || {
        (!ch.may_log_in(&user, &old)).then_some(())
    })
    .await;
    assert!(
        ch.may_log_in(&user, &new),
        "the new password, after the grace"
    );
    let acme = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns)
        .get("acme")
        .await
        .unwrap();
    assert_eq!(acme.phase(), Some(TenantPhase::Active));
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

/// Two Rotate runs within one grace period, then a Revoke: after the rotations all three passwords log
/// in (the second used to replace the first one's list, cutting its old password off); after the
/// Revoke only its new one does, and the tenant's running query was ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_rotations_keep_every_valid_password_and_revoke_ends_them_all_at_once() {
    let s = setup("revoke").await;
    let user = s.ch_user("acme");
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\n");
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let mut passwords = vec![password(&s, "acme").await];
    for (i, action) in ["Rotate", "Rotate", "Revoke"].iter().enumerate() {
        let run = format!("acme-{}-{i}", action.to_lowercase());
        if *action == "Revoke" {
            ch.start_query(&user, "a-long-query");
        }
        s.apply(&format!(
            "apiVersion: sentry.io/v1alpha1\nkind: RunJob\nmetadata:\n  name: {run}\nspec:\n  tenant: acme\n  action: {action}\n"
        ));
        let finished = finished(&s, &run).await;
        let status = finished.status.clone().unwrap();
        assert_eq!(status.phase, Some(RunPhase::Succeeded), "{status:#?}");
        passwords.push(password(&s, "acme").await);
        if *action == "Rotate" {
            assert!(
                passwords.iter().all(|p| ch.may_log_in(&user, p)),
                "every password so far logs in after {run} (grace 1h)"
            );
        }
    }
    let (revoked, earlier) = passwords.split_last().unwrap();
    assert!(ch.may_log_in(&user, revoked), "the Revoke run's password");
    assert!(
        earlier.iter().all(|p| !ch.may_log_in(&user, p)),
        "no earlier password after the Revoke"
    );
    assert!(
        ch.model(|m| m.running.is_empty()),
        "the tenant's running query was ended"
    );
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}

/// A schedule rotates by itself: `rotation: {every: 1m, overlap: 30s}` starts a Rotate run a minute
/// after the credentials were made; the Secret and the app's copy then hold the new password, the
/// old one still logs in during the overlap and not after, and the condition names the next time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_schedule_rotates_secret_and_copies_keeping_the_old_password_for_the_overlap() {
    use crate::copies::{expected_copy, owner_consents};
    use k8s_openapi::api::core::v1::Secret;
    use sentry_tenants_tests::control_plane::wait_until_within;
    use sentry_tenants_tests::secret_data;

    let s = setup("rotate-schedule").await;
    let app = s.another_namespace("rotate-app").await;
    let user = s.ch_user("acme");
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    owner_consents(&s, &app).await;
    s.apply(&format!(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  credentials:\n    rotation:\n      every: 1m\n      overlap: 30s\n    copies:\n    - namespace: {}\n      secretName: acme-db\n",
        app.ns
    ));
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let old = password(&s, "acme").await;
    let tenants = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns);
    let rotated_at = async || {
        let status = tenants.get("acme").await.unwrap().status.unwrap();
        status.credentials.unwrap().rotated_at
    };
    let made_at = rotated_at().await;
    assert!(
        made_at.is_some(),
        "the Provision run says when it made the password"
    );

    // Nobody applies a RunJob: the operator starts the rotation when it is due.
    let patience = std::time::Duration::from_secs(240);
    let runs: Api<sentry_tenants::crd::RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until_within("the scheduled Rotate run", patience, async || {
        runs.get_opt("acme-rotate-1").await.ok()?.map(|_| ())
    })
    .await;
    let run = finished(&s, "acme-rotate-1").await;
    assert_eq!(
        run.status.as_ref().unwrap().phase,
        Some(RunPhase::Succeeded),
        "{:?}",
        run.status
    );
    let rotated = rotated_at().await.unwrap();
    assert!(
        rotated.0 >= made_at.unwrap().0 + jiff::SignedDuration::from_mins(1),
        "not before it was due"
    );
    let new = password(&s, "acme").await;
    assert_ne!(new, old);
    let app_secrets: Api<Secret> = Api::namespaced(s.admin.clone(), &app.ns);
    let copy = app_secrets.get("acme-db").await.unwrap();
    assert_eq!(
        secret_data(&copy),
        expected_copy(&s, "acme").await,
        "the copy follows in the same run"
    );
    // Logins as an application makes them, over HTTP.
    let logs_in = async |password: &str| ch.query_as(&user, password, "SELECT 1").await.is_ok();
    assert!(logs_in(&new).await);
    assert!(logs_in(&old).await, "the old password, during the overlap");
    wait_until("the old password to expire", async || {
        (!logs_in(&old).await).then_some(())
    })
    .await;
    assert!(logs_in(&new).await);
    let next = (rotated.0 + jiff::SignedDuration::from_mins(1))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    wait_until("the condition to name the next rotation", async || {
        let t = tenants.get("acme").await.ok()?;
        let c = t
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "CredentialsRotation")?;
        (c.message.contains(&next) || c.reason == "Rotating").then_some(())
    })
    .await;
    assert!(ch.refused().is_empty(), "refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}
