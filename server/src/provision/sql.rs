//! Every statement the provisioner sends to ClickHouse, built from validated, back-quoted identifiers.
//! Pure functions: `--dry-run` prints exactly these, and the parser test checks every one of them.

use std::fmt;

use super::rotation::Retiring;
use crate::crd::{ReclaimPolicy, RunAction, TenantLimits};
use crate::names::TenantName;

/// SQL-driven access control (`CREATE USER`, `GRANT`, `ALTER USER … HOST`) arrived in ClickHouse 20.4.
pub const MIN_VERSION: (u32, u32) = (20, 4);
/// Several authentication methods per user (ClickHouse#65277, in 24.9) each with its own `VALID UNTIL`
/// (ClickHouse#70090, merged for 24.11; backported into 24.9 and 24.10 patch releases only): the
/// first minor version all of whose builds can keep an old password for a grace period.
pub const MIN_OVERLAP_VERSION: (u32, u32) = (24, 11);

/// What a tenant's user may do in its own database, and nothing elsewhere: read and write tables,
/// migrate its schema (create/alter/drop tables and views), and maintenance (truncate, optimize).
pub const TENANT_PRIVILEGES: &str = "SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW, DROP TABLE, DROP VIEW, TRUNCATE, OPTIMIZE, SHOW TABLES";

/// One statement, with a copy safe to print (the password hash replaced).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sql: String,
    pub redacted: String,
}

impl Statement {
    fn plain(sql: String) -> Self {
        Self {
            redacted: sql.clone(),
            sql,
        }
    }
}

impl fmt::Display for Statement {
    /// Display never shows the secret part.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a safe ClickHouse identifier (lowercase letters, digits and '_', starting with a letter or '_', at most 64 characters)"
)]
pub struct BadIdentifier(pub String);

/// A ClickHouse identifier we generate: checked against a strict rule, then back-quoted anyway, so a
/// bug upstream can never turn a name into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident(String);

impl Ident {
    /// Named `parse`, not `new`: it is a validator, and cargo-mutants leaves functions named `new` alone.
    pub fn parse(name: &str) -> Result<Self, BadIdentifier> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if ok {
            Ok(Self(name.to_owned()))
        } else {
            Err(BadIdentifier(name.to_owned()))
        }
    }

    /// A ClickHouse cluster's name as its configuration spells it (`remote_servers`): letters, digits,
    /// '_', '-' and '.', starting with a letter or '_'. Back-quoted wherever it is used.
    pub fn cluster(name: &str) -> Result<Self, BadIdentifier> {
        if crate::flags::is_clickhouse_cluster_name(name) {
            Ok(Self(name.to_owned()))
        } else {
            Err(BadIdentifier(name.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", quote_ident(&self.0))
    }
}

/// Back-quotes any string as a ClickHouse identifier.
pub fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('\\', "\\\\").replace('`', "\\`"))
}

/// Single-quotes any string as a ClickHouse string literal.
pub fn quote_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Who a tenant's ClickHouse objects belong to: one Tenant object, by namespace, name and uid (a Tenant
/// deleted and created again under its name is another Tenant).
///
/// ClickHouse 20.4 has no comments on users or databases, so the mark is a **role** named after the
/// owner ([`Owner::role`]): granted to the tenant's user, and holding a privilege on the tenant's
/// database. A role lives in the same user directory as the user — local, or replicated across an
/// `ON CLUSTER` cluster — so the mark is wherever the user is, and it is read back from
/// `system.role_grants` and `system.grants`, which every server with SQL users has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub namespace: String,
    pub tenant: String,
    pub uid: String,
}

/// What every owner role's name starts with; nothing else is read as a mark.
pub const OWNER_ROLE_PREFIX: &str = "sentry-tenants/";

impl Owner {
    /// `sentry-tenants/<namespace>/<tenant>/<uid>`: the role that marks what this Tenant owns.
    pub fn role(&self) -> Ident {
        Ident(format!(
            "{OWNER_ROLE_PREFIX}{}/{}/{}",
            self.namespace, self.tenant, self.uid
        ))
    }

