//! Rule 5 of the Tenant reconciler against the in-memory API: an Automatic tenant is provisioned with no
//! click, one run per generation, a failed run retried after a delay doubling from 15 s to 5 minutes,
//! never given up;
//! a Manual tenant waits; a click racing the reconciler starts one run.

use http::{Method, Request, StatusCode, header};
use jiff::SignedDuration;
use kube::ResourceExt;
use sentry_tenants::crd::{ProvisioningPolicy, RunAction, Tenant, TenantPhase};
use sentry_tenants_tests::dashboard::dashboard_router;
use sentry_tenants_tests::{Cluster, requeue_secs};
use serde_json::json;
use tower::ServiceExt;

fn provisioned_condition(t: &Tenant) -> (String, String, String) {
    let c = t
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Provisioned"))
        .expect("a Provisioned condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

async fn provision_runs(c: &Cluster) -> Vec<String> {
    c.runs_of(RunAction::Provision)
        .await
        .iter()
        .map(|r| r.name_any())
        .collect()
}

/// Every Provision run the tenant ever had: live ones and those recorded after their cleanup.
async fn every_attempt(c: &Cluster, tenant: &str) -> Vec<String> {
    let mut names = provision_runs(c).await;
    names.extend(
        c.tenant(tenant)
            .await
            .history()
            .iter()
            .map(|h| h.name.clone()),
    );
    names.sort();
    names.dedup();
    names
}

/// A click on the tenant's Provision (or Retry) button; returns the dashboard's answer.
async fn click_provision(c: &Cluster, tenant: &str) -> (StatusCode, String) {
    let session = sentry_tenants_tests::dashboard::session_of(dashboard_router(c, false)).await;
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/actions/tenants/{tenant}/provision"))
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::ORIGIN, "http://127.0.0.1:8080")
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(format!("session={session}")))
        .unwrap();
    let reply = dashboard_router(c, false).oneshot(request).await.unwrap();
    let status = reply.status();
    let body = http_body_util::BodyExt::collect(reply.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn an_automatic_tenant_is_provisioned_by_one_run_without_a_click() {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    for _ in 0..3 {
        c.settle().await;
    }
    assert_eq!(provision_runs(&c).await, ["acme-provision-10"]);
    assert_eq!(c.log.creates_of("runjobs"), 1);
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Provisioning)
    );
    assert!(
        c.log.events().iter().any(|e| e["reason"] == "RunCreated"
            && e["note"] == "Created Provision run acme-provision-10"),
        "{:?}",
        c.log.events()
    );

    c.job_succeeded("acme-provision-10").await;
    c.report_provisioned("acme").await;
    c.settle().await;
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
    // Cleaned up an hour later: a provisioned tenant never gets another Provision run.
    c.clock.advance(SignedDuration::from_secs(3600));
    for _ in 0..3 {
        c.settle().await;
    }
    assert!(
        provision_runs(&c).await.is_empty(),
        "the run was cleaned up"
    );
    assert_eq!(c.log.creates_of("runjobs"), 1);
}

#[tokio::test]
async fn a_manual_tenant_waits_for_a_click() {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Manual)
        .await;
    c.clock.advance(SignedDuration::from_secs(3600));
    for _ in 0..3 {
        c.settle().await;
    }
    assert_eq!(c.log.creates_of("runjobs"), 0);
    let t = c.tenant("acme").await;
    assert_eq!(t.phase(), Some(TenantPhase::Pending));
    assert_eq!(
        provisioned_condition(&t),
        (
            "False".into(),
            "NotProvisioned".into(),
            "No successful Provision run yet".into()
        )
    );
    let (status, body) = click_provision(&c, "acme").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("run acme-provision-1 started"), "{body}");
}

/// Fails the named run's Job and lets the operator see it.
async fn fail(c: &Cluster, run: &str) {
    c.job_failed(run, "BackoffLimitExceeded", "ClickHouse unreachable")
        .await;
    c.settle().await;
}

