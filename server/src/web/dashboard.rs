//! The dashboard's HTTP side: server-rendered Leptos pages, their GET server functions, the embedded
//! bundle, a server-sent-events stream of changes, and — unless read-only — the form-post actions.
//! Every response carries security headers; HTML, JS and wasm are compressed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use futures::Stream;
use leptos::prelude::*;
use leptos_axum::{AxumRouteListing, LeptosRoutes, ResponseOptions, generate_route_list};
use sentry_tenants_app::api::Backend;
use sentry_tenants_app::fragments::Fragments;
use sentry_tenants_app::{App, OUTPUT_NAME, shell};
use tokio::sync::watch;
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use super::actions::{self, Actions};
use super::assets;
use super::backend::ClusterBackend;
use super::flash::only_signed_messages;
use super::hosts::{AllowedHosts, only_allowed_hosts};
use super::page_cache::{PageCache, reuse_rendered_pages};

/// Everything the dashboard serves from.
pub struct Dashboard {
    pub backend: Arc<ClusterBackend>,
    pub actions: Arc<Actions>,
    /// Bumped whenever a cached tenant or run changes.
    pub changes: watch::Receiver<u64>,
    pub read_only: bool,
    /// The Host names answered (DNS rebinding): loopback plus `--dashboard-allowed-host`.
    pub allowed_hosts: AllowedHosts,
    /// Says true at shutdown: open event streams end then, so the server can.
    pub shutdown: watch::Receiver<bool>,
    /// Whether pages reuse the rows and charts that did not change ([`Fragments`]); the benchmark
    /// turns it off to measure rendering every piece.
    pub keep_fragments: bool,
}

pub fn leptos_options() -> LeptosOptions {
    LeptosOptions::builder()
        .output_name(OUTPUT_NAME)
        .site_pkg_dir("pkg")
        .build()
}

/// The app's routes, walked once per process. Leptos marks a route walk with a process-wide flag that
/// stops every resource from loading while it is set, so a walk running beside a render (a second
/// router built while the first serves) would leave that render waiting forever.
fn route_list() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App)).clone()
}

pub fn router(dashboard: Dashboard) -> Router {
    let options = leptos_options();
    let backend: Arc<dyn Backend> = dashboard.backend.clone();
    let session = sentry_tenants_app::forms::SessionToken(super::flash::session_token());
    let fragments = dashboard.keep_fragments.then(Fragments::default);
    let context = move || {
        provide_context(backend.clone());
        provide_context(session.clone());
        if let Some(fragments) = &fragments {
            provide_context(fragments.clone());
        }
        set_page_csp();
    };
    let routes = route_list();
    let pages = Router::new()
        .leptos_routes_with_context(&options, routes, context, {
            let options = options.clone();
            move || shell(options.clone())
        })
        .with_state(options)
        .layer(middleware::from_fn_with_state(
            PageCache::new(dashboard.changes.clone(), dashboard.backend.clock.clone()),
            reuse_rendered_pages,
        ))
        // Before a page is rendered or reused: a message in its address must be one we signed.
        .layer(middleware::from_fn(only_signed_messages));

    // The pages' server functions (`/api/*`, GET only) are routed by `leptos_routes_with_context`.
    let mut app = Router::new()
        .route(
            "/events",
            get(events).with_state((dashboard.changes, dashboard.shutdown)),
        )
        .route(
            "/pkg/{*path}",
            get(|p: Path<String>, h: HeaderMap| assets::serve(p, h, "pkg")),
        )
        .route(
            "/assets/{*path}",
            get(|p: Path<String>, h: HeaderMap| assets::serve(p, h, "assets")),
        )
        .merge(pages);
    if !dashboard.read_only {
        app = app.nest("/actions", actions::router(dashboard.actions));
    }
    // The first look at any request: the Host it names.
    let app = app.layer(middleware::from_fn_with_state(
        dashboard.allowed_hosts,
        only_allowed_hosts,
    ));
    with_response_layers(app)
}

/// What every dashboard response passes through on its way out: security headers, then compression.
/// A page sets its own Content-Security-Policy (with its nonce); everything else gets the strictest.
pub fn with_response_layers(app: Router) -> Router {
    app.layer(SetResponseHeaderLayer::overriding(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    ))
    .layer(SetResponseHeaderLayer::overriding(
        header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    ))
    .layer(SetResponseHeaderLayer::overriding(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    ))
    .layer(SetResponseHeaderLayer::if_not_present(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    ))
    .layer(CompressionLayer::new().gzip(true).br(true))
}

/// The page's Content-Security-Policy: scripts only from here, plus the one inline bootstrap that
/// hydration needs, allowed by this response's nonce; wasm may be compiled; nothing may frame us.
fn set_page_csp() {
    let (Some(nonce), Some(response)) =
        (leptos::nonce::use_nonce(), use_context::<ResponseOptions>())
    else {
        return;
    };
    let policy = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    );
    if let Ok(value) = HeaderValue::from_str(&policy) {
        response.insert_header(header::CONTENT_SECURITY_POLICY, value);
    }
}

/// One message per batch of changes (coalesced over 100 ms). The browser's EventSource reconnects by
/// itself; `retry` keeps the gap short.
async fn events(
    State((changes, shutdown)): State<(watch::Receiver<u64>, watch::Receiver<bool>)>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let first = futures::stream::once(async {
        Ok(Event::default()
            .retry(Duration::from_secs(1))
            .comment("connected"))
    });
    let updates = futures::stream::unfold(changes, |mut rx| async move {
        rx.changed().await.ok()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let version = *rx.borrow_and_update();
        Some((Ok(Event::default().data(version.to_string())), rx))
    });
    // A stream never ends by itself; at shutdown it must, or the server waits for it until killed.
    let until_shutdown = futures::StreamExt::take_until(
        futures::StreamExt::chain(first, updates),
        super::serve::stopped(shutdown),
    );
    Sse::new(until_shutdown).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
