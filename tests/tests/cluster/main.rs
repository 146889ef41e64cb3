//! The real control plane tier: every test here talks to a real kube-apiserver (with etcd, RBAC,
//! admission including Pod Security, and kube-controller-manager's garbage collector, Job and other
//! controllers) started by `scripts/cluster.sh`. None is skipped: a missing cluster is started, and a
//! cluster that cannot be built or started fails the run.
//!
//! Each test works in a namespace of its own. The operator's code runs in-process under the
//! operator's own ServiceAccount (a TokenRequest token), so the RBAC the bundle ships authorises every
//! request, and a 403 for one of our accounts in the audit log fails the test. Tests run on multi-thread
//! runtimes, as `sentry-tenants run` does.

mod api_rules;
mod consent;
mod copies;
mod drill;
mod image;
mod install;
mod isolation;
mod leader;
mod limits;
mod local_dashboard;
mod monitoring;
mod node;
mod operator;
mod outage;
mod ownership;
mod provision;
mod rbac;
mod readme;
mod reclaim;
mod replicas;
mod restart_drill;
mod rotate;
mod secret_loss;
mod shards;
mod suspend;
mod tls;
mod uninstall;
mod write_budget;

pub use sentry_tenants_tests::cluster_tier::{
    Operator, Setup, operator_context, setup, setup_alone,
};
