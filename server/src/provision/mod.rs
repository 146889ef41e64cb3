//! `sentry-tenants provision-tenant`: the single real actor of tenant provisioning. Only it talks to
//! ClickHouse, and only it writes the status fields that make a tenant Active. It runs inside the Job a
//! RunJob creates, and by hand with a kubeconfig.
//!
//! Order makes every step safe to retry: the credentials Secret is written *before* the user is created,
//! so a crash never leaves a ClickHouse user whose password nobody knows; an existing Secret's password
//! is always reused; a user whose Secret is gone is an error, never a silent rotation.

pub mod clickhouse;
pub mod copies;
pub mod error;
pub mod outage;
pub mod ownership;
pub mod rotation;
pub mod secret_marker;
pub mod sql;
mod tenant_sync;

pub use clickhouse::{Auth, ChError, ClickHouse, HttpClickHouse};
pub use error::ProvisionError;
pub use tenant_sync::{Enforces, PASSWORD_KEY, RETAINED_FOR, TenantSync};

use std::io::Write as _;

use clap::Args;

use kube::{Resource, ResourceExt};

use crate::crd::{ReclaimPolicy, RunAction, Tenant, TenantLimits};
use crate::names::{ClickHousePrefix, TenantName};
use ownership::{Claimant, Found, Verdict};
use sql::{Ident, MIN_VERSION, Owner, TenantIdents, parse_version};

/// Field manager of every write the provisioner makes.
pub const MANAGER: &str = "sentry-tenants-provisioner";

#[derive(Args, Debug, Clone)]
pub struct ProvisionArgs {
    /// The tenant (its name in the namespace).
    #[arg(env = "SENTRY_TENANTS_TENANT")]
    pub tenant: String,
    /// What to do.
    #[arg(long, env = "SENTRY_TENANTS_ACTION", default_value = "provision", value_parser = parse_action)]
    pub action: RunAction,
    #[command(flatten)]
    pub shared: crate::flags::Shared,
    /// ClickHouse admin user.
    #[arg(
        long,
        env = "SENTRY_TENANTS_CLICKHOUSE_USER",
        default_value = "default",
        hide_env_values = true
    )]
    pub clickhouse_user: String,
    /// ClickHouse admin password (prefer the environment variable: flags show up in `ps`).
    #[arg(
        long,
        env = "SENTRY_TENANTS_CLICKHOUSE_PASSWORD",
        default_value = "",
        hide_env_values = true,
        hide_default_value = true
    )]
    pub clickhouse_password: String,
    /// How credentials are sent over HTTP.
    #[arg(long, value_enum, default_value = "headers")]
    pub clickhouse_auth: Auth,
    /// Run every statement `ON CLUSTER` this cluster (its users must live in a replicated user
    /// directory: checked before anything is written).
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_CLUSTER", value_parser = parse_cluster)]
    pub clickhouse_cluster: Option<Ident>,
    /// What the tenant's ClickHouse names start with when it has none yet (`<prefix>_<tenant>`); by
    /// default derived from --namespace, as the operator derives it. A tenant keeps the names it has.
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_PREFIX", value_parser = parse_prefix)]
    pub clickhouse_prefix: Option<ClickHousePrefix>,
    /// PEM CA bundle that verifies an `https://` --clickhouse-url instead of the system's roots.
    #[arg(long, env = "SENTRY_TENANTS_CLICKHOUSE_CA_FILE")]
    pub clickhouse_ca_file: Option<std::path::PathBuf>,
    /// Deliberately issue a new password (never the default): updates the user and the Secret.
    #[arg(long)]
    pub rotate: bool,
    /// Print the SQL statements, one a line, password redacted, and execute nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run and --action deprovision: the reclaim policy whose statements to print (a real
    /// run reads the Tenant's spec.reclaimPolicy).
    #[arg(long, value_parser = parse_reclaim_policy, default_value = "Retain")]
    pub reclaim_policy: ReclaimPolicy,
    /// With --dry-run: spec.limits.maxMemoryPerQuery to print statements for (`4Gi`).
    #[arg(long, value_parser = parse_memory, requires = "dry_run")]
    pub max_memory_per_query: Option<String>,
    /// With --dry-run: spec.limits.maxExecutionSeconds.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=crate::limits::MAX_EXECUTION_SECONDS), requires = "dry_run")]
    pub max_execution_seconds: Option<i64>,
    /// With --dry-run: spec.limits.maxConcurrentQueries.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=crate::limits::MAX_CONCURRENT_QUERIES), requires = "dry_run")]
    pub max_concurrent_queries: Option<i64>,
    /// With --dry-run: spec.limits.queriesPerHour.
    #[arg(long, value_parser = clap::value_parser!(i64).range(1..=crate::limits::MAX_QUERIES_PER_HOUR), requires = "dry_run")]
    pub queries_per_hour: Option<i64>,
    /// Id of the RunJob this run belongs to (for logs).
    #[arg(long, env = "SENTRY_TENANTS_RUN_ID", hide = true)]
    pub run_id: Option<String>,
    /// Where Kubernetes reads a failed container's message from.
    #[arg(long, default_value = "/dev/termination-log", hide = true)]
    pub termination_log: std::path::PathBuf,
}

fn parse_action(s: &str) -> Result<RunAction, String> {
    s.parse()
}

fn parse_reclaim_policy(s: &str) -> Result<ReclaimPolicy, String> {
    s.parse()
}

fn parse_cluster(s: &str) -> Result<Ident, String> {
    Ident::cluster(s).map_err(|_| {
        format!("{s:?} is not a ClickHouse cluster name (letters, digits, '_', '-', '.', starting with a letter or '_')")
    })
}

fn parse_prefix(s: &str) -> Result<ClickHousePrefix, String> {
    ClickHousePrefix::parse(s).map_err(|e| e.to_string())
}

fn parse_memory(s: &str) -> Result<String, String> {
    crate::limits::memory(s)?.ok_or_else(|| "empty: leave the flag out for no limit".to_owned())
}

