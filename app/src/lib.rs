//! The sentry-tenants dashboard: a Leptos app rendered by the server (feature `ssr`), in islands mode:
//! the browser (feature `hydrate`, built to wasm by `server/build.rs`) hydrates only the islands and
//! keeps the server's pages live ([`browser`]). It never talks to Kubernetes: reads
//! go through [`api::Backend`], which the server implements over its caches; writes are form posts the
//! server handles. Every route renders with `SsrMode::Async`: the HTML is complete before it is sent, so
//! the dashboard works with JavaScript off.

pub mod api;
#[cfg(feature = "hydrate")]
mod browser;
pub mod charts;
pub mod components;
pub mod forms;
pub mod fragments;
pub mod model;
pub mod pages;
/// The domain rules the form and the pages check and show, shared with the operator.
pub use sentry_tenants_core::{limits, names, text};

use leptos::prelude::*;
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{SsrMode, path};

use components::Layout;
use pages::{NewTenantPage, NotFound, OverviewPage, RunPage, RunsPage, TenantPage, TenantsPage};

/// Name of the wasm bundle and its JS glue under `/pkg/`.
pub const OUTPUT_NAME: &str = "sentry_tenants_app";

/// The HTML document around the app.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            // The head is the same on every page, so it is written here rather than registered
            // through leptos_meta: a registered tag makes the integration search the whole rendered
            // page for the head's end and copy it, on every request.
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <title>"sentry-tenants"</title>
                <meta name="description" content="Tenants, run jobs and provisioning"/>
                <link rel="stylesheet" href="/assets/style.css"/>
                <link rel="icon" href="/assets/favicon.svg" type="image/svg+xml"/>
                <AutoReload options=options.clone()/>
                <HydrationScripts options islands=true/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    view! {
        <Router>
            <Layout>
                <Routes fallback=NotFound>
                    <Route path=path!("/") view=OverviewPage ssr=SsrMode::Async/>
                    <Route path=path!("/tenants") view=TenantsPage ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/new") view=NewTenantPage ssr=SsrMode::Async/>
                    <Route path=path!("/tenants/:name") view=TenantPage ssr=SsrMode::Async/>
                    <Route path=path!("/runs") view=RunsPage ssr=SsrMode::Async/>
                    <Route path=path!("/runs/:name") view=RunPage ssr=SsrMode::Async/>
                </Routes>
            </Layout>
        </Router>
    }
}

/// Entry point of the wasm bundle (Leptos' island script calls it, then hydrates the islands).
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_islands();
    browser::start();
}
