//! sentry-tenants: installs a multi-tenant operator into Kubernetes, runs its reconcilers and serves its
//! dashboard — one binary. `main.rs` only calls [`cli::main`].

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod crd;
pub mod digest;
pub mod flags;
pub mod image;
pub mod install;
pub mod labels;
pub mod leader;
/// The domain rules at the bottom (the `core` crate): tenant names and what derives from them, limits.
pub use sentry_tenants_core::limits;
pub use sentry_tenants_core::names;
pub mod operator;
pub mod provision;
pub mod signals;
pub mod telemetry;
pub mod tls;
/// Percent-encoding, shared by the dashboard's links, its redirects and the ClickHouse client.
pub use sentry_tenants_core::text;
pub mod web;

/// The static release build's `memcpy`, `memmove`, `memcmp` and `bcmp` (musl's copy cost a quarter of a
/// no-op reconcile, its byte-at-a-time compare most of what remained against glibc).
#[cfg(all(target_arch = "x86_64", any(test, target_env = "musl")))]
mod memcopy;

/// Every build allocates with mimalloc. With musl's own allocator the reconcile benchmark ran at under
/// half the glibc build's rate; with glibc's, a dashboard render spent about a third of its time in
/// malloc and free, consolidating free lists after each page-sized buffer (a tenants page took 1.0 ms
/// with glibc's allocator and 0.74 ms with jemalloc preloaded, measured in-process). Declared in the
/// library, so every binary that links it — the product, its tests and the bench that measures it —
/// allocates the same way.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The image the Deployment and its Jobs run unless `--image` says otherwise: the reference this
/// repository's Dockerfile is built and pushed as (its header; a test keeps the two equal).
pub const DEFAULT_IMAGE: &str = concat!(
    "ghcr.io/sentry-tenants/sentry-tenants:v",
    env!("CARGO_PKG_VERSION")
);
