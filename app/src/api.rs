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

    use crate::model::{Meta, Overview, Page, RunDetail, RunRow, TenantDetail, TenantRow};

    pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// The cluster as the dashboard sees it. Implemented by the server over its reflector caches (no
    /// extra LIST traffic); the app never depends on a Kubernetes client.
    pub trait Backend: Send + Sync + 'static {
        fn meta(&self) -> Meta;
        fn overview(&self) -> BoxFuture<'_, Overview>;
        /// The page of tenants `query` asks for: filtered and paged on the cached objects, so only the
        /// page's rows are built.
        fn tenants(&self, query: &super::TenantQuery) -> Page<TenantRow>;
        /// Newest first.
        fn runs(&self, page: Option<usize>) -> Page<RunRow>;
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

/// What the tenants list asks for, normalised: an empty phase or search means none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantQuery {
    pub phase: Option<String>,
    /// Lower-cased.
    pub text: Option<String>,
    pub page: Option<usize>,
}

impl TenantQuery {
    pub fn new(phase: Option<&str>, text: Option<&str>, page: Option<usize>) -> Self {
        let phase = phase.map(str::trim).filter(|p| !p.is_empty());
        let text = text.map(str::trim).filter(|q| !q.is_empty());
        Self {
            phase: phase.map(str::to_owned),
            text: text.map(str::to_lowercase),
            page,
        }
    }
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
    let query = TenantQuery::new(phase.as_deref(), q.as_deref(), page);
    Ok((b.meta(), b.tenants(&query)))
}

#[server(prefix = "/api", endpoint = "tenant", input = GetUrl)]
pub async fn get_tenant(name: String) -> Result<(Meta, Option<TenantDetail>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.tenant(&name).await))
}

#[server(prefix = "/api", endpoint = "runs", input = GetUrl)]
pub async fn get_runs(page: Option<usize>) -> Result<(Meta, Page<RunRow>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.runs(page)))
}

#[server(prefix = "/api", endpoint = "run", input = GetUrl)]
pub async fn get_run(name: String) -> Result<(Meta, Option<RunDetail>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.run(&name).await))
}