/// What a successful run did, for the log line and the Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Provisioned {
        database: String,
        created_credentials: bool,
    },
    /// Already Active: no DDL, status fields re-synced.
    Resynced {
        database: String,
    },
    Rotated {
        database: String,
    },
    /// A Rotate run: `old_valid_until` when the server kept the old password for the grace period.
    /// `earlier_still_valid`: passwords of earlier rotations still accepted until their own expiry.
    RotatedWithGrace {
        database: String,
        old_valid_until: Option<jiff::Timestamp>,
        earlier_still_valid: usize,
        version: String,
    },
    /// A Rotate run on a tenant whose credentials Secret had been deleted: a new Secret, a new
    /// password, every earlier one refused (their hashes were only in the deleted Secret).
    SecretRemade {
        database: String,
    },
    /// A Revoke run: `queries_ended` as for [`Outcome::Locked`].
    Revoked {
        database: String,
        queries_ended: Option<usize>,
    },
    /// A Suspend run: `queries_ended` is how many running queries of the user were asked to stop,
    /// `None` on a cluster (whose answer is each host's status, not the queries).
    Locked {
        queries_ended: Option<usize>,
    },
    Unlocked,
    /// A Suspend run for a tenant resumed since it was made, or a Resume run for one suspended since:
    /// ClickHouse left alone, so a late run never moves the lock away from the spec.
    Superseded {
        suspended: bool,
    },
    /// Provision of a new Tenant that took over what a deleted one of its name retained.
    Adopted {
        database: String,
    },
    /// Deprovision under reclaimPolicy Retain; `left_alone` what was not the tenant's.
    Retained {
        database: String,
        left_alone: Vec<String>,
    },
    /// Deprovision under reclaimPolicy Delete; `left_alone` what was not the tenant's.
    Dropped {
        database: String,
        left_alone: Vec<String>,
    },
    /// A SetLimits run: what ClickHouse now enforces.
    LimitsSet {
        limits: TenantLimits,
    },
    /// A Deliver run: every copy the tenant asks for holds its credentials; `removed` copies it no
    /// longer asks for were deleted.
    Delivered {
        copies: usize,
        removed: usize,
    },
}

impl Outcome {
    pub fn describe(&self) -> String {
        match self {
            Self::Provisioned {
                database,
                created_credentials: true,
            } => format!("provisioned database {database} with new credentials"),
            Self::Provisioned {
                database,
                created_credentials: false,
            } => {
                format!("provisioned database {database} with the credentials already on file")
            }
            Self::Resynced { database } => {
                format!("already provisioned ({database}); status re-synced, no DDL run")
            }
            Self::Rotated { database } => format!("rotated the credentials of {database}"),
            Self::RotatedWithGrace {
                database,
                old_valid_until: Some(until),
                earlier_still_valid,
                ..
            } => format!(
                "rotated the credentials of {database}: the Secret holds the new password; the old one is accepted until {}{}",
                until.strftime("%Y-%m-%dT%H:%M:%SZ"),
                match earlier_still_valid {
                    0 => String::new(),
                    1 => "; 1 password of an earlier rotation until its own expiry".to_owned(),
                    n => format!("; {n} passwords of earlier rotations until their own expiry"),
                }
            ),
            Self::RotatedWithGrace {
                database,
                old_valid_until: None,
                version,
                ..
            } => format!(
                "rotated the credentials of {database} in a single switch: ClickHouse {version} keeps one password per user (several arrived in {}.{}), so the old password stopped working at once",
                sql::MIN_OVERLAP_VERSION.0,
                sql::MIN_OVERLAP_VERSION.1
            ),
            Self::SecretRemade { database } => format!(
                "made the credentials Secret of {database} again with a new password; every earlier password stopped working at once (their hashes were kept only in the deleted Secret); copies rewritten"
            ),
            Self::Revoked {
                database,
                queries_ended,
            } => format!(
                "revoked every earlier password of {database} at once: the Secret holds the new one; {}",
                match queries_ended {
                    Some(0) => "no query of the tenant was running".to_owned(),
                    Some(1) => "1 running query of the tenant asked to stop".to_owned(),
                    Some(n) => format!("{n} running queries of the tenant asked to stop"),
                    None => "the tenant's running queries asked to stop on every host".to_owned(),
                }
            ),
            Self::Locked {
                queries_ended: Some(0),
            } => "ClickHouse logins locked; no query of the tenant was running".to_owned(),
            Self::Locked {
                queries_ended: Some(n),
            } => format!(
                "ClickHouse logins locked; {n} running {} of the tenant asked to stop",
                if *n == 1 { "query" } else { "queries" }
            ),
            Self::Locked {
                queries_ended: None,
            } => "ClickHouse logins locked; the tenant's running queries asked to stop on every host"
                .to_owned(),
            Self::Unlocked => "ClickHouse logins unlocked".to_owned(),
            Self::Superseded { suspended: true } => {
                "skipped: the tenant was suspended again after this Resume run was made; ClickHouse left as it was".to_owned()
            }
            Self::Superseded { suspended: false } => {
                "skipped: the tenant was resumed after this Suspend run was made; ClickHouse left as it was".to_owned()
            }
            Self::Adopted { database } => format!(
                "provisioned database {database} by adopting the user and credentials Secret a deleted tenant of this name retained"
            ),
            Self::Retained {
                database,
                left_alone,
            } if left_alone.is_empty() => format!(
                "retained database {database}, its user (logins locked) and its credentials Secret (labelled {RETAINED_FOR})"
            ),
            Self::Retained { left_alone, .. } => format!(
                "retained the credentials Secret (labelled {RETAINED_FOR}); {}",
                left_alone.join("; ")
            ),
            Self::Dropped {
                database,
                left_alone,
            } if left_alone.is_empty() => {
                format!("dropped database {database} and its user, deleted its credentials Secret")
            }
            Self::Dropped { left_alone, .. } => format!(
                "dropped what was this tenant's in ClickHouse and deleted its credentials Secret; {}",
                left_alone.join("; ")
            ),
            Self::LimitsSet { limits } => {
                format!("ClickHouse enforces {}", limits.describe())
            }
            Self::Delivered { copies, removed } => format!(
                "{} of the credentials up to date{}",
                match copies {
                    1 => "1 copy".to_owned(),
                    n => format!("{n} copies"),
                },
                match removed {
                    0 => String::new(),
                    1 => "; 1 copy no longer asked for deleted".to_owned(),
                    n => format!("; {n} copies no longer asked for deleted"),
                }
            ),
        }
    }
}

