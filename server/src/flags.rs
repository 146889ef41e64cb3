//! The rule and the words for each command-line value, shared by `install`, `run` and
//! `provision-tenant`: the same flag is checked the same way and refused in the same words wherever it
//! is given.

/// The install namespace when none is given, everywhere a command takes one.
pub const DEFAULT_NAMESPACE: &str = "sentry-tenants";
pub const DEFAULT_CLICKHOUSE_URL: &str = "http://clickhouse:8123";
pub const DEFAULT_TANTIVY_ROOT: &str = "/var/lib/sentry/tantivy";

/// The settings `run` and `provision-tenant` both take, declared once: the operator hands them to its
/// Jobs through these same environment variables.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    /// Namespace of the install: the operator watches it (RBAC is namespaced), and the tenants, their
    /// runs and credentials Secrets live there.
    #[arg(long, short = 'n', env = "SENTRY_TENANTS_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// ClickHouse HTTP endpoint the provisioner talks to; also written into each tenant's credentials
    /// Secret.
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_URL", default_value = DEFAULT_CLICKHOUSE_URL)]
    pub clickhouse_url: String,
    /// Root under which each tenant's Tantivy index path is derived (`<root>/<tenant>`).
    #[arg(long, env = "SENTRY_TENANTS_TANTIVY_ROOT", default_value = DEFAULT_TANTIVY_ROOT)]
    pub tantivy_root: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValueError {
    #[error(
        "--namespace {0:?} is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)"
    )]
    Namespace(String),
    #[error(
        "--image {0:?} is not a valid image reference (e.g. registry.example.com/team/sentry-tenants:v1.2.3)"
    )]
    Image(String),
    #[error(
        "--tag {0:?} is not an image name with an optional tag (e.g. registry.example.com/team/sentry-tenants:v1.2.3; lowercase, and no @digest: the digest is the image's own)"
    )]
    ImageTag(String),
    #[error("--replicas {0} is out of range (1 to 10)")]
    Replicas(u8),
    #[error("--clickhouse-url {0:?} must be an http:// or https:// URL without spaces or quotes")]
    ClickHouseUrl(String),
    #[error(
        "--clickhouse-url must not carry credentials (user:password@): it is stored in a ConfigMap and shown by `kubectl get`; put them in the admin Secret"
    )]
    ClickHouseUrlCredentials,
    #[error(
        "--clickhouse-admin-secret {0:?} is not a valid Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)"
    )]
    Secret(String),
    #[error(
        "--image-pull-secret {0:?} is not a valid Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)"
    )]
    ImagePullSecret(String),
    #[error(
        "--provisioner-service-account {0:?} is not a valid ServiceAccount name (lowercase letters, digits, '-' and '.', at most 253 characters)"
    )]
    ServiceAccount(String),
    #[error("--tantivy-root {0:?} must be an absolute path without spaces or quotes")]
    TantivyRoot(String),
    #[error(
        "--clickhouse-cluster {0:?} is not a ClickHouse cluster name (letters, digits, '_', '-', '.', starting with a letter or '_')"
    )]
    Cluster(String),
    #[error(
        "--clickhouse-prefix {0:?} is not a ClickHouse name prefix (1 to 24 lowercase letters and digits, starting with a letter; no '_')"
    )]
    Prefix(String),
    #[error(
        "--clickhouse-ca-configmap {0:?} is not a valid ConfigMap name (lowercase letters, digits, '-' and '.', at most 253 characters)"
    )]
    CaConfigMap(String),
    #[error(
        "--metrics-from-namespace {0:?} is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)"
    )]
    MetricsNamespace(String),
    #[error(
        "--shards {0:?} is not a shard name (1 to {max} lowercase letters, digits and '-', starting and ending with a letter or digit)",
        max = MAX_SHARD_NAME
    )]
    Shard(String),
    #[error("--shards names {0:?} twice")]
    DuplicateShard(String),
    #[error("--shard {0:?} is not one of --shards {1:?}")]
    UnlistedShard(String, Vec<String>),
}

/// The longest shard name: it ends up in a Deployment's name (`sentry-tenants-shard-<name>`), whose
/// pods' names must stay within 63 characters with the suffixes Kubernetes adds.
pub const MAX_SHARD_NAME: usize = 20;

