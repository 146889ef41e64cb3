//! Reading the cluster from the dashboard: server functions (GET, so they are safe to retry and need no
//! Origin check) over a [`Backend`] the server crate implements on its caches and provides as context.
//! Mutations are not here: they are plain form posts to `/actions/…`, handled by the server crate.

use std::sync::Arc;

use leptos::prelude::*;
use leptos::server_fn::codec::GetUrl;

use crate::model::{Meta, Overview, Page, RunDetail, RunRow, TenantDetail, TenantRow};

// The trait is declared in the browser build too (where nothing implements it), so the list pages'
// readers below have one signature in both builds.
pub use backend::{Backend, BoxFuture};

mod backend {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;

    use crate::model::{Meta, Overview, Page, RunDetail, RunRow, TenantDetail, TenantRow};

    pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

    /// The cluster as the dashboard sees it. Implemented by the server over its reflector caches (no
    /// extra LIST traffic); the app never depends on a Kubernetes client.
    pub trait Backend: Send + Sync + 'static {
        fn meta(&self) -> Meta;
        /// From the caches and the indexes beside them.
        fn overview(&self) -> Overview;
        /// Who holds the leader Lease (read from the API now and then, so it may wait on it).
        fn leader(&self) -> BoxFuture<'_, Option<String>>;
        /// The page of tenants `query` asks for: filtered and paged on the cached objects, so only the
        /// page's rows are built.
        /// The rows are shared: the server keeps a tenant's row while the tenant does not change.
        fn tenants(&self, query: &super::TenantQuery) -> Page<Arc<TenantRow>>;
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

/// The overview's data, and who holds the leader Lease.
#[server(prefix = "/api", endpoint = "overview", input = GetUrl)]
pub async fn get_overview() -> Result<(Meta, Overview, Option<String>), ServerFnError> {
    let (meta, overview) = overview_now()?;
    Ok((meta, overview, leader_later().await))
}

/// The overview's data, read while the page renders (see [`read_now`]).
pub fn overview_now() -> Result<(Meta, Overview), ServerFnError> {
    read_now(|b| b.overview())
}

/// Who holds the leader Lease: the one part of the overview that may wait on the API. The backend is
/// taken now, while the page's context is at hand; none when there is none.
pub fn leader_later() -> impl std::future::Future<Output = Option<String>> + Send + 'static {
    #[cfg(feature = "ssr")]
    {
        let b = backend().ok();
        async move {
            match b {
                Some(b) => b.leader().await,
                None => None,
            }
        }
    }
    #[cfg(not(feature = "ssr"))]
    {
        async { None }
    }
}

#[server(prefix = "/api", endpoint = "tenants", input = GetUrl)]
pub async fn get_tenants(
    phase: Option<String>,
    q: Option<String>,
    page: Option<usize>,
) -> Result<(Meta, Page<Arc<TenantRow>>), ServerFnError> {
    tenants_now(&TenantQuery::new(phase.as_deref(), q.as_deref(), page))
}

/// The tenants list's data, read while the page renders (see [`read_now`]).
pub fn tenants_now(query: &TenantQuery) -> Result<(Meta, Page<Arc<TenantRow>>), ServerFnError> {
    read_now(|b| b.tenants(query))
}

/// What a list page reads from the backend as it renders. The list pages are only ever rendered on the
/// server (islands), from the caches, without waiting on anything: they take their data directly
/// rather than through a resource, which would spawn a task and render its suspense twice. In the
/// browser build, where they are never rendered, there is no backend to read.
fn read_now<T>(read: impl FnOnce(&dyn Backend) -> T) -> Result<(Meta, T), ServerFnError> {
    #[cfg(feature = "ssr")]
    {
        let b = backend()?;
        let meta = b.meta();
        Ok((meta, read(b.as_ref())))
    }
    #[cfg(not(feature = "ssr"))]
    {
        let _ = read;
        Err(ServerFnError::new(
            "the list pages are rendered on the server",
        ))
    }
}

#[server(prefix = "/api", endpoint = "tenant", input = GetUrl)]
pub async fn get_tenant(name: String) -> Result<(Meta, Option<TenantDetail>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.tenant(&name).await))
}

#[server(prefix = "/api", endpoint = "runs", input = GetUrl)]
pub async fn get_runs(page: Option<usize>) -> Result<(Meta, Page<RunRow>), ServerFnError> {
    runs_now(page)
}

/// The runs list's data, read while the page renders (see [`read_now`]).
pub fn runs_now(page: Option<usize>) -> Result<(Meta, Page<RunRow>), ServerFnError> {
    read_now(|b| b.runs(page))
}

#[server(prefix = "/api", endpoint = "run", input = GetUrl)]
pub async fn get_run(name: String) -> Result<(Meta, Option<RunDetail>), ServerFnError> {
    let b = backend()?;
    Ok((b.meta(), b.run(&name).await))
}