/// The credentials Secret as read, and what a copy of it holds: its copied keys and their hash.
struct Source {
    data: std::collections::BTreeMap<String, k8s_openapi::ByteString>,
    hash: String,
    secret: k8s_openapi::api::core::v1::Secret,
}

/// The provisioner: a ClickHouse connection and the Kubernetes side (tenant, Secret, status).
pub struct Provisioner<C> {
    pub clickhouse: C,
    pub clickhouse_url: String,
    pub sync: TenantSync,
    pub rotate: bool,
    /// Every statement `ON CLUSTER` this cluster.
    pub cluster: Option<Ident>,
    /// What a new tenant's ClickHouse names start with.
    pub prefix: ClickHousePrefix,
    /// When the old password of a rotation stops being valid is counted from this clock's now.
    pub clock: crate::clock::Clock,
}

impl<C: ClickHouse> Provisioner<C> {
    pub async fn run(
        &self,
        name: &TenantName,
        action: RunAction,
    ) -> Result<Outcome, ProvisionError> {
        let tenant = self.sync.tenant(name).await?;
        let owner = Owner {
            namespace: self.sync.namespace().to_owned(),
            tenant: name.to_string(),
            uid: tenant.uid().unwrap_or_default(),
        };
        let database = self.sync.database_of(name, &tenant, &self.prefix).await?;
        let ids = TenantIdents::for_tenant(name, &database, &owner)
            .map_err(|e| ProvisionError::ClickHouse {
                message: format!("cannot name the tenant's ClickHouse objects: {e}"),
            })?
            .on_cluster(self.cluster.clone());
        let deleting = tenant.meta().deletion_timestamp.is_some();
        let name_s = || name.to_string();
        match action {
            RunAction::Deprovision if !deleting => {
                Err(ProvisionError::NotDeleting { name: name_s() })
            }
            RunAction::Deprovision => self.deprovision(&tenant, &ids).await,
            _ if deleting => Err(ProvisionError::TenantDeleting { name: name_s() }),
            RunAction::Provision => self.provision(name, &tenant, &ids).await,
            RunAction::Rotate => self.rotate_credentials(name, &tenant, &ids).await,
            RunAction::Revoke => self.revoke_credentials(name, &tenant, &ids).await,
            RunAction::Suspend | RunAction::Resume => {
                self.set_locked(name, &tenant, &ids, action == RunAction::Suspend)
                    .await
            }
            RunAction::SetLimits => self.set_limits(name, &tenant, &ids).await,
            RunAction::Deliver => self.deliver(name, &tenant).await,
        }
    }

    /// A Deliver run: the copies brought up to the credentials on file (ClickHouse is not
    /// contacted), reported; a copy it could not write makes the run fail after the report, so the
    /// reconciler's next attempt waits its backoff.
    async fn deliver(&self, name: &TenantName, tenant: &Tenant) -> Result<Outcome, ProvisionError> {
        require_provisioned(name, tenant)?;
        let before = reported_copies(tenant).len();
        let credentials = self.deliver_and_report(name, tenant, false).await?;
        if let Some(detail) = copies::undelivered(&credentials.copies) {
            return Err(ProvisionError::CopiesUndelivered { detail });
        }
        let copies = credentials.copies.len();
        Ok(Outcome::Delivered {
            copies,
            removed: before.saturating_sub(copies),
        })
    }