/// One check per flag, shared by `install`, `run` and `provision-tenant` (same flag, same rule, same words).
impl ValueError {
    fn check(ok: bool, err: impl FnOnce() -> Self) -> Result<(), Self> {
        if ok { Ok(()) } else { Err(err()) }
    }
    pub fn check_namespace(s: &str) -> Result<(), Self> {
        Self::check(is_dns_label(s), || Self::Namespace(s.to_owned()))
    }
    pub fn check_image(s: &str) -> Result<(), Self> {
        Self::check(is_image_reference(s), || Self::Image(s.to_owned()))
    }

    /// A name an image is given (exported, pushed): a reference without a digest, its repository in
    /// lowercase as registries require.
    pub fn check_image_tag(s: &str) -> Result<(), Self> {
        let name_end = s.rfind(':').filter(|colon| !s[*colon..].contains('/'));
        let repository = &s[..name_end.unwrap_or(s.len())];
        let ok = is_image_reference(s)
            && !s.contains('@')
            && !repository.chars().any(|c| c.is_ascii_uppercase());
        Self::check(ok, || Self::ImageTag(s.to_owned()))
    }
    pub fn check_clickhouse_url(s: &str) -> Result<(), Self> {
        Self::check(is_http_url(s), || Self::ClickHouseUrl(s.to_owned()))?;
        Self::check(!has_userinfo(s), || Self::ClickHouseUrlCredentials)
    }
    pub fn check_secret(s: &str) -> Result<(), Self> {
        Self::check(is_dns_subdomain(s), || Self::Secret(s.to_owned()))
    }

    pub fn check_image_pull_secret(s: &str) -> Result<(), Self> {
        Self::check(is_dns_subdomain(s), || Self::ImagePullSecret(s.to_owned()))
    }
    pub fn check_service_account(s: &str) -> Result<(), Self> {
        Self::check(is_dns_subdomain(s), || Self::ServiceAccount(s.to_owned()))
    }
    pub fn check_cluster(s: Option<&str>) -> Result<(), Self> {
        s.map_or(Ok(()), |s| {
            let valid = is_clickhouse_cluster_name(s);
            Self::check(valid, || Self::Cluster(s.to_owned()))
        })
    }
    pub fn check_prefix(s: Option<&str>) -> Result<(), Self> {
        s.map_or(Ok(()), |s| {
            let valid = crate::names::ClickHousePrefix::parse(s).is_ok();
            Self::check(valid, || Self::Prefix(s.to_owned()))
        })
    }
    /// Each shard name valid and listed once; this operator's own shard (if any) one of them.
    pub fn check_shards(shards: &[String], mine: Option<&str>) -> Result<(), Self> {
        for (i, shard) in shards.iter().enumerate() {
            let valid = shard.len() <= MAX_SHARD_NAME && is_dns_label(shard);
            Self::check(valid, || Self::Shard(shard.clone()))?;
            let repeated = shards[..i].contains(shard);
            Self::check(!repeated, || Self::DuplicateShard(shard.clone()))?;
        }
        mine.map_or(Ok(()), |mine| {
            let listed = shards.iter().any(|s| s == mine);
            Self::check(listed, || {
                Self::UnlistedShard(mine.to_owned(), shards.to_vec())
            })
        })
    }
    pub fn check_metrics_namespace(s: &str) -> Result<(), Self> {
        Self::check(is_dns_label(s), || Self::MetricsNamespace(s.to_owned()))
    }
    pub fn check_ca_configmap(s: Option<&str>) -> Result<(), Self> {
        s.map_or(Ok(()), |s| {
            Self::check(is_dns_subdomain(s), || Self::CaConfigMap(s.to_owned()))
        })
    }
}

pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// `[registry[:port]/]path[:tag][@sha256:digest]` — printable, no spaces or quotes, the shape container
/// runtimes accept.
fn is_image_reference(s: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "./:_-@".contains(c);
    !s.is_empty()
        && s.len() <= 512
        && s.chars().all(allowed)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !s.ends_with([':', '/', '@'])
}

/// Whether the URL's authority carries `user[:password]@`.
fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .contains('@')
}

fn is_http_url(s: &str) -> bool {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !"\"'`\\<>{}|^".contains(c))
}

/// A ClickHouse cluster's name as its configuration spells it (`remote_servers`): letters, digits,
/// '_', '-' and '.', starting with a letter or '_', at most 128 characters.
pub fn is_clickhouse_cluster_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}