    /// The owner a role's name marks, if it is one of ours (and well-formed: a namespace and a tenant
    /// name by their rules, a uid of hex digits and dashes).
    pub fn from_role(role: &str) -> Option<Self> {
        let mut parts = role.strip_prefix(OWNER_ROLE_PREFIX)?.split('/');
        let (namespace, tenant, uid) = (parts.next()?, parts.next()?, parts.next()?);
        let uid_ok = !uid.is_empty()
            && uid.len() <= 64
            && uid
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase() || c == '-');
        let namespace_ok = crate::names::is_run_job_name(namespace);
        (parts.next().is_none() && uid_ok && namespace_ok && TenantName::parse(tenant).is_ok())
            .then(|| Self {
                namespace: namespace.to_owned(),
                tenant: tenant.to_owned(),
                uid: uid.to_owned(),
            })
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tenant {}/{} (uid {})",
            self.namespace, self.tenant, self.uid
        )
    }
}

/// The tenant's database, user, settings profile and quota, as identifiers, the role that marks them
/// as the tenant's, and the cluster every statement runs `ON CLUSTER` of, if any.
#[derive(Debug, Clone)]
pub struct TenantIdents {
    pub database: Ident,
    pub user: Ident,
    pub profile: Ident,
    pub quota: Ident,
    /// Whose they are: the role [`Owner::role`] marks them with.
    pub owner: Owner,
    pub cluster: Option<Ident>,
}

impl TenantIdents {
    /// The names of `owner`'s objects, around its `database` (the user, profile and quota are named
    /// after it); an error when the owner is not a well-formed one.
    pub fn for_tenant(
        tenant: &TenantName,
        database: &str,
        owner: &Owner,
    ) -> Result<Self, BadIdentifier> {
        let role = owner.role();
        if Owner::from_role(role.as_str()).as_ref() != Some(owner)
            || owner.tenant != tenant.as_str()
        {
            return Err(BadIdentifier(role.0));
        }
        Ok(Self {
            database: Ident::parse(database)?,
            user: Ident::parse(&crate::names::clickhouse_user(database))?,
            profile: Ident::parse(&format!("{database}_profile"))?,
            quota: Ident::parse(&format!("{database}_quota"))?,
            owner: owner.clone(),
            cluster: None,
        })
    }

    /// The same names, every statement run on each node of `cluster`.
    pub fn on_cluster(self, cluster: Option<Ident>) -> Self {
        Self { cluster, ..self }
    }

    /// ` ON CLUSTER `name``, or nothing.
    fn on(&self) -> String {
        self.cluster
            .as_ref()
            .map(|c| format!(" ON CLUSTER {c}"))
            .unwrap_or_default()
    }
}

pub fn select_version() -> Statement {
    Statement::plain("SELECT version()".into())
}

/// `<query> WHERE <column> = '<name>'`: a read of one of the server's own tables about one name.
fn lookup(query: &str, column: &str, name: &Ident) -> Statement {
    Statement::plain(format!(
        "{query} WHERE {column} = {}",
        quote_str(name.as_str())
    ))
}

pub fn user_exists(user: &Ident) -> Statement {
    lookup("SELECT count() FROM system.users", "name", user)
}

pub fn database_exists(database: &Ident) -> Statement {
    lookup("SELECT count() FROM system.databases", "name", database)
}

/// What a run reads before it changes anything: whether the user and the database exist, and whose
/// marks they carry (see `provision::ownership`).
pub fn ownership_probe(ids: &TenantIdents) -> [Statement; 4] {
    [
        user_exists(&ids.user),
        roles_of_user(&ids.user),
        database_exists(&ids.database),
        roles_on_database(&ids.database),
    ]
}

