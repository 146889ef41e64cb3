//! The Helm-free installer: `install`, `uninstall`, `check`, `dashboard`.

pub mod bundle;
pub mod pss;

pub use bundle::{BundleError, ValueError, Values};