/// Seven failed attempts in a row (an outage of about ten minutes): each is followed by the next after
/// a delay that doubles from 15 s up to 5 minutes, with jitter in its upper half; the reconciler asks to
/// be woken at that moment and starts nothing before it; `Provisioned` says when the next attempt
/// starts; nothing is ever given up. Retry still starts the next attempt at once, and a spec change
/// starts the new generation's attempts.
#[tokio::test]
async fn a_failed_automatic_run_is_retried_with_a_delay_doubling_to_five_minutes_and_never_given_up()
 {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    c.settle().await;
    let mut expected = vec!["acme-provision-10".to_owned()];
    for (attempt, step) in [
        (2u64, 15f64),
        (3, 30.),
        (4, 60.),
        (5, 120.),
        (6, 240.),
        (7, 300.),
    ] {
        let failed = expected.last().unwrap().clone();
        fail(&c, &failed).await;
        let t = c.tenant("acme").await;
        assert_eq!(t.phase(), Some(TenantPhase::Failed));
        c.sync_stores().await;
        let metrics = c.ctx.metrics.render(
            &c.ctx.stores.metrics_snapshot(
                &c.ctx.config.shared.namespace,
                c.ctx
                    .slots
                    .counted(&c.ctx.config.shared.namespace, &c.ctx.stores),
            ),
        );
        assert!(
            metrics.contains("sentry_tenants_tenants_retrying{condition=\"Provisioned\"} 1")
                && metrics
                    .contains("sentry_tenants_tenants_retrying{condition=\"AccessLocked\"} 0"),
            "{metrics}"
        );
        // The reconciler asks to be woken when the next attempt is due, and starts nothing before it.
        let wake = requeue_secs(&c.reconcile_tenant("acme").await).expect("a wake-up");
        assert!(
            (step / 2.0..=step).contains(&wake),
            "attempt {attempt}: {wake} s is outside [{}, {step}]",
            step / 2.0
        );
        let at =
            (c.clock.now() + SignedDuration::from_secs_f64(wake)).strftime("%Y-%m-%dT%H:%M:%SZ");
        assert_eq!(
            provisioned_condition(&t),
            (
                "False".into(),
                "ProvisionRetrying".into(),
                format!(
                    "Provision run {failed} failed: Job failed (BackoffLimitExceeded): ClickHouse unreachable. \
                     Attempt {attempt} starts at {at} (retried until it succeeds)"
                )
            )
        );
        c.clock
            .advance(SignedDuration::from_secs(wake.ceil() as i64 - 1));
        c.settle().await;
        assert_eq!(
            every_attempt(&c, "acme").await,
            expected,
            "before attempt {attempt}"
        );
        c.clock.advance(SignedDuration::from_secs(1));
        c.settle().await;
        expected.push(format!("acme-provision-{}", 9 + attempt));
        assert_eq!(
            every_attempt(&c, "acme").await,
            expected,
            "attempt {attempt}"
        );
        assert_eq!(
            c.tenant("acme").await.phase(),
            Some(TenantPhase::Provisioning)
        );
    }
    assert_eq!(c.log.creates_of("runjobs"), 7);

    // Retry (the button's label once Failed) starts the next attempt at once, without the wait ...
    fail(&c, "acme-provision-16").await;
    let (status, body) = click_provision(&c, "acme").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("run acme-provision-17 started"), "{body}");
    c.settle().await;
    fail(&c, "acme-provision-17").await;
    // ... and a spec change starts a new generation's attempts, at once too.
    c.patch_spec("acme", json!({"displayName": "Acme"})).await;
    c.settle().await;
    let live = provision_runs(&c).await;
    assert_eq!(
        live.last().map(String::as_str),
        Some("acme-provision-20"),
        "{live:?}"
    );
    assert_eq!(c.log.creates_of("runjobs"), 9);
}

#[tokio::test]
async fn a_click_racing_the_reconciler_starts_one_run() {
    // The click lands before the reconciler has seen the new tenant.
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    c.sync_stores().await;
    let (status, body) = click_provision(&c, "acme").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("run acme-provision-10 started"), "{body}");
    // The reconciler decides from a cache that has not seen the click's run yet: same name, one run.
    c.reconcile_tenant("acme").await;
    c.settle().await;
    assert_eq!(provision_runs(&c).await, ["acme-provision-10"]);
    assert_eq!(c.log.creates_of("runjobs"), 1);

    // During the wait after a failure, a click starts the attempt the reconciler would have started.
    fail(&c, "acme-provision-10").await;
    let (status, body) = click_provision(&c, "acme").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("run acme-provision-11 started"), "{body}");
    c.clock.advance(SignedDuration::from_secs(15));
    c.settle().await;
    assert_eq!(
        provision_runs(&c).await,
        ["acme-provision-10", "acme-provision-11"]
    );
    assert_eq!(c.log.creates_of("runjobs"), 2);
}

/// A suspended Automatic tenant gets its Provision run too (the provisioner then makes the user locked:
/// `provisioner::a_suspended_tenant_is_provisioned_locked`).
#[tokio::test]
async fn a_suspended_automatic_tenant_gets_its_provision_run_too() {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    c.set_suspended("acme", true).await;
    c.settle().await;
    // Created at generation 1, suspended at generation 2: the run is made for the spec it sees.
    assert_eq!(provision_runs(&c).await, ["acme-provision-20"]);
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Suspended));
}

/// The tenant's "RunCreated" events, one per run, each naming its run as related: kube's Recorder
/// folds the events of one key into a series that keeps the first note, so without the run the
/// retry's event would repeat the first run's name.
#[tokio::test]
async fn each_run_made_for_a_tenant_has_an_event_of_its_own() {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", ProvisioningPolicy::Automatic)
        .await;
    c.settle().await;
    c.job_failed("acme-provision-10", "BackoffLimitExceeded", "refused")
        .await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(30));
    c.settle().await;
    assert_eq!(
        provision_runs(&c).await,
        ["acme-provision-10", "acme-provision-11"]
    );
    let created: Vec<(String, String)> = c
        .log
        .events()
        .iter()
        .filter(|e| e["reason"] == "RunCreated" && e["regarding"]["kind"] == "Tenant")
        .map(|e| {
            (
                e["note"].as_str().unwrap_or_default().to_owned(),
                e["related"]["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        created,
        [
            (
                "Created Provision run acme-provision-10".to_owned(),
                "acme-provision-10".to_owned()
            ),
            (
                "Created Provision run acme-provision-11".to_owned(),
                "acme-provision-11".to_owned()
            ),
        ]
    );
}
