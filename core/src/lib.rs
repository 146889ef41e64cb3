//! The bottom of sentry-tenants: the domain rules every layer shares and nothing else — a tenant's
//! name and every Kubernetes and ClickHouse name derived from it ([`names`]), the bounds of its limits
//! ([`limits`]), and text encodings ([`text`]). The CRDs, the operator, the provisioner and the
//! dashboard (in the browser too) all use these; this crate uses none of them.

pub mod limits;
pub mod names;
pub mod text;
