//! The Helm-free installer: what `install`, `uninstall` and `check` do (their command lines are in `cli`).

pub mod apply;
pub mod bundle;
pub mod check;
pub mod consent;
pub mod monitoring;
pub mod progress;
pub mod pss;
pub mod rollout;
pub mod uninstall;
pub mod wait;
pub mod who_can;

pub use apply::{InstallOptions, InstallReport, install};
pub use bundle::{BundleError, Values};
pub use progress::Progress;
pub use uninstall::{UninstallOptions, UninstallReport, uninstall};
pub use wait::InstallError;

/// The operator Deployment's name in every install.
pub const DEPLOYMENT: &str = "sentry-tenants";
/// The operator's pods (the Deployment's selector in manifests/deployment.yaml).
/// The Deployments of a sharded install's shards (`install --shards`).
pub const SHARD_DEPLOYMENTS: &str = "app.kubernetes.io/name=sentry-tenants,sentry.io/shard";
pub const OPERATOR_POD_SELECTOR: &str =
    "app.kubernetes.io/name=sentry-tenants,app.kubernetes.io/component=operator";