/// The roles granted to `user`, one a line: an owner role among them marks the user.
pub fn roles_of_user(user: &Ident) -> Statement {
    lookup(
        "SELECT granted_role_name FROM system.role_grants",
        "user_name",
        user,
    )
}

/// The roles holding a privilege on `database`, one a line (a user's grant reads as `\N`, no role):
/// an owner role among them marks it.
pub fn roles_on_database(database: &Ident) -> Statement {
    lookup(
        "SELECT DISTINCT role_name FROM system.grants",
        "database",
        database,
    )
}

/// The owner mark, made before anything it marks: the role, then its privilege on the database (a
/// grant needs no database to exist yet); [`mark_user`] once the user exists.
pub fn mark_owner(ids: &TenantIdents) -> [Statement; 2] {
    [create_owner_role(ids), mark_database(ids)]
}

pub fn create_owner_role(ids: &TenantIdents) -> Statement {
    Statement::plain(format!(
        "CREATE ROLE IF NOT EXISTS {}{}",
        ids.owner.role(),
        ids.on()
    ))
}

/// The owner role given a privilege on the database: the database marked as the tenant's.
pub fn mark_database(ids: &TenantIdents) -> Statement {
    Statement::plain(format!(
        "GRANT{} SHOW TABLES ON {}.* TO {}",
        ids.on(),
        ids.database,
        ids.owner.role()
    ))
}

/// The owner role granted to the user: the user marked as the tenant's.
pub fn mark_user(ids: &TenantIdents) -> Statement {
    Statement::plain(format!(
        "GRANT{} {} TO {}",
        ids.on(),
        ids.owner.role(),
        ids.user
    ))
}

/// A role that marked something as another owner's (a deleted Tenant of this name whose objects this
/// one adopted): dropped, which takes its grants with it.
pub fn drop_role(ids: &TenantIdents, role: &Ident) -> Statement {
    Statement::plain(format!("DROP ROLE IF EXISTS {role}{}", ids.on()))
}

fn host(locked: bool) -> &'static str {
    if locked { "HOST NONE" } else { "HOST ANY" }
}

/// The password travels as its SHA-256 (`sha256_hash`), so the plaintext never reaches ClickHouse's
/// query log; the user still logs in with the password (`sha256_password` authentication).
fn identified(password_sha256_hex: &str) -> (String, String) {
    (
        format!(
            "IDENTIFIED WITH sha256_hash BY {}",
            quote_str(password_sha256_hex)
        ),
        "IDENTIFIED WITH sha256_hash BY '<redacted>'".to_owned(),
    )
}

/// Provision: database, user (locked when the tenant is suspended), grants. Each is idempotent.
pub fn provision(ids: &TenantIdents, password_sha256_hex: &str, locked: bool) -> Vec<Statement> {
    let (auth, auth_redacted) = identified(password_sha256_hex);
    let on = ids.on();
    let create_user = |auth: &str| {
        format!(
            "CREATE USER IF NOT EXISTS {}{on} {auth} {} DEFAULT DATABASE {}",
            ids.user,
            host(locked),
            ids.database
        )
    };
    let mut out = mark_owner(ids).to_vec();
    out.extend([
        Statement::plain(format!(
            "CREATE DATABASE IF NOT EXISTS {}{on}",
            ids.database
        )),
        Statement {
            sql: create_user(&auth),
            redacted: create_user(&auth_redacted),
        },
        mark_user(ids),
        Statement::plain(format!(
            "GRANT{on} {TENANT_PRIVILEGES} ON {}.* TO {}",
            ids.database, ids.user
        )),
    ]);
    out
}

/// Suspend (lock) or resume (unlock) the user's logins. Idempotent.
pub fn set_locked(ids: &TenantIdents, locked: bool) -> Statement {
    Statement::plain(format!(
        "ALTER USER {}{} {}",
        ids.user,
        ids.on(),
        host(locked)
    ))
}