    /// Brings the copies the tenant asks for up to its credentials Secret, deletes the ones it no
    /// longer asks for, makes sure the Secret's marker is there ([`secret_marker`]), and returns the
    /// report for `status.credentials` (not written here: each run writes it with the rest of its
    /// report). A Secret that changed while the copies were written (a rotation beside a Deliver
    /// run) is copied again, so a report never calls copies of an older password up to date.
    async fn deliver_copies(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        new_password: bool,
    ) -> Result<crate::crd::CredentialsStatus, ProvisionError> {
        let rotated_at = if new_password {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                self.clock.now(),
            ))
        } else {
            tenant
                .status
                .as_ref()
                .and_then(|s| s.credentials.as_ref())
                .and_then(|c| c.rotated_at.clone())
        };
        let mut source = self.source_credentials(name, tenant).await?;
        // The marker is made sure of once, for the Secret the report is about.
        let report = async |source: Source, copies| {
            let secret_uid =
                secret_marker::ensure(self.sync.client(), &source.secret, name.as_str()).await?;
            Ok(copies::Report {
                hash: source.hash,
                run: self.sync.run(),
                copies,
                rotated_at: rotated_at.clone(),
                secret_uid,
            }
            .into())
        };
        let previous = reported_copies(tenant);
        if tenant.spec.credential_copies().is_empty() && previous.is_empty() {
            return report(source, Vec::new()).await;
        }
        for _ in 0..3 {
            let written = (self.copier())
                .deliver(tenant, &source.data, &source.hash, previous)
                .await;
            let now = self.source_credentials(name, tenant).await?;
            if now.hash == source.hash {
                return report(now, written).await;
            }
            source = now;
        }
        Err(ProvisionError::Kubernetes {
            action: format!("copy Secret {}", name.credentials_secret()),
            detail: "it kept changing while its copies were written (rotations one after another?): run it again once they are done".into(),
        })
    }

    /// What a copy holds, read from the credentials Secret now, and its hash.
    async fn source_credentials(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<Source, ProvisionError> {
        let secret = self.sync.own_credentials_secret(name, tenant).await?;
        let data = copies::copied_data(&secret);
        let hash = copies::credentials_hash(&tenant.uid().unwrap_or_default(), &data);
        Ok(Source { data, hash, secret })
    }

    fn copier(&self) -> copies::Copier<'_> {
        copies::Copier {
            client: self.sync.client(),
            install_namespace: self.sync.namespace(),
            now: self.clock.now(),
        }
    }

    /// A SetLimits run: ClickHouse made to enforce the tenant's current `spec.limits` (read now, not
    /// when the run was made, so a late run never applies an older spec), then reported.
    async fn set_limits(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        ids: &TenantIdents,
    ) -> Result<Outcome, ProvisionError> {
        let limits = checked_limits(name, tenant)?;
        self.provisioned_user(name, tenant, ids).await?;
        for statement in sql::set_limits(ids, &limits) {
            self.exec(&statement.sql).await?;
        }
        let enforces = Enforces {
            locked: None,
            limits: Some(&limits),
        };
        self.sync
            .report(name, ids.database.as_str(), tenant, enforces, None)
            .await?;
        Ok(Outcome::LimitsSet { limits })
    }

    /// A Rotate run: a new password on file and in ClickHouse. Crash-safe: the new password is on file
    /// (as `pendingPassword`) before ClickHouse knows it, and a re-run reuses it; ClickHouse gets one
    /// statement that sets the whole state (old password until the grace ends, new one), so repeating
    /// it is harmless; only then does the Secret's `password` change.
    async fn rotate_credentials(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        ids: &TenantIdents,
    ) -> Result<Outcome, ProvisionError> {
        let version = self.provisioned_user(name, tenant, ids).await?;
        let (on_file, new) = self.passwords_to_switch(name, tenant).await?;
        let overlap = parse_version(&version).is_some_and(|v| v >= sql::MIN_OVERLAP_VERSION);
        let now = self.clock.now();
        let new_sha256 = sha256_hex(&new);
        // Every password still valid stays so until its own expiry, this rotation's old one too;
        // with the Secret gone, their hashes are gone with it and the new password is the only one.
        let until = overlap.then(|| now + tenant.spec.rotation_grace());
        let (statement, kept) = match (until, &on_file.current) {
            (Some(until), Some(old)) => {
                let old = sha256_hex(old);
                let kept = rotation::kept(&on_file.retiring, &old, &new_sha256, now, until);
                (sql::rotate_keeping(ids, &kept, &new_sha256), kept)
            }
            _ => (sql::rotate(ids, &new_sha256), Vec::new()),
        };
        self.exec(&statement.sql).await?;
        self.sync
            .commit_password(
                name,
                ids.database.as_str(),
                &self.clickhouse_url,
                &new,
                &kept,
            )
            .await?;
        self.deliver_and_report(name, tenant, true).await?;
        if !tenant.spec.suspended {
            self.verify_login(name, ids, &new).await?;
        }
        let database = ids.database.as_str().to_owned();
        Ok(match on_file.current {
            None => Outcome::SecretRemade { database },
            Some(_) => Outcome::RotatedWithGrace {
                database,
                old_valid_until: until,
                earlier_still_valid: kept.len().saturating_sub(1),
                version,
            },
        })
    }

    /// A Revoke run: a new password and no other, every earlier one refused at once (a rotation's
    /// grace included), and the tenant's running queries ended. Crash-safe as Rotate: the new password
    /// is on file as pending before ClickHouse hears of it, and a re-run reuses it.
    async fn revoke_credentials(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        ids: &TenantIdents,
    ) -> Result<Outcome, ProvisionError> {
        self.provisioned_user(name, tenant, ids).await?;
        let (_, new) = self.passwords_to_switch(name, tenant).await?;
        self.exec(&sql::rotate(ids, &sha256_hex(&new)).sql).await?;
        // After the switch, so that no query with an old password starts once these are asked to stop.
        let queries_ended = self.end_queries(ids).await?;
        self.sync
            .commit_password(name, ids.database.as_str(), &self.clickhouse_url, &new, &[])
            .await?;
        self.deliver_and_report(name, tenant, true).await?;
        if !tenant.spec.suspended {
            self.verify_login(name, ids, &new).await?;
        }
        Ok(Outcome::Revoked {
            database: ids.database.as_str().to_owned(),
            queries_ended,
        })
    }

    /// Copies brought up to the Secret (one a rotation just changed: the Secret and its copies
    /// change in one run), and `status.credentials` written; returns what was written.
    async fn deliver_and_report(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        new_password: bool,
    ) -> Result<crate::crd::CredentialsStatus, ProvisionError> {
        let credentials = self.deliver_copies(name, tenant, new_password).await?;
        self.sync
            .report_credentials(name, tenant, &credentials)
            .await?;
        Ok(credentials)
    }

    /// The passwords on file and the one a Rotate or Revoke switches to: left pending by a run cut
    /// short, else a fresh one, put on file before ClickHouse hears of it. A deleted Secret is made
    /// again with the new password alone: whoever started this run asked for new credentials.
    async fn passwords_to_switch(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<(tenant_sync::Passwords, String), ProvisionError> {
        let on_file = match self.sync.passwords_for_rotation(name, tenant).await? {
            Some(on_file) => on_file,
            None => {
                let fresh = tenant_sync::generate_password()?;
                self.sync.remake_secret(name, tenant, &fresh).await?
            }
        };
        let new = self.pending_or_fresh(name, &on_file).await?;
        Ok((on_file, new))
    }

    /// Asks the tenant's running queries to stop: how many there were, or `None` on a cluster (whose
    /// answer is each host's status, not the queries).
    async fn end_queries(&self, ids: &TenantIdents) -> Result<Option<usize>, ProvisionError> {
        let answer = self.exec(&sql::end_queries(ids).sql).await?;
        Ok(self
            .cluster
            .is_none()
            .then(|| answer.lines().filter(|l| !l.is_empty()).count()))
    }

    /// The new password of a rotation: the one a cut-short run left pending, else a fresh one put on
    /// file as pending before ClickHouse hears of it.
    async fn pending_or_fresh(
        &self,
        name: &TenantName,
        on_file: &tenant_sync::Passwords,
    ) -> Result<String, ProvisionError> {
        if let Some(pending) = &on_file.pending {
            return Ok(pending.clone());
        }
        let fresh = tenant_sync::generate_password()?;
        self.sync
            .store_pending_password(name, on_file, &fresh)
            .await?;
        Ok(fresh)
    }

    /// [`Self::pending_or_fresh`], for a tenant whose Secret is on file.
    async fn pending_password(
        &self,
        name: &TenantName,
        tenant: &Tenant,
    ) -> Result<String, ProvisionError> {
        let on_file = self
            .sync
            .passwords_for_rotation(name, tenant)
            .await?
            .ok_or(ProvisionError::BadSecret {
                secret: name.credentials_secret(),
            })?;
        self.pending_or_fresh(name, &on_file).await
    }

    /// Carries out the reclaim policy of a Tenant being deleted. Idempotent: a re-run finds the lock,
    /// the label or the drops already done.
    async fn deprovision(
        &self,
        tenant: &Tenant,
        ids: &TenantIdents,
    ) -> Result<Outcome, ProvisionError> {
        let name = TenantName::parse(&tenant.name_any())?;
        let database = ids.database.as_str().to_owned();
        self.check_server().await?;
        // A Secret that is not this tenant's proves nothing; it is left alone below as well.
        let on_file = self
            .sync
            .existing_password(&name, tenant)
            .await
            .ok()
            .flatten();
        let (user, db) = self.ownership(tenant, ids, on_file.as_deref()).await?;
        let left_alone: Vec<String> =
            [("user", &ids.user, &user), ("database", &ids.database, &db)]
                .into_iter()
                .filter(|(_, _, v)| !matches!(v, Verdict::Free | Verdict::Ours { .. }))
                .map(|(kind, ident, v)| not_ours_reason(kind, ident.as_str(), v))
                .collect();
        let mut left_alone = left_alone;
        left_alone.extend(self.copier().remove_all(tenant).await);
        let db_not_ours = matches!(db, Verdict::Foreign(_) | Verdict::Unproven);
        match tenant.spec.reclaim_policy {
            ReclaimPolicy::Retain => {
                if user.is_ours() {
                    self.exec(&sql::set_locked(ids, true).sql).await?;
                }
                self.sync.retain_secret(&name, tenant).await?;
                Ok(Outcome::Retained {
                    database,
                    left_alone,
                })
            }
            ReclaimPolicy::Delete => {
                // A user gone already (a run cut short after dropping it) leaves its profile and quota
                // to drop, unless the database says the names are someone else's.
                let what = sql::Drops {
                    user: user.is_ours() || user == Verdict::Free && !db_not_ours,
                    database: db.is_ours(),
                };
                for statement in sql::drop_tenant(ids, what) {
                    self.exec(&statement.sql).await?;
                }
                self.sync.delete_secret(&name, tenant).await?;
                Ok(Outcome::Dropped {
                    database,
                    left_alone,
                })
            }
        }
    }

    async fn provision(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        ids: &TenantIdents,
    ) -> Result<Outcome, ProvisionError> {
        let database = ids.database.as_str().to_owned();
        let locked = tenant.spec.suspended;
        // An Active tenant's user is never re-provisioned: only its status is re-synced (retrying a failed
        // sync, back-filling an old tenant).
        if tenant.is_provisioned() && !self.rotate {
            self.sync
                .existing_password(name, tenant)
                .await?
                .ok_or_else(|| would_rotate(name, ids))?;
            let credentials = self.deliver_copies(name, tenant, false).await?;
            self.sync
                .report(
                    name,
                    ids.database.as_str(),
                    tenant,
                    Enforces::default(),
                    Some(&credentials),
                )
                .await?;
            return Ok(Outcome::Resynced { database });
        }

        let limits = checked_limits(name, tenant)?;
        self.check_server().await?;
        // What a deleted Tenant of this name retained becomes this one's: said in the outcome and its
        // Event, and never a new password.
        let adopted = self.sync.adopt_retained(name, tenant).await?;
        let tenant = &if adopted {
            self.sync.tenant(name).await?
        } else {
            tenant.clone()
        };
        let on_file = self.sync.existing_password(name, tenant).await?;
        let (user, db) = self.ownership(tenant, ids, on_file.as_deref()).await?;
        refuse_unless_ours("user", ids.user.as_str(), &user)?;
        refuse_unless_ours("database", ids.database.as_str(), &db)?;
        let user_exists = user != Verdict::Free;
        let (password, created) = match (on_file, user_exists, self.rotate) {
            (Some(password), _, false) => (password, false),
            (None, true, false) => {
                return Err(would_rotate(name, ids));
            }
            // A deliberate rotation of credentials on file, crash-safe as a Rotate run: the new
            // password waits as `pendingPassword` (a re-run takes it up) and becomes the one on file
            // only once ClickHouse has it, so the Secret never holds a password ClickHouse refuses.
            (Some(_), _, true) => (self.pending_password(name, tenant).await?, true),
            // New credentials: on file *before* the user exists, so no crash can lose them. If another
            // run stored some first, theirs are used.
            (None, _, _) => {
                let password = tenant_sync::generate_password()?;
                let stored = self
                    .sync
                    .store_password(
                        name,
                        tenant,
                        ids.database.as_str(),
                        &self.clickhouse_url,
                        &password,
                    )
                    .await?;
                let created = stored == password;
                (stored, created)
            }
        };
        let hash = sha256_hex(&password);
        for statement in sql::provision(ids, &hash, locked) {
            self.exec(&statement.sql).await?;
        }
        self.drop_predecessor_marks(ids, [&user, &db]).await?;
        // `CREATE USER IF NOT EXISTS` leaves an existing user's hosts alone: a user made by an earlier
        // attempt (before the tenant was suspended, say) gets the lock this run reports.
        if user_exists {
            self.exec(&sql::set_locked(ids, locked).sql).await?;
        }
        // A new user has no profile or quota yet: with no limits there is nothing to drop.
        if user_exists || !limits.is_empty() {
            for statement in sql::set_limits(ids, &limits) {
                self.exec(&statement.sql).await?;
            }
        }
        let rotated = self.rotate && user_exists;
        if rotated {
            self.exec(&sql::rotate(ids, &hash).sql).await?;
            self.sync
                .commit_password(
                    name,
                    ids.database.as_str(),
                    &self.clickhouse_url,
                    &password,
                    &[],
                )
                .await?;
        }
        if !locked {
            self.verify_login(name, ids, &password).await?;
        }
        let enforces = Enforces {
            locked: Some(locked),
            limits: Some(&limits),
        };
        let credentials = self
            .deliver_copies(name, tenant, created || rotated)
            .await?;
        self.sync
            .report(
                name,
                ids.database.as_str(),
                tenant,
                enforces,
                Some(&credentials),
            )
            .await?;
        Ok(if rotated {
            Outcome::Rotated { database }
        } else if adopted {
            Outcome::Adopted { database }
        } else {
            Outcome::Provisioned {
                database,
                created_credentials: created,
            }
        })
    }

    async fn set_locked(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        ids: &TenantIdents,
        locked: bool,
    ) -> Result<Outcome, ProvisionError> {
        require_provisioned(name, tenant)?;
        // The run was made for a spec that has changed since (its pod started late, or the operator
        // decided from a stale cache): the run for the current spec does the work, if any is needed.
        if tenant.spec.suspended != locked {
            return Ok(Outcome::Superseded {
                suspended: tenant.spec.suspended,
            });
        }
        self.provisioned_user(name, tenant, ids).await?;
        self.exec(&sql::set_locked(ids, locked).sql).await?;
        // After the lock, so that no new query can start once these are asked to stop.
        let queries_ended = if locked {
            Some(self.end_queries(ids).await?)
        } else {
            None
        };
        let enforces = Enforces {
            locked: Some(locked),
            limits: None,
        };
        self.sync
            .report(name, ids.database.as_str(), tenant, enforces, None)
            .await?;
        Ok(match queries_ended {
            Some(queries_ended) => Outcome::Locked { queries_ended },
            None => Outcome::Unlocked,
        })
    }

    /// What every run on a provisioned tenant's existing user checks first: the tenant is provisioned
    /// (else nothing is contacted), the server will do ([`Self::check_server`], whose version it
    /// returns), and the user exists — a missing one is an error, never silently re-created.
    async fn provisioned_user(
        &self,
        name: &TenantName,
        tenant: &Tenant,
        ids: &TenantIdents,
    ) -> Result<String, ProvisionError> {
        require_provisioned(name, tenant)?;
        let version = self.check_server().await?;
        let on_file = self.sync.existing_password(name, tenant).await?;
        let (user, db) = self.ownership(tenant, ids, on_file.as_deref()).await?;
        if user == Verdict::Free {
            return Err(ProvisionError::UserMissing {
                name: name.to_string(),
                user: ids.user.as_str().to_owned(),
            });
        }
        refuse_unless_ours("user", ids.user.as_str(), &user)?;
        // A tenant provisioned before owner marks existed (or whose name a deleted one had) is marked
        // at its next run.
        if user.needs_mark() || db.needs_mark() {
            self.exec(&sql::create_owner_role(ids).sql).await?;
        }
        if db.needs_mark() {
            self.exec(&sql::mark_database(ids).sql).await?;
        }
        if user.needs_mark() {
            self.exec(&sql::mark_user(ids).sql).await?;
        }
        self.drop_predecessor_marks(ids, [&user, &db]).await?;
        Ok(version)
    }

    /// Whose the user and the database are (see [`ownership`]); `on_file` is the password in the
    /// tenant's own Secret, tried as a login only when it decides.
    async fn ownership(
        &self,
        tenant: &Tenant,
        ids: &TenantIdents,
        on_file: Option<&str>,
    ) -> Result<(Verdict, Verdict), ProvisionError> {
        let [user_exists, user_roles, db_exists, db_roles] = sql::ownership_probe(ids);
        let found = async |exists: &sql::Statement, roles: &sql::Statement| {
            Ok::<_, ProvisionError>(if self.exec(&exists.sql).await?.trim() == "0" {
                Found::Absent
            } else {
                Found::Present(ownership::owners_in(&self.exec(&roles.sql).await?))
            })
        };
        let user_found = found(&user_exists, &user_roles).await?;
        let db_found = found(&db_exists, &db_roles).await?;
        let claimant = Claimant { tenant, ids };
        let needs_login =
            matches!(&user_found, Found::Present(marks) if !marks.contains(&ids.owner));
        let logs_in = match on_file {
            Some(password) if needs_login => self.logs_in(ids, password).await?,
            _ => false,
        };
        let has_secret = on_file.is_some();
        let user = claimant.user(&user_found, logs_in, has_secret);
        let db = claimant.database(&db_found, &user, has_secret);
        Ok((user, db))
    }

    /// Whether `password` logs in as the tenant's user now.
    async fn logs_in(&self, ids: &TenantIdents, password: &str) -> Result<bool, ProvisionError> {
        match self
            .clickhouse
            .query_as(ids.user.as_str(), password, "SELECT 1")
            .await
        {
            Ok(_) => Ok(true),
            Err(ChError::Server { .. }) => Ok(false),
            Err(e) => Err(ProvisionError::from_clickhouse(&self.clickhouse_url, e)),
        }
    }

    /// The marks of deleted Tenants of this name on what this one has now marked as its own.
    async fn drop_predecessor_marks(
        &self,
        ids: &TenantIdents,
        verdicts: [&Verdict; 2],
    ) -> Result<(), ProvisionError> {
        let mut roles: Vec<Ident> = verdicts
            .iter()
            .flat_map(|v| v.predecessors())
            .map(Owner::role)
            .collect();
        // The user and the database usually carry the same predecessors: each dropped once.
        roles.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        roles.dedup_by(|a, b| a.as_str() == b.as_str());
        for role in roles {
            self.exec(&sql::drop_role(ids, &role).sql).await?;
        }
        Ok(())
    }

    async fn exec(&self, sql: &str) -> Result<String, ProvisionError> {
        self.clickhouse
            .query(sql)
            .await
            .map_err(|e| ProvisionError::from_clickhouse(&self.clickhouse_url, e))
    }

    /// Refuses, before anything is written anywhere, a server without SQL access control and, with
    /// `--clickhouse-cluster`, a cluster it does not know or whose users are not replicated. Returns
    /// the server's version.
    pub async fn check_server(&self) -> Result<String, ProvisionError> {
        let version = self
            .exec(&sql::select_version().sql)
            .await?
            .trim()
            .to_owned();
        if parse_version(&version).is_none_or(|v| v < MIN_VERSION) {
            return Err(ProvisionError::ServerTooOld { version });
        }
        if let Some(cluster) = &self.cluster {
            self.check_cluster(cluster).await?;
        }
        Ok(version)
    }

    async fn check_cluster(&self, cluster: &Ident) -> Result<(), ProvisionError> {
        let [known, replicated] = sql::cluster_checks(cluster);
        if self.exec(&known.sql).await?.trim() == "0" {
            return Err(ProvisionError::ClusterUnknown {
                cluster: cluster.as_str().to_owned(),
            });
        }
        let detail = match self.clickhouse.query(&replicated.sql).await {
            Ok(count) if count.trim() != "0" => return Ok(()),
            Ok(_) => String::new(),
            // A server from before system.user_directories cannot have replicated ones.
            Err(ChError::Server {
                code: Some(clickhouse::codes::UNKNOWN_TABLE),
                ..
            }) => " (it has no system.user_directories table)".to_owned(),
            Err(e) => return Err(ProvisionError::from_clickhouse(&self.clickhouse_url, e)),
        };
        Err(ProvisionError::ClusterUsersNotReplicated {
            cluster: cluster.as_str().to_owned(),
            detail,
        })
    }

    /// The credentials on file must really log in; a user made some other way with another password
    /// is reported, not overwritten.
    async fn verify_login(
        &self,
        name: &TenantName,
        ids: &TenantIdents,
        password: &str,
    ) -> Result<(), ProvisionError> {
        match self
            .clickhouse
            .query_as(ids.user.as_str(), password, "SELECT 1")
            .await
        {
            Ok(_) => Ok(()),
            Err(ChError::Server {
                code:
                    Some(
                        clickhouse::codes::AUTHENTICATION_FAILED
                        | clickhouse::codes::WRONG_PASSWORD,
                    ),
                ..
            })
            | Err(ChError::Server { status: 401, .. }) => Err(ProvisionError::PasswordMismatch {
                tenant: name.to_string(),
                user: ids.user.as_str().to_owned(),
                secret: name.credentials_secret(),
            }),
            Err(e) => Err(ProvisionError::from_clickhouse(&self.clickhouse_url, e)),
        }
    }
}

