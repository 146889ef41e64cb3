//! HTTP: the probe port (`/healthz`, `/readyz`, `/metrics`) and the dashboard on its own listener.

pub mod actions;
pub mod assets;
pub mod backend;
pub mod dashboard;
pub mod flash;
pub mod hosts;
pub mod insights;
pub mod local;
pub mod page_cache;
pub mod permissions;
pub mod serve;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::controller::Stores;
use crate::controller::slots::RunSlots;
use crate::telemetry::Metrics;

#[derive(Clone)]
pub struct ProbeState {
    pub stores: Stores,
    pub metrics: Arc<Metrics>,
    pub namespace: String,
    pub slots: Arc<RunSlots>,
}

pub fn probe_router(state: ProbeState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Ready once every cache has synced: before that the dashboard would show an empty cluster.
async fn readyz(State(state): State<ProbeState>) -> impl IntoResponse {
    if state.stores.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
    }
}

async fn metrics(State(state): State<ProbeState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(&state.stores.metrics_snapshot(
            &state.namespace,
            state.slots.counted(&state.namespace, &state.stores),
        )),
    )
}