/// Ends what the tenant's user is running: a lock (`HOST NONE`) stops new logins, not the queries
/// already running. `ASYNC` asks each to stop and answers at once, one line per query asked (on a
/// single server; `ON CLUSTER` answers with each host's status instead).
pub fn end_queries(ids: &TenantIdents) -> Statement {
    Statement::plain(format!(
        "KILL QUERY{} WHERE user = {} ASYNC",
        ids.on(),
        quote_str(ids.user.as_str())
    ))
}

/// A deliberate credential rotation (`--rotate`), never the default.
pub fn rotate(ids: &TenantIdents, password_sha256_hex: &str) -> Statement {
    let (auth, auth_redacted) = identified(password_sha256_hex);
    let on = ids.on();
    Statement {
        sql: format!("ALTER USER {}{on} {auth}", ids.user),
        redacted: format!("ALTER USER {}{on} {auth_redacted}", ids.user),
    }
}

/// Rotate on a server that holds several passwords per user: every password `kept` until its own
/// expiry, and the new one. One statement sets the whole list, so a re-run sets the same state.
pub fn rotate_keeping(ids: &TenantIdents, kept: &[Retiring], new_sha256_hex: &str) -> Statement {
    let text = |hash: &dyn Fn(&str) -> String| {
        let methods: Vec<String> = kept
            .iter()
            .map(|k| {
                let until = k.valid_until.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
                format!(
                    "sha256_hash BY {} VALID UNTIL {}",
                    hash(&k.sha256),
                    quote_str(&until)
                )
            })
            .chain([format!("sha256_hash BY {}", hash(new_sha256_hex))])
            .collect();
        format!(
            "ALTER USER {}{} IDENTIFIED WITH {}",
            ids.user,
            ids.on(),
            methods.join(", ")
        )
    };
    Statement {
        sql: text(&|h| quote_str(h)),
        redacted: text(&|_| "'<redacted>'".to_owned()),
    }
}

/// The settings of the tenant's profile, each a `READONLY` constraint so the tenant's own session
/// cannot raise it (`SET max_memory_usage = 0` is refused). `READONLY` is what 20.4 parses; newer
/// servers read it as `CONST`.
fn profile_settings(limits: &TenantLimits) -> Vec<String> {
    [
        ("max_memory_usage", limits.memory_bytes().map(|b| b as i64)),
        ("max_execution_time", limits.max_execution_seconds),
        (
            "max_concurrent_queries_for_user",
            limits.max_concurrent_queries,
        ),
    ]
    .into_iter()
    .filter_map(|(setting, value)| value.map(|v| format!("{setting} = {v} READONLY")))
    .collect()
}

/// Makes ClickHouse enforce `limits`, whatever it enforced before: the profile and the quota are each
/// replaced whole (`OR REPLACE`, so a re-run sets the same state) or dropped when nothing is left in them.
pub fn set_limits(ids: &TenantIdents, limits: &TenantLimits) -> Vec<Statement> {
    let on = ids.on();
    let settings = profile_settings(limits);
    let profile = if settings.is_empty() {
        format!("DROP SETTINGS PROFILE IF EXISTS {}{on}", ids.profile)
    } else {
        format!(
            "CREATE SETTINGS PROFILE OR REPLACE {}{on} SETTINGS {} TO {}",
            ids.profile,
            settings.join(", "),
            ids.user
        )
    };
    let quota = match limits.queries_per_hour {
        Some(n) => format!(
            "CREATE QUOTA OR REPLACE {}{on} FOR INTERVAL 1 hour MAX queries = {n} TO {}",
            ids.quota, ids.user
        ),
        None => format!("DROP QUOTA IF EXISTS {}{on}", ids.quota),
    };
    vec![Statement::plain(profile), Statement::plain(quota)]
}

/// What Deprovision under `reclaimPolicy: Delete` may drop: only what is proven the tenant's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drops {
    /// The user, and its profile and quota (named after the same tenant, assigned to that user).
    pub user: bool,
    pub database: bool,
}