/// Refuses, before any statement, an object this tenant cannot prove its own.
fn refuse_unless_ours(kind: &str, name: &str, verdict: &Verdict) -> Result<(), ProvisionError> {
    match verdict {
        Verdict::Free | Verdict::Ours { .. } => Ok(()),
        _ => Err(ProvisionError::NotOurs {
            reason: not_ours_reason(kind, name, verdict),
        }),
    }
}

/// Why an object is left alone: whose it is, or that nothing proves it this tenant's.
fn not_ours_reason(kind: &str, name: &str, verdict: &Verdict) -> String {
    match verdict {
        Verdict::Foreign(owner) => {
            format!("ClickHouse {kind} {name} belongs to {owner}, not to this tenant: left alone")
        }
        _ => format!(
            "ClickHouse {kind} {name} exists but was not made by sentry-tenants for this tenant (it carries no owner mark, the tenant's status does not record it, and the tenant's credentials do not log in to it): left alone"
        ),
    }
}

/// The copies `status.credentials` reports.
fn reported_copies(tenant: &Tenant) -> &[crate::crd::CopyStatus] {
    tenant
        .status
        .as_ref()
        .and_then(|s| s.credentials.as_ref())
        .map(|c| c.copies.as_slice())
        .unwrap_or_default()
}

