//! Pieces of `sentry-tenants run` that need no cluster: probes, metrics, the missing-CRD hint.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::api::ObjectMeta;
use kube::client::Body;
use kube::runtime::watcher;
use sentry_tenants::controller::slots::RunSlots;
use sentry_tenants::controller::{Cache, Stores};
use sentry_tenants::crd::{RunJob, Tenant, TenantPhase, TenantSpec, TenantStatus};
use sentry_tenants::telemetry::Metrics;
use sentry_tenants::web::{ProbeState, probe_router};
use tower::ServiceExt;

async fn get(router: axum::Router, path: &str) -> (StatusCode, String) {
    let resp = router
        .oneshot(Request::get(path).body(axum::body::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// A Provision run just created: no status, no Job.
fn new_run() -> RunJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
        "metadata": {"name": "acme-provision-1", "namespace": "ns",
                     "creationTimestamp": "2026-12-05T10:00:00Z"},
        "spec": {"tenant": "acme", "action": "Provision"},
    }))
    .unwrap()
}

fn active_tenant() -> Tenant {
    Tenant {
        metadata: ObjectMeta {
            name: Some("acme".into()),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        spec: TenantSpec::default(),
        status: Some(TenantStatus {
            phase: Some(TenantPhase::Active),
            ..TenantStatus::default()
        }),
    }
}

#[tokio::test]
async fn readyz_waits_for_every_cache_and_metrics_count_by_phase() {
    let (stores, mut writers) = Stores::shared();
    let metrics = Arc::new(Metrics::default());
    let router = probe_router(ProbeState {
        stores: stores.clone(),
        metrics: Arc::clone(&metrics),
        namespace: "ns".into(),
        slots: RunSlots::new(1),
    });
    assert_eq!(get(router.clone(), "/healthz").await.0, StatusCode::OK);
    assert_eq!(
        get(router.clone(), "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    // As the operator's watch does: the cache, then the indexes beside it.
    for ev in [
        watcher::Event::Init,
        watcher::Event::InitApply(active_tenant()),
        watcher::Event::InitDone,
    ] {
        writers.tenants.apply_watcher_event(&ev);
        stores.index_tenant_event(&ev);
    }
    stores.synced.mark(Cache::Tenants);
    assert_eq!(
        get(router.clone(), "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "runs and jobs not synced"
    );
    for ev in [
        watcher::Event::Init,
        watcher::Event::InitApply(new_run()),
        watcher::Event::InitDone,
    ] {
        writers.runjobs.apply_watcher_event(&ev);
        stores.index_run_event(&ev);
    }
    for ev in [watcher::Event::Init, watcher::Event::InitDone] {
        writers.jobs.apply_watcher_event(&ev);
    }
    stores.synced.mark(Cache::RunJobs);
    stores.synced.mark(Cache::Jobs);
    assert_eq!(
        get(router.clone(), "/readyz").await.0,
        StatusCode::SERVICE_UNAVAILABLE,
        "the credentials Secrets' markers not synced"
    );
    stores.synced.mark(Cache::Markers);
    assert_eq!(get(router.clone(), "/readyz").await.0, StatusCode::OK);

    drop(metrics.reconcile_timer("tenant"));
    metrics.observe_queue_depth("tenant", 3);
    let (status, text) = get(router, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        // A run without a Job, not admitted yet: it waits (for its reconcile here, the slot is free).
        "sentry_tenants_runs{phase=\"Unknown\"} 1",
        "sentry_tenants_runs_waiting 1",
        "sentry_tenants_runs_in_flight 0",
        "sentry_tenants_runs_max_in_flight 1",
        // One start with 3 others waiting: above the bucket of 2, within that of 4.
        "sentry_tenants_reconcile_queue_depth_bucket{le=\"2.0\",controller=\"tenant\"} 0",
        "sentry_tenants_reconcile_queue_depth_bucket{le=\"4.0\",controller=\"tenant\"} 1",
        "sentry_tenants_reconcile_queue_depth_sum{controller=\"tenant\"} 3.0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    assert!(
        text.contains("sentry_tenants_tenants{phase=\"Active\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sentry_tenants_tenants{phase=\"Pending\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("sentry_tenants_reconciles_total{controller=\"tenant\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sentry_tenants_reconcile_duration_seconds_count{controller=\"tenant\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sentry_tenants_build_info{version=\"0.1.0\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn missing_crds_give_a_one_line_hint_to_install() {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((_req, send)) = handle.next_request().await {
            let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;
            send.send_response(
                Response::builder()
                    .status(404)
                    .body(Body::from(body.as_bytes().to_vec()))
                    .unwrap(),
            );
        }
    });
    let client = kube::Client::new(mock, "ns");
    let err = sentry_tenants::cluster::ensure_crds_installed(&client, "ns")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the sentry.io CRDs are not installed in this cluster: run `sentry-tenants install` first"
    );
}
