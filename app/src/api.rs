//! Reading the cluster from the dashboard: server functions (GET, so they are safe to retry and need no
//! Origin check) over a [`Backend`] the server crate implements on its caches and provides as context.
//! Mutations are not here: they are plain form posts to `/actions/…`, handled by the server crate.

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;

use crate::model::{Meta, Overview, Page, RunDetail, RunRow, TenantDetail, TenantRow};

#[cfg(feature = "ssr")]
pub use backend::{Backend, BoxFuture};

#[cfg(feature = "ssr")]
mod backend {
    use std::future::Future;
    use std::pin::Pin;

    use crate::model::{Meta, Overview, RunDetail, RunRow, TenantDetail, TenantRow};

    pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// The cluster as the dashboard sees it. Implemented by the server over its reflector caches (no
    /// extra LIST traffic); the app never depends on a Kubernetes client.
    pub trait Backend: Send + Sync + 'static {
        fn meta(&self) -> Meta;
        fn overview(&self) -> BoxFuture<'_, Overview>;
        fn tenants(&self) -> Vec<TenantRow>;
        fn runs(&self) -> Vec<RunRow>;
        /// Includes recent Events, which are read from the API on demand.
        fn tenant(&self, name: &str) -> BoxFuture<'_, Option<TenantDetail>>;
        fn run(&self, name: &str) -> BoxFuture<'_, Option<RunDetail>>;
    }
}

#[cfg(feature = "ssr")]
fn backend() -> Result<std::sync::Arc<dyn Backend>, ServerFnError> {
    use_context::<std::sync::Arc<dyn Backend>>()
        .ok_or_else(|| ServerFnError::new("dashboard backend missing"))
}

/// Filters rows by phase (exact) and name or display name (case-insensitive substring).
pub fn filter_tenants(
    rows: Vec<TenantRow>,
    phase: Option<&str>,
    query: Option<&str>,
) -> Vec<TenantRow> {
    let q = query
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .map(str::to_lowercase);
    rows.into_iter()
        .filter(|r| phase.is_none_or(|p| p.is_empty() || r.phase == p))
        .filter(|r| {
            q.as_ref().is_none_or(|q| {
                r.name.contains(q.as_str())
                    || r.display_name
                        .as_ref()
                        .is_some_and(|d| d.to_lowercase().contains(q.as_str()))
            })
        })
        .collect()
}

#[server(prefix = "/api", endpoint = "overview", input = GetUrl)]
pub async fn get_overview() -> Result<(Meta, Overview), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.overview().await))
}

#[server(prefix = "/api", endpoint = "tenants", input = GetUrl)]
pub async fn get_tenants(
    phase: Option<String>,
    q: Option<String>,
    page: Option<usize>,
) -> Result<(Meta, Page<TenantRow>), ServerFnError> {
    let b = backend()?;
    let all = b.tenants();
    let total = all.len();
    let matched = filter_tenants(all, phase.as_deref(), q.as_deref());
    Ok((b.meta(), crate::model::paginate(matched, total, page)))
}

#[server(prefix = "/api", endpoint = "tenant", input = GetUrl)]
pub async fn get_tenant(name: String) -> Result<(Meta, Option<TenantDetail>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.tenant(&name).await))
}

#[server(prefix = "/api", endpoint = "runs", input = GetUrl)]
pub async fn get_runs(page: Option<usize>) -> Result<(Meta, Page<RunRow>), ServerFnError> {
    let b = backend()?;
    let all = b.runs();
    let total = all.len();
    Ok((b.meta(), crate::model::paginate(all, total, page)))
}

#[server(prefix = "/api", endpoint = "run", input = GetUrl)]
pub async fn get_run(name: String) -> Result<(Meta, Option<RunDetail>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.run(&name).await))
}
