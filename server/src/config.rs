//! Settings of the operator process, read from flags or the environment (the installer's ConfigMap).

use clap::Args;

use crate::flags::{DEFAULT_CLICKHOUSE_URL, DEFAULT_TANTIVY_ROOT, Shared, ValueError};

/// What the operator needs to know to build provisioning Jobs. The ClickHouse admin credentials are
/// not here: only the *name* of their Secret, which the Job reads through `secretKeyRef`s.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct OperatorConfig {
    #[command(flatten)]
    pub shared: Shared,
    /// Image of the provisioning Jobs: the operator's own image, which carries `provision-tenant`.
    #[arg(long, env = "SENTRY_TENANTS_IMAGE", default_value = crate::DEFAULT_IMAGE)]
    pub image: String,
    /// ServiceAccount the provisioning pods run as.
    #[arg(
        long,
        env = "SENTRY_TENANTS_PROVISIONER_SERVICE_ACCOUNT",
        default_value = "sentry-tenants-provisioner"
    )]
    pub provisioner_service_account: String,
    /// Secret (keys `username`, `password`) with the ClickHouse admin credentials, read only by the Job's pod.
    #[arg(
        long,
        env = "SENTRY_TENANTS_CLICKHOUSE_ADMIN_SECRET",
        default_value = "clickhouse-admin"
    )]
    pub clickhouse_admin_secret: String,
    /// Run every provisioning statement `ON CLUSTER` this ClickHouse cluster.
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_CLUSTER")]
    pub clickhouse_cluster: Option<String>,
    /// What new tenants' ClickHouse names start with; default: derived from --namespace.
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_PREFIX")]
    pub clickhouse_prefix: Option<String>,
    /// ConfigMap (key `ca.crt`) mounted into provisioning Jobs to verify an `https://` ClickHouse URL.
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_CA_CONFIGMAP")]
    pub clickhouse_ca_configmap: Option<String>,
    /// Runs that may have a Job (a pod, a ClickHouse session) at once; further runs wait, oldest first.
    #[arg(
        long,
        env = "SENTRY_TENANTS_MAX_CONCURRENT_RUNS",
        default_value_t = DEFAULT_MAX_CONCURRENT_RUNS,
        value_parser = clap::value_parser!(u16).range(1..=MAX_CONCURRENT_RUNS_LIMIT as i64)
    )]
    pub max_concurrent_runs: u16,
    /// Reconciles each controller runs at once (each is mostly waiting on the API).
    #[arg(
        long,
        env = "SENTRY_TENANTS_MAX_CONCURRENT_RECONCILES",
        default_value_t = DEFAULT_MAX_CONCURRENT_RECONCILES,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub max_concurrent_reconciles: u16,
    /// Every shard of this install (`install --shards`). Empty: one operator reconciles every tenant.
    /// Set: the operator started without `--shard` is the main one, which assigns unlabelled tenants
    /// to a shard (the `sentry.io/shard` label) and reconciles only the runs whose tenant is gone.
    #[arg(
        long,
        env = "SENTRY_TENANTS_SHARDS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub shards: Vec<String>,
    /// The shard this operator reconciles: the tenants labelled `sentry.io/shard=<NAME>` and their runs.
    #[arg(long, env = "SENTRY_TENANTS_SHARD", value_name = "NAME")]
    pub shard: Option<String>,
}

/// The highest `--max-concurrent-runs` accepted.
pub const MAX_CONCURRENT_RUNS_LIMIT: u16 = 1000;
/// The default cap on runs in flight; see the measurement in BENCHMARKS.md ("runs in flight").
pub const DEFAULT_MAX_CONCURRENT_RUNS: u16 = 20;
/// Reconciles per controller at once, by default: enough to keep the API busy, bounded so that gaining
/// leadership over 20,000 objects queues them instead of starting 20,000 at once.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 16;

impl OperatorConfig {
    /// Checks every setting before the process connects anywhere: a typo is one clear line at start,
    /// not a Job that fails later. Same rules and messages as `install`'s flags.
    pub fn validate(&self) -> Result<(), ValueError> {
        ValueError::check_namespace(&self.shared.namespace)?;
        ValueError::check_image(&self.image)?;
        ValueError::check_service_account(&self.provisioner_service_account)?;
        ValueError::check_clickhouse_url(&self.shared.clickhouse_url)?;
        ValueError::check_secret(&self.clickhouse_admin_secret)?;
        ValueError::check_cluster(self.clickhouse_cluster.as_deref())?;
        ValueError::check_prefix(self.clickhouse_prefix.as_deref())?;
        ValueError::check_ca_configmap(self.clickhouse_ca_configmap.as_deref())?;
        ValueError::check_shards(&self.shards, self.shard.as_deref())?;
        if !is_absolute_path(&self.shared.tantivy_root) {
            return Err(ValueError::TantivyRoot(self.shared.tantivy_root.clone()));
        }
        Ok(())
    }

    /// Defaults, as `run` would see them with no flags or environment.
    pub fn for_namespace(namespace: &str) -> Self {
        Self {
            shared: Shared {
                namespace: namespace.to_owned(),
                clickhouse_url: DEFAULT_CLICKHOUSE_URL.to_owned(),
                tantivy_root: DEFAULT_TANTIVY_ROOT.to_owned(),
            },
            image: crate::DEFAULT_IMAGE.to_owned(),
            provisioner_service_account: "sentry-tenants-provisioner".to_owned(),
            clickhouse_admin_secret: "clickhouse-admin".to_owned(),
            clickhouse_cluster: None,
            clickhouse_prefix: None,
            clickhouse_ca_configmap: None,
            max_concurrent_runs: DEFAULT_MAX_CONCURRENT_RUNS,
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
            shards: Vec::new(),
            shard: None,
        }
    }
}

fn is_absolute_path(s: &str) -> bool {
    s.starts_with('/')
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !"\"'`\\".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_tantivy_root(root: &str) -> OperatorConfig {
        let mut config = OperatorConfig::for_namespace("sentry-tenants");
        config.shared.tantivy_root = root.to_owned();
        config
    }

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(
            OperatorConfig::for_namespace("sentry-tenants").validate(),
            Ok(())
        );
    }

    #[test]
    fn a_malformed_namespace_is_refused_before_the_operator_starts() {
        let config = OperatorConfig::for_namespace("Not_A_Label");
        assert_eq!(
            config.validate(),
            Err(ValueError::Namespace("Not_A_Label".to_owned()))
        );
    }

    #[test]
    fn the_tantivy_root_is_an_absolute_path_without_spaces_or_quotes() {
        assert_eq!(
            with_tantivy_root("/var/lib/tantivy-1.0_x").validate(),
            Ok(())
        );
        for root in [
            "var/lib/tantivy",
            "",
            "/var/lib/my tantivy",
            "/var/lib/\"tantivy\"",
            "/var/lib/'tantivy'",
            "/var/lib/`tantivy`",
            "/var/lib\\tantivy",
            "/var/lib/tantivé",
            "/var/lib/\ttantivy",
        ] {
            let refused = with_tantivy_root(root).validate();
            assert_eq!(
                refused,
                Err(ValueError::TantivyRoot(root.to_owned())),
                "{root:?}"
            );
            assert_eq!(
                refused.unwrap_err().to_string(),
                format!(
                    "--tantivy-root {root:?} must be an absolute path without spaces or quotes"
                )
            );
        }
    }
}