impl Drops {
    pub const ALL: Self = Self {
        user: true,
        database: true,
    };
}

/// Deprovision under `reclaimPolicy: Delete`: the user first (its logins end), its profile and quota,
/// then the database, and the owner mark last — so a run cut short is still recognised as the tenant's
/// by its re-run. Each is idempotent.
pub fn drop_tenant(ids: &TenantIdents, what: Drops) -> Vec<Statement> {
    let mut out = Vec::new();
    if what.user {
        out.push(Statement::plain(format!(
            "DROP USER IF EXISTS {}{}",
            ids.user,
            ids.on()
        )));
        out.extend(set_limits(ids, &TenantLimits::default()));
    }
    if what.database {
        out.push(Statement::plain(format!(
            "DROP DATABASE IF EXISTS {}{}",
            ids.database,
            ids.on()
        )));
    }
    out.push(drop_role(ids, &ids.owner.role()));
    out
}

/// With `--clickhouse-cluster`: the cluster must be configured on the server we talk to, and users
/// must live in a replicated user directory — with only local ones, a user made `ON CLUSTER` exists
/// on the nodes that were up at that moment and never on a node added later.
pub fn cluster_checks(cluster: &Ident) -> [Statement; 2] {
    [
        Statement::plain(format!(
            "SELECT count() FROM system.clusters WHERE cluster = {}",
            quote_str(cluster.as_str())
        )),
        Statement::plain(
            "SELECT count() FROM system.user_directories WHERE type = 'replicated'".to_owned(),
        ),
    ]
}

/// What a run makes ClickHouse enforce, as `plan` needs it.
#[derive(Debug, Clone, Default)]
pub struct Desired {
    pub locked: bool,
    pub reclaim: ReclaimPolicy,
    pub limits: TenantLimits,
}

/// Every statement an action can send, in order, for `--dry-run` and the parser test.
pub fn plan(
    action: RunAction,
    ids: &TenantIdents,
    password_sha256_hex: &str,
    desired: &Desired,
) -> Vec<Statement> {
    // A Deliver run writes Secrets only.
    if action == RunAction::Deliver {
        return Vec::new();
    }
    let mut out = vec![select_version()];
    if let Some(cluster) = &ids.cluster {
        out.extend(cluster_checks(cluster));
    }
    match (action, desired.reclaim) {
        (RunAction::Deprovision, ReclaimPolicy::Delete) => {
            out.extend(ownership_probe(ids));
            out.extend(drop_tenant(ids, Drops::ALL));
            return out;
        }
        _ => out.extend(ownership_probe(ids)),
    }
    let locked = desired.locked;
    match action {
        RunAction::Provision => {
            out.extend(provision(ids, password_sha256_hex, locked));
            // Sent only when the user already existed.
            out.push(set_locked(ids, locked));
            // Also sent with no limits when the user already existed (dropping what it had).
            if !desired.limits.is_empty() {
                out.extend(set_limits(ids, &desired.limits));
            }
        }
        // Deprovision under Retain locks the user's logins, if it exists.
        RunAction::Suspend => out.extend([set_locked(ids, true), end_queries(ids)]),
        RunAction::Deprovision => out.push(set_locked(ids, true)),
        RunAction::Resume => out.push(set_locked(ids, false)),
        RunAction::SetLimits => out.extend(set_limits(ids, &desired.limits)),
        RunAction::Deliver => {}
        // What a current server is sent (the time an example); an older one gets `rotate`.
        RunAction::Revoke => out.extend([rotate(ids, password_sha256_hex), end_queries(ids)]),
        RunAction::Rotate => {
            let example = Retiring {
                sha256: password_sha256_hex.to_owned(),
                valid_until: "2026-12-01T12:00:00Z".parse().expect("a time"),
            };
            let mut st = rotate_keeping(ids, &[example], password_sha256_hex);
            st.redacted = st
                .redacted
                .replace("'2026-12-01T12:00:00Z'", "'<now + rotationGracePeriod>'");
            out.push(st);
        }
    }
    out
}