fn require_provisioned(name: &TenantName, tenant: &Tenant) -> Result<(), ProvisionError> {
    if tenant.is_provisioned() {
        Ok(())
    } else {
        Err(ProvisionError::NotProvisioned {
            name: name.to_string(),
        })
    }
}

/// The spec's limits, refused (not half-applied) when one was written around the schema.
fn checked_limits(name: &TenantName, tenant: &Tenant) -> Result<TenantLimits, ProvisionError> {
    let limits = tenant.spec.limits();
    match &limits.max_memory_per_query {
        Some(value) if limits.memory_bytes().is_none() => Err(ProvisionError::BadLimit {
            name: name.to_string(),
            value: value.clone(),
        }),
        _ => Ok(limits),
    }
}

/// A user whose password on file is gone: never silently replaced.
fn would_rotate(name: &TenantName, ids: &TenantIdents) -> ProvisionError {
    ProvisionError::WouldRotate {
        tenant: name.to_string(),
        user: ids.user.as_str().to_owned(),
        secret: name.credentials_secret(),
    }
}

pub use crate::digest::sha256_hex;

impl ProvisionArgs {
    /// The install's prefix: the one given, or the one its namespace derives.
    pub fn prefix(&self) -> ClickHousePrefix {
        self.clickhouse_prefix
            .clone()
            .unwrap_or_else(|| ClickHousePrefix::for_namespace(&self.shared.namespace))
    }

