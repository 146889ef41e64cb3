//! The Helm-free installer: `install`, `uninstall`, `check`, `dashboard`.

pub mod apply;
pub mod bundle;
pub mod check;
pub mod commands;
pub mod dashboard;
pub mod progress;
pub mod pss;
pub mod rollout;
pub mod uninstall;
pub mod who_can;

pub use apply::{InstallError, InstallOptions, InstallReport, install};
pub use bundle::{BundleError, ValueError, Values};
pub use progress::Progress;
pub use uninstall::{UninstallOptions, UninstallReport, uninstall};

/// The operator Deployment's name in every install.
pub const DEPLOYMENT: &str = "sentry-tenants";