/// `major.minor` of a `SELECT version()` answer such as `18.16.1` or `24.8.4.13`.
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(name: &str) -> TenantIdents {
        let tenant = TenantName::parse(name).unwrap();
        let database = format!("tenant_{}", name.replace('-', "_"));
        TenantIdents::for_tenant(&tenant, &database, &owner(name)).unwrap()
    }

    fn owner(name: &str) -> Owner {
        Owner {
            namespace: "team-a".into(),
            tenant: name.into(),
            uid: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9".into(),
        }
    }

    #[test]
    fn provision_statements_are_quoted_and_idempotent() {
        let s: Vec<String> = provision(&ids("acme-corp"), "ab12", false)
            .into_iter()
            .map(|s| s.sql)
            .collect();
        let role = "`sentry-tenants/team-a/acme-corp/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9`";
        assert_eq!(
            s,
            [
                format!("CREATE ROLE IF NOT EXISTS {role}"),
                format!("GRANT SHOW TABLES ON `tenant_acme_corp`.* TO {role}"),
                "CREATE DATABASE IF NOT EXISTS `tenant_acme_corp`".to_owned(),
                "CREATE USER IF NOT EXISTS `tenant_acme_corp_user` IDENTIFIED WITH sha256_hash BY 'ab12' HOST ANY DEFAULT DATABASE `tenant_acme_corp`".to_owned(),
                format!("GRANT {role} TO `tenant_acme_corp_user`"),
                format!("GRANT {TENANT_PRIVILEGES} ON `tenant_acme_corp`.* TO `tenant_acme_corp_user`"),
            ]
        );
    }

    #[test]
    fn an_owner_role_names_namespace_tenant_and_uid_and_nothing_else_reads_as_one() {
        let o = owner("acme");
        assert_eq!(
            o.role().as_str(),
            "sentry-tenants/team-a/acme/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
        );
        assert_eq!(Owner::from_role(o.role().as_str()), Some(o.clone()));
        assert_eq!(
            o.to_string(),
            "Tenant team-a/acme (uid 0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9)"
        );
        for not_a_mark in [
            "",
            "admin",
            "sentry-tenants/team-a/acme",
            "sentry-tenants/team-a/acme/uid/extra",
            "sentry-tenants/Team-A/acme/0f1e",
            "sentry-tenants/team-a/acme_x/0f1e",
            "sentry-tenants/team-a/acme/0F1E",
            "sentry-tenants/team-a/acme/0f1e`; DROP USER x",
            "other/team-a/acme/0f1e",
        ] {
            assert_eq!(Owner::from_role(not_a_mark), None, "{not_a_mark:?}");
        }
        // The names are an owner's only for the tenant the owner names.
        let other = Owner {
            tenant: "other".into(),
            ..o
        };
        let acme = TenantName::parse("acme").unwrap();
        assert!(TenantIdents::for_tenant(&acme, "tenant_acme", &other).is_err());
    }

    #[test]
    fn a_suspended_tenant_is_created_locked() {
        assert!(
            provision(&ids("acme"), "ab", true)
                .iter()
                .any(|s| s.sql.starts_with("CREATE USER") && s.sql.contains("HOST NONE"))
        );
        assert_eq!(
            set_locked(&ids("acme"), true).sql,
            "ALTER USER `tenant_acme_user` HOST NONE"
        );
        assert_eq!(
            set_locked(&ids("acme"), false).sql,
            "ALTER USER `tenant_acme_user` HOST ANY"
        );
    }

    #[test]
    fn printed_statements_never_show_the_hash() {
        for st in plan(
            RunAction::Provision,
            &ids("acme"),
            "deadbeef",
            &Desired::default(),
        )
        .iter()
        .chain([&rotate(&ids("acme"), "deadbeef")])
        {
            assert!(!st.to_string().contains("deadbeef"), "{st}");
        }
        assert!(
            provision(&ids("acme"), "deadbeef", false)
                .iter()
                .any(|s| s.sql.starts_with("CREATE USER") && s.sql.contains("deadbeef"))
        );
    }

    #[test]
    fn a_statement_prints_as_its_redacted_text() {
        let st = rotate(&ids("acme"), "deadbeef");
        assert_eq!(
            st.sql,
            "ALTER USER `tenant_acme_user` IDENTIFIED WITH sha256_hash BY 'deadbeef'"
        );
        assert_eq!(
            st.to_string(),
            "ALTER USER `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '<redacted>'"
        );
        assert_eq!(select_version().to_string(), "SELECT version()");
        assert_eq!(Ident::parse("a_b").unwrap().to_string(), "`a_b`");
    }

    #[test]
    fn each_action_plans_its_statements_in_order() {
        let redacted = |action, locked| -> Vec<String> {
            let desired = Desired {
                locked,
                ..Desired::default()
            };
            plan(action, &ids("acme"), "ab", &desired)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let role = "`sentry-tenants/team-a/acme/0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9`";
        let probe = [
            "SELECT version()",
            "SELECT count() FROM system.users WHERE name = 'tenant_acme_user'",
            "SELECT granted_role_name FROM system.role_grants WHERE user_name = 'tenant_acme_user'",
            "SELECT count() FROM system.databases WHERE name = 'tenant_acme'",
            "SELECT DISTINCT role_name FROM system.grants WHERE database = 'tenant_acme'",
        ];
        assert_eq!(
            redacted(RunAction::Provision, true),
            [
                &probe[..],
                &[
                    &format!("CREATE ROLE IF NOT EXISTS {role}"),
                    &format!("GRANT SHOW TABLES ON `tenant_acme`.* TO {role}"),
                    "CREATE DATABASE IF NOT EXISTS `tenant_acme`",
                    "CREATE USER IF NOT EXISTS `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '<redacted>' HOST NONE DEFAULT DATABASE `tenant_acme`",
                    &format!("GRANT {role} TO `tenant_acme_user`"),
                    &format!("GRANT {TENANT_PRIVILEGES} ON `tenant_acme`.* TO `tenant_acme_user`"),
                    "ALTER USER `tenant_acme_user` HOST NONE",
                ],
            ]
            .concat()
        );
        assert_eq!(
            redacted(RunAction::Suspend, false),
            [
                &probe[..],
                &[
                    "ALTER USER `tenant_acme_user` HOST NONE",
                    "KILL QUERY WHERE user = 'tenant_acme_user' ASYNC",
                ],
            ]
            .concat()
        );
        assert_eq!(
            redacted(RunAction::Resume, true),
            [&probe[..], &["ALTER USER `tenant_acme_user` HOST ANY"]].concat()
        );
        assert_eq!(
            redacted(RunAction::Deprovision, false),
            [&probe[..], &["ALTER USER `tenant_acme_user` HOST NONE"]].concat(),
            "Retain locks the logins and keeps the rest"
        );
        let delete: Vec<String> = plan(
            RunAction::Deprovision,
            &ids("acme"),
            "ab",
            &Desired {
                reclaim: ReclaimPolicy::Delete,
                ..Desired::default()
            },
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            delete,
            [
                &probe[..],
                &[
                    "DROP USER IF EXISTS `tenant_acme_user`",
                    "DROP SETTINGS PROFILE IF EXISTS `tenant_acme_profile`",
                    "DROP QUOTA IF EXISTS `tenant_acme_quota`",
                    "DROP DATABASE IF EXISTS `tenant_acme`",
                    &format!("DROP ROLE IF EXISTS {role}"),
                ],
            ]
            .concat()
        );
    }

    fn limits(
        memory: Option<&str>,
        seconds: Option<i64>,
        concurrent: Option<i64>,
        per_hour: Option<i64>,
    ) -> TenantLimits {
        TenantLimits {
            max_memory_per_query: memory.map(str::to_owned),
            max_execution_seconds: seconds,
            max_concurrent_queries: concurrent,
            queries_per_hour: per_hour,
        }
    }

    #[test]
    fn limits_become_a_readonly_profile_and_an_hourly_quota() {
        let all = set_limits(
            &ids("acme"),
            &limits(Some("4Gi"), Some(60), Some(5), Some(1000)),
        );
        assert_eq!(
            all[0].sql,
            "CREATE SETTINGS PROFILE OR REPLACE `tenant_acme_profile` SETTINGS max_memory_usage = 4294967296 READONLY, max_execution_time = 60 READONLY, max_concurrent_queries_for_user = 5 READONLY TO `tenant_acme_user`"
        );
        assert_eq!(
            all[1].sql,
            "CREATE QUOTA OR REPLACE `tenant_acme_quota` FOR INTERVAL 1 hour MAX queries = 1000 TO `tenant_acme_user`"
        );
        let quota_only = set_limits(&ids("acme"), &limits(None, None, None, Some(7)));
        assert_eq!(
            quota_only[0].sql,
            "DROP SETTINGS PROFILE IF EXISTS `tenant_acme_profile`"
        );
        assert!(quota_only[1].sql.contains("MAX queries = 7 "));
        let memory_only = set_limits(&ids("acme"), &limits(Some("512Mi"), None, None, None));
        assert!(
            memory_only[0]
                .sql
                .contains("SETTINGS max_memory_usage = 536870912 READONLY TO")
        );
        assert_eq!(
            memory_only[1].sql,
            "DROP QUOTA IF EXISTS `tenant_acme_quota`"
        );
    }

    #[test]
    fn on_cluster_goes_into_every_statement_that_changes_something() {
        let ids = ids("acme").on_cluster(Some(Ident::cluster("prod-eu.1").unwrap()));
        let desired = Desired {
            limits: limits(Some("1Gi"), None, None, Some(5)),
            ..Desired::default()
        };
        for action in RunAction::ALL {
            for reclaim in ReclaimPolicy::ALL {
                let desired = Desired {
                    reclaim,
                    ..desired.clone()
                };
                for st in plan(action, &ids, "ab", &desired) {
                    assert_eq!(
                        st.sql.starts_with("SELECT"),
                        !st.sql.contains(" ON CLUSTER `prod-eu.1`"),
                        "{st}"
                    );
                }
            }
        }
        assert_eq!(
            cluster_checks(&Ident::cluster("prod-eu.1").unwrap())[0].sql,
            "SELECT count() FROM system.clusters WHERE cluster = 'prod-eu.1'"
        );
        for bad in ["", "1a", "a b", "a`b", "a'b", &"c".repeat(129)] {
            assert!(Ident::cluster(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn identifiers_outside_the_strict_rule_are_refused() {
        for bad in ["", "Tenant", "a-b", "a`b", "a;b", "1abc", &"a".repeat(65)] {
            assert!(Ident::parse(bad).is_err(), "{bad:?}");
        }
        for good in ["_x1", "tenant_acme_corp_user", "a0_9z", &"a".repeat(64)] {
            assert_eq!(Ident::parse(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn quoting_escapes_what_would_end_the_quote() {
        assert_eq!(quote_ident("a`b\\c"), "`a\\`b\\\\c`");
        assert_eq!(quote_str("it's \\"), "'it\\'s \\\\'");
    }

    #[test]
    fn versions_parse_from_old_and_new_servers() {
        assert_eq!(parse_version("18.16.1\n"), Some((18, 16)));
        assert_eq!(parse_version("24.8.4.13"), Some((24, 8)));
        assert_eq!(parse_version("garbage"), None);
        assert!(parse_version("18.16.1").unwrap() < MIN_VERSION);
        assert!(parse_version("20.4.2").unwrap() >= MIN_VERSION);
    }
}