    /// The tenant, once every flag has been checked: nothing is contacted with a malformed one.
    fn checked_tenant(&self) -> Result<TenantName, ProvisionError> {
        use crate::flags::ValueError;
        let name = TenantName::parse(&self.tenant)?;
        ValueError::check_namespace(&self.shared.namespace)?;
        ValueError::check_clickhouse_url(&self.shared.clickhouse_url)?;
        Ok(name)
    }
}

/// The statements `--dry-run` prints: the plan for a tenant that is not suspended, password redacted.
pub fn dry_run(args: &ProvisionArgs) -> Result<Vec<String>, ProvisionError> {
    let name = args.checked_tenant()?;
    // Offline, the Tenant's uid is unknown: the owner role is printed with a zero uid.
    let owner = Owner {
        namespace: args.shared.namespace.clone(),
        tenant: name.to_string(),
        uid: "00000000-0000-0000-0000-000000000000".to_owned(),
    };
    let database = args.prefix().database(&name);
    let ids = TenantIdents::for_tenant(&name, &database, &owner)
        .expect("derived from a validated tenant name, prefix and namespace")
        .on_cluster(args.clickhouse_cluster.clone());
    let desired = sql::Desired {
        locked: false,
        reclaim: args.reclaim_policy,
        limits: TenantLimits {
            max_memory_per_query: args.max_memory_per_query.clone(),
            max_execution_seconds: args.max_execution_seconds,
            max_concurrent_queries: args.max_concurrent_queries,
            queries_per_hour: args.queries_per_hour,
        },
    };
    Ok(sql::plan(args.action, &ids, "<redacted>", &desired)
        .iter()
        .map(ToString::to_string)
        .collect())
}

