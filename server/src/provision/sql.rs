//! Every statement the provisioner sends to ClickHouse, built from validated, back-quoted identifiers.
//! Pure functions: `--dry-run` prints exactly these, and the parser test checks every one of them.

use std::fmt;

use crate::crd::{ReclaimPolicy, RunAction};
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

/// The tenant's database and user, as identifiers.
#[derive(Debug, Clone)]
pub struct TenantIdents {
    pub database: Ident,
    pub user: Ident,
}

impl TenantIdents {
    pub fn for_tenant(tenant: &TenantName) -> Result<Self, BadIdentifier> {
        Ok(Self {
            database: Ident::parse(&tenant.database())?,
            user: Ident::parse(&tenant.clickhouse_user())?,
        })
    }
}

pub fn select_version() -> Statement {
    Statement::plain("SELECT version()".into())
}

pub fn user_exists(user: &Ident) -> Statement {
    Statement::plain(format!(
        "SELECT count() FROM system.users WHERE name = {}",
        quote_str(user.as_str())
    ))
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
    let create_user = |auth: &str| {
        format!(
            "CREATE USER IF NOT EXISTS {} {auth} {} DEFAULT DATABASE {}",
            ids.user,
            host(locked),
            ids.database
        )
    };
    vec![
        Statement::plain(format!("CREATE DATABASE IF NOT EXISTS {}", ids.database)),
        Statement {
            sql: create_user(&auth),
            redacted: create_user(&auth_redacted),
        },
        Statement::plain(format!(
            "GRANT {TENANT_PRIVILEGES} ON {}.* TO {}",
            ids.database, ids.user
        )),
    ]
}

/// Suspend (lock) or resume (unlock) the user's logins. Idempotent.
pub fn set_locked(ids: &TenantIdents, locked: bool) -> Statement {
    Statement::plain(format!("ALTER USER {} {}", ids.user, host(locked)))
}

/// A deliberate credential rotation (`--rotate`), never the default.
pub fn rotate(ids: &TenantIdents, password_sha256_hex: &str) -> Statement {
    let (auth, auth_redacted) = identified(password_sha256_hex);
    Statement {
        sql: format!("ALTER USER {} {auth}", ids.user),
        redacted: format!("ALTER USER {} {auth_redacted}", ids.user),
    }
}

/// Rotate on a server that holds several passwords per user: the new one, and the old one until
/// `valid_until` (an RFC 3339 UTC time). One statement sets both, so a re-run sets the same state.
pub fn rotate_with_overlap(
    ids: &TenantIdents,
    old_sha256_hex: &str,
    new_sha256_hex: &str,
    valid_until: &str,
) -> Statement {
    let until = quote_str(valid_until);
    let text = |old: &str, new: &str| {
        format!(
            "ALTER USER {} IDENTIFIED WITH sha256_hash BY {old} VALID UNTIL {until}, sha256_hash BY {new}",
            ids.user
        )
    };
    Statement {
        sql: text(&quote_str(old_sha256_hex), &quote_str(new_sha256_hex)),
        redacted: text("'<redacted>'", "'<redacted>'"),
    }
}

/// Deprovision under `reclaimPolicy: Delete`: the user first (its logins end), then the database.
/// Each is idempotent.
pub fn drop_tenant(ids: &TenantIdents) -> Vec<Statement> {
    vec![
        Statement::plain(format!("DROP USER IF EXISTS {}", ids.user)),
        Statement::plain(format!("DROP DATABASE IF EXISTS {}", ids.database)),
    ]
}

/// Every statement an action can send, in order, for `--dry-run` and the parser test.
pub fn plan(
    action: RunAction,
    ids: &TenantIdents,
    password_sha256_hex: &str,
    locked: bool,
    reclaim: ReclaimPolicy,
) -> Vec<Statement> {
    let mut out = vec![select_version()];
    match (action, reclaim) {
        (RunAction::Deprovision, ReclaimPolicy::Delete) => {
            out.extend(drop_tenant(ids));
            return out;
        }
        _ => out.push(user_exists(&ids.user)),
    }
    match action {
        RunAction::Provision => {
            out.extend(provision(ids, password_sha256_hex, locked));
            // Sent only when the user already existed.
            out.push(set_locked(ids, locked));
        }
        // Deprovision under Retain locks the user's logins, if it exists.
        RunAction::Suspend | RunAction::Deprovision => out.push(set_locked(ids, true)),
        RunAction::Resume => out.push(set_locked(ids, false)),
        // What a current server is sent (the time an example); an older one gets `rotate`.
        RunAction::Rotate => {
            let mut st = rotate_with_overlap(
                ids,
                password_sha256_hex,
                password_sha256_hex,
                "2026-12-01T12:00:00Z",
            );
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
        TenantIdents::for_tenant(&TenantName::parse(name).unwrap()).unwrap()
    }

    #[test]
    fn provision_statements_are_quoted_and_idempotent() {
        let s = provision(&ids("acme-corp"), "ab12", false);
        assert_eq!(s[0].sql, "CREATE DATABASE IF NOT EXISTS `tenant_acme_corp`");
        assert_eq!(
            s[1].sql,
            "CREATE USER IF NOT EXISTS `tenant_acme_corp_user` IDENTIFIED WITH sha256_hash BY 'ab12' HOST ANY DEFAULT DATABASE `tenant_acme_corp`"
        );
        assert_eq!(
            s[2].sql,
            format!("GRANT {TENANT_PRIVILEGES} ON `tenant_acme_corp`.* TO `tenant_acme_corp_user`")
        );
    }

    #[test]
    fn a_suspended_tenant_is_created_locked() {
        assert!(
            provision(&ids("acme"), "ab", true)[1]
                .sql
                .contains("HOST NONE")
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
            false,
            ReclaimPolicy::Retain,
        )
        .iter()
        .chain([&rotate(&ids("acme"), "deadbeef")])
        {
            assert!(!st.to_string().contains("deadbeef"), "{st}");
        }
        assert!(
            provision(&ids("acme"), "deadbeef", false)[1]
                .sql
                .contains("deadbeef")
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
            plan(action, &ids("acme"), "ab", locked, ReclaimPolicy::Retain)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let probe = [
            "SELECT version()",
            "SELECT count() FROM system.users WHERE name = 'tenant_acme_user'",
        ];
        assert_eq!(
            redacted(RunAction::Provision, true),
            [
                &probe[..],
                &[
                    "CREATE DATABASE IF NOT EXISTS `tenant_acme`",
                    "CREATE USER IF NOT EXISTS `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '<redacted>' HOST NONE DEFAULT DATABASE `tenant_acme`",
                    &format!("GRANT {TENANT_PRIVILEGES} ON `tenant_acme`.* TO `tenant_acme_user`"),
                    "ALTER USER `tenant_acme_user` HOST NONE",
                ],
            ]
            .concat()
        );
        assert_eq!(
            redacted(RunAction::Suspend, false),
            [&probe[..], &["ALTER USER `tenant_acme_user` HOST NONE"]].concat()
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
            false,
            ReclaimPolicy::Delete,
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            delete,
            [
                "SELECT version()",
                "DROP USER IF EXISTS `tenant_acme_user`",
                "DROP DATABASE IF EXISTS `tenant_acme`",
            ]
        );
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