/// The subcommand: dry-run, or a real run whose failure is one line on stderr and in the termination log.
pub async fn main(args: ProvisionArgs) -> anyhow::Result<()> {
    if args.dry_run {
        let mut out = std::io::stdout().lock();
        for line in dry_run(&args)? {
            writeln!(out, "{line};")?;
        }
        return Ok(());
    }
    let result = run(&args).await;
    match &result {
        Ok(outcome) => {
            tracing::info!(tenant = %args.tenant, action = args.action.as_str(), run_id = ?args.run_id, "{}", outcome.describe())
        }
        Err(error) => {
            // Kubernetes copies this file into the pod status; the RunJob controller makes it the run's message.
            let _ = std::fs::write(&args.termination_log, error.to_string());
        }
    }
    result.map(|_| ()).map_err(anyhow::Error::from)
}

async fn run(args: &ProvisionArgs) -> Result<Outcome, ProvisionError> {
    let name = args.checked_tenant()?;
    let client = crate::cluster::connect()
        .await
        .map_err(|e| ProvisionError::Kubernetes {
            action: "connect".into(),
            detail: e.to_string(),
        })?;
    let clickhouse = clickhouse_client(args)?;
    let provisioner = Provisioner {
        clickhouse,
        clickhouse_url: args.shared.clickhouse_url.clone(),
        sync: TenantSync::new(
            client.clone(),
            &args.shared.namespace,
            &args.shared.tantivy_root,
        )
        .for_run(args.run_id.clone()),
        rotate: args.rotate,
        cluster: args.clickhouse_cluster.clone(),
        prefix: args.prefix(),
        clock: crate::clock::Clock::System,
    };
    let outcome = outage::outlasting_api_outages(
        async || outage::apiserver_ready(&client).await,
        async || provisioner.run(&name, args.action).await,
    )
    .await?;
    provisioner.sync.announce(&name, &outcome).await;
    Ok(outcome)
}

/// The admin's connection to ClickHouse, as the flags say: its CA bundle, and for a run `ON CLUSTER`
/// the distributed DDL timeout and a deadline longer than it.
fn clickhouse_client(args: &ProvisionArgs) -> Result<HttpClickHouse, ProvisionError> {
    let clickhouse = match &args.clickhouse_ca_file {
        None => HttpClickHouse::new(
            &args.shared.clickhouse_url,
            &args.clickhouse_user,
            &args.clickhouse_password,
            args.clickhouse_auth,
        ),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| ProvisionError::CaFile {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
            HttpClickHouse::with_ca_bundle(
                &args.shared.clickhouse_url,
                &args.clickhouse_user,
                &args.clickhouse_password,
                args.clickhouse_auth,
                &pem,
            )
        }
    }
    .map_err(|e| ProvisionError::from_clickhouse(&args.shared.clickhouse_url, e))?;
    Ok(match args.clickhouse_cluster {
        Some(_) => clickhouse.for_cluster(),
        None => clickhouse,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::ProvisionArgs,
    }

    fn parse(extra: &[&str]) -> Result<super::ProvisionArgs, clap::Error> {
        let argv = ["provision-tenant", "acme"].iter().chain(extra);
        Cli::try_parse_from(argv).map(|cli| cli.args)
    }

    #[test]
    fn a_dry_runs_reclaim_policy_and_memory_limit_are_read_from_their_flags() {
        let args = parse(&[
            "--dry-run",
            "--action",
            "deprovision",
            "--reclaim-policy",
            "Delete",
            "--max-memory-per-query",
            "4Gi",
        ])
        .unwrap();
        assert_eq!(args.reclaim_policy, super::ReclaimPolicy::Delete);
        assert_eq!(args.max_memory_per_query.as_deref(), Some("4Gi"));
        let defaults = parse(&["--dry-run"]).unwrap();
        assert_eq!(defaults.reclaim_policy, super::ReclaimPolicy::Retain);
        assert_eq!(defaults.max_memory_per_query, None);
    }

    #[test]
    fn a_dry_run_lists_the_statements_of_the_action_in_order() {
        let args = parse(&[
            "--action",
            "deprovision",
            "--clickhouse-prefix",
            "tenant",
            "--dry-run",
        ])
        .unwrap();
        assert_eq!(
            super::dry_run(&args).unwrap(),
            [
                "SELECT version()",
                "SELECT count() FROM system.users WHERE name = 'tenant_acme_user'",
                "SELECT granted_role_name FROM system.role_grants WHERE user_name = 'tenant_acme_user'",
                "SELECT count() FROM system.databases WHERE name = 'tenant_acme'",
                "SELECT DISTINCT role_name FROM system.grants WHERE database = 'tenant_acme'",
                "ALTER USER `tenant_acme_user` HOST NONE",
            ]
        );
        let bad = parse(&["--dry-run", "--namespace", "Not_A_Namespace"]).unwrap();
        let err = super::dry_run(&bad).unwrap_err().to_string();
        assert!(
            err.contains("\"Not_A_Namespace\" is not a valid namespace name"),
            "{err}"
        );
    }

    #[test]
    fn a_memory_limit_flag_that_is_not_one_is_refused_with_the_reason() {
        for (value, reason) in [
            ("4G", "must be 1 to 9999 followed by Mi or Gi"),
            ("", "leave the flag out for no limit"),
        ] {
            let err = parse(&["--dry-run", "--max-memory-per-query", value])
                .err()
                .unwrap_or_else(|| panic!("{value:?} accepted"))
                .to_string();
            assert!(err.contains(reason), "{value:?}: {err}");
        }
    }

    #[test]
    fn only_a_run_on_a_cluster_waits_for_clickhouses_distributed_ddl_timeout() {
        let client = |extra: &[&str]| super::clickhouse_client(&parse(extra).unwrap()).unwrap();
        assert_eq!(client(&[]).timeout().as_secs(), 30);
        let on_cluster = client(&["--clickhouse-cluster", "prod"]).timeout();
        assert!(
            on_cluster > super::clickhouse::DISTRIBUTED_DDL_TIMEOUT,
            "{on_cluster:?}"
        );
    }
}
