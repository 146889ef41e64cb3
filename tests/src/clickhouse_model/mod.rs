//! The ClickHouse **stand-in**'s server (test code only, never in the product), shared by the two test
//! doubles that answer the provisioner — the in-process seam and the HTTP stand-in — so both keep the
//! same rules: every statement goes through chdb's parser (ClickHouse's own); the admin's statements
//! are read the way the provisioner writes them (`sql.rs`) and change users (their authentication
//! methods, each checked as ClickHouse checks it), roles, grants, databases, settings profiles and
//! quotas; a tenant's login is checked by its methods and lock, and its statement by its grants
//! (read from chdb's parse tree, see [`access`]), its quota and its profile, then answered. It stores
//! no rows. The rules, each with the ClickHouse documentation page it follows, are tabled in the
//! README (what it does not do: `docs/testing.md`); `tests/tests/integration/stand_in_rules.rs` tests
//! each one against this model.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::chdb::Chdb;

pub mod access;
pub mod auth;
mod tenant;

/// A statement the server refuses: its exception code and message, as ClickHouse answers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: u32,
    pub message: String,
}

/// ClickHouse's codes for the refusals modelled here (`src/Common/ErrorCodes.cpp`).
pub mod codes {
    pub const BAD_ARGUMENTS: u32 = 36;
    pub const NOT_IMPLEMENTED: u32 = 48;
    pub const TABLE_ALREADY_EXISTS: u32 = 57;
    pub const UNKNOWN_TABLE: u32 = 60;
    pub const SYNTAX_ERROR: u32 = 62;
    pub const UNKNOWN_DATABASE: u32 = 81;
    pub const DATABASE_ALREADY_EXISTS: u32 = 82;
    pub const UNKNOWN_USER: u32 = 192;
    pub const QUOTA_EXCEEDED: u32 = 201;
    pub const SETTING_CONSTRAINT_VIOLATION: u32 = 452;
    pub const ACCESS_ENTITY_ALREADY_EXISTS: u32 = 493;
    pub const ACCESS_DENIED: u32 = 497;
    pub const UNKNOWN_ROLE: u32 = 511;
    pub const AUTHENTICATION_FAILED: u32 = 516;
}

/// A SQL user: how it logs in, whether its logins are locked (`HOST NONE`), its default database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub methods: Vec<auth::Method>,
    pub locked: bool,
    pub default_database: Option<String>,
}

/// `CREATE QUOTA … FOR INTERVAL n unit MAX queries = max TO user`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    pub interval_seconds: i64,
    pub max_queries: i64,
    pub to: String,
}

/// Who sends a statement: the provisioner's admin, or a SQL user with a password.
pub enum Login<'a> {
    Admin,
    User { user: &'a str, password: &'a str },
}

#[derive(Default)]
pub struct Model {
    /// The admin's statements (the provisioner's), in order.
    pub statements: Vec<String>,
    /// Statements chdb's parser refused (a provisioner bug the tests fail on).
    pub syntax_errors: Vec<String>,
    /// Tenant logins' statements that ran, as (user, statement).
    pub tenant_statements: Vec<(String, String)>,
    pub users: HashMap<String, User>,
    /// Database → its tables.
    pub databases: HashMap<String, BTreeSet<String>>,
    /// Settings profile → its `setting = value` constraints, in order, and the user it is assigned to.
    pub profiles: HashMap<String, (Vec<(String, i64)>, String)>,
    pub quotas: HashMap<String, Quota>,
    /// (quota, interval number since the epoch) → queries counted in it.
    pub quota_usage: HashMap<(String, i64), i64>,
    /// Whose now a `VALID UNTIL` and a quota interval are judged by: the in-memory tier's manual
    /// clock, or (None) this machine's, as a server's own.
    pub clock: Option<sentry_tenants::clock::Clock>,
    /// Queries running now, as (user, query id): a test starts them; `KILL QUERY WHERE user = …`
    /// ends the user's, answering a line per query as the server does.
    pub running: Vec<(String, String)>,
    /// Clusters in `system.clusters`, and whether users live in a replicated user directory.
    pub clusters: HashSet<String>,
    pub replicated_users: bool,
    /// Roles (`CREATE ROLE`), the roles granted to each user (`GRANT role TO user`), and each
    /// grantee's privileges as (privilege, `db.*`/`db.table`/`*.*`).
    pub roles: BTreeSet<String>,
    pub role_grants: HashMap<String, BTreeSet<String>>,
    pub grants: HashMap<String, BTreeSet<(String, access::Object)>>,
    chdb: Option<Chdb>,
}

/// The HTTP status ClickHouse's HTTP handler answers an exception code with.
pub fn http_status(code: u32) -> u16 {
    match code {
        codes::UNKNOWN_USER | codes::AUTHENTICATION_FAILED | codes::ACCESS_DENIED => 403,
        codes::BAD_ARGUMENTS | codes::SYNTAX_ERROR => 400,
        codes::UNKNOWN_TABLE | codes::UNKNOWN_DATABASE | codes::UNKNOWN_ROLE => 404,
        codes::NOT_IMPLEMENTED => 501,
        _ => 500,
    }
}

/// ClickHouse's `max_authentication_methods_per_user` default: a user with more is refused.
pub const MAX_AUTHENTICATION_METHODS: usize = 100;

/// The text between the quotes that follow `marker` (backquotes or single quotes).
pub(crate) fn quoted<'a>(sql: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &sql[sql.find(marker)? + marker.len()..];
    let quote = rest.chars().next().filter(|q| matches!(q, '`' | '\''))?;
    let rest = &rest[1..];
    Some(&rest[..rest.find(quote)?])
}

/// The quoted name after `statement` and an optional `IF [NOT] EXISTS`, and whether that was there.
fn named<'a>(sql: &'a str, statement: &str, condition: &str) -> Option<(&'a str, bool)> {
    let rest = sql.strip_prefix(statement)?;
    match rest.strip_prefix(condition) {
        Some(rest) => Some((quoted(rest, "")?, true)),
        None => Some((quoted(rest, "")?, false)),
    }
}

/// Hex SHA-256, computed here and not with the provisioner's helper, so a login check does not compare
/// the product's function with itself.
pub fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut out, b| {
            use std::fmt::Write;
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// `GRANT ON CLUSTER `c` …` read as `GRANT …` (the other statements name the cluster after the object).
fn without_grant_cluster(sql: &str) -> std::borrow::Cow<'_, str> {
    match sql.strip_prefix("GRANT ON CLUSTER ") {
        Some(rest) => {
            let after = rest[1..].find('`').map_or(0, |i| i + 2);
            format!("GRANT {}", rest[after..].trim_start()).into()
        }
        None => sql.into(),
    }
}

fn lines<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    items.into_iter().map(|i| format!("{i}\n")).collect()
}

fn unknown_user(user: &str) -> Refused {
    Refused {
        code: codes::UNKNOWN_USER,
        message: format!("There is no user `{user}` in user directories"),
    }
}

fn unknown_role(role: &str) -> Refused {
    Refused {
        code: codes::UNKNOWN_ROLE,
        message: format!("There is no role `{role}` in user directories"),
    }
}

fn unknown_database(db: &str) -> Refused {
    Refused {
        code: codes::UNKNOWN_DATABASE,
        message: format!("Database {db} does not exist"),
    }
}

/// `GRANT a, b ON x TO g`'s privileges and object (`*.*`, `db.*`, `db.table`; names in backquotes).
fn grant_of(sql: &str) -> Option<(Vec<String>, access::Object, String)> {
    let on = sql.find(" ON ")?;
    let privileges = sql["GRANT ".len()..on]
        .split(", ")
        .map(|p| p.trim().to_owned())
        .collect();
    let to = sql.find(" TO ")?;
    let object = sql[on + 4..to].replace('`', "");
    let object = match object.split_once('.')? {
        ("*", "*") => access::Object::Global,
        (db, "*") => access::Object::Database(db.to_owned()),
        (db, table) => access::Object::Table(db.to_owned(), table.to_owned()),
    };
    Some((privileges, object, quoted(sql, " TO ")?.to_owned()))
}

/// `FOR INTERVAL n unit` in seconds.
fn interval_seconds(sql: &str) -> Option<i64> {
    let rest = &sql[sql.find("FOR INTERVAL ")? + 13..];
    let mut words = rest.split(' ');
    let n: i64 = words.next()?.parse().ok()?;
    let unit = words.next()?.trim_end_matches('s');
    let seconds = match unit {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86400,
        "week" => 7 * 86400,
        _ => return None,
    };
    Some(n * seconds)
}

impl Model {
    /// chdb, started on the first statement.
    fn chdb(&mut self) -> &mut Chdb {
        self.chdb.get_or_insert_with(Chdb::start)
    }

    /// Answers `sql` from `login` as a server of `version` would, or refuses it as the server would:
    /// the login checked, the statement parsed by chdb, then the admin's statement applied or the
    /// tenant's checked against its grants, quota and settings profile.
    pub fn serve(&mut self, version: &str, login: Login<'_>, sql: &str) -> Result<String, Refused> {
        match login {
            Login::Admin => {
                if let Err(message) = self.chdb().format(sql) {
                    self.syntax_errors.push(sql.to_owned());
                    return Err(Refused {
                        code: codes::SYNTAX_ERROR,
                        message: format!("Syntax error: {message}"),
                    });
                }
                self.answer(version, sql)
            }
            Login::User { user, password } => self.answer_as(user, password, sql),
        }
    }

    /// Records the admin's `sql` and answers it (no syntax check: see [`Self::serve`]).
    pub fn answer(&mut self, version: &str, sql: &str) -> Result<String, Refused> {
        self.statements.push(sql.to_owned());
        if let Some(answer) = self.select(version, sql) {
            return Ok(answer);
        }
        if sql.starts_with("GRANT")
            || sql.starts_with("CREATE ROLE")
            || sql.starts_with("DROP ROLE")
        {
            return self.access(sql).map(|()| String::new());
        }
        if sql.starts_with("KILL QUERY") {
            return Ok(self.kill_queries(sql));
        }
        if sql.starts_with("CREATE USER ") || sql.starts_with("ALTER USER ") {
            return self.user_statement(sql).map(|()| String::new());
        }
        self.change(sql)
    }

    /// `KILL QUERY WHERE user = 'u' ASYNC`: each of the user's running queries is asked to stop (and,
    /// here, stops); the answer is a TSV line per query: status, id, user, query.
    fn kill_queries(&mut self, sql: &str) -> String {
        let user = quoted(sql, "WHERE user = ").unwrap_or_default().to_owned();
        let (ended, left): (Vec<_>, Vec<_>) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(|(u, _)| *u == user);
        self.running = left;
        ended
            .iter()
            .map(|(u, id)| format!("waiting\t{id}\t{u}\tSELECT sleep(3)\n"))
            .collect()
    }

    /// Roles and grants: ClickHouse refuses a grant to, or of, a role or user it does not have.
    fn access(&mut self, sql: &str) -> Result<(), Refused> {
        let sql = without_grant_cluster(sql);
        if let Some(role) = quoted(&sql, "CREATE ROLE IF NOT EXISTS ") {
            self.roles.insert(role.to_owned());
        } else if let Some(role) = quoted(&sql, "DROP ROLE IF EXISTS ") {
            self.roles.remove(role);
            self.grants.remove(role);
            for granted in self.role_grants.values_mut() {
                granted.remove(role);
            }
        } else if let Some((privileges, object, grantee)) = grant_of(&sql) {
            if !self.users.contains_key(&grantee) && !self.roles.contains(&grantee) {
                return Err(unknown_role(&grantee));
            }
            let held = self.grants.entry(grantee).or_default();
            held.extend(privileges.into_iter().map(|p| (p, object.clone())));
        } else {
            // `GRANT role TO user`
            let role = quoted(&sql, "GRANT ").unwrap_or_default().to_owned();
            let user = quoted(&sql, " TO ").unwrap_or_default().to_owned();
            if !self.roles.contains(&role) {
                return Err(unknown_role(&role));
            }
            if !self.users.contains_key(&user) {
                return Err(unknown_user(&user));
            }
            self.role_grants.entry(user).or_default().insert(role);
        }
        Ok(())
    }

    /// The answer to a query of the server's own tables, or `None` for a statement.
    fn select(&self, version: &str, sql: &str) -> Option<String> {
        let count = |found: bool| Some(format!("{}\n", u8::from(found)));
        if sql == "SELECT version()" {
            return Some(format!("{version}\n"));
        }
        if sql == "SELECT 1" {
            return Some("1\n".to_owned());
        }
        if sql.starts_with("SELECT count() FROM system.databases") {
            return count(self.databases.contains_key(quoted(sql, "name = ")?));
        }
        if sql.starts_with("SELECT count() FROM system.users") {
            return count(self.users.contains_key(quoted(sql, "name = ")?));
        }
        if sql.starts_with("SELECT count() FROM system.clusters") {
            return count(self.clusters.contains(quoted(sql, "cluster = ")?));
        }
        if sql.starts_with("SELECT count() FROM system.user_directories") {
            return count(self.replicated_users);
        }
        if sql.starts_with("SELECT granted_role_name FROM system.role_grants") {
            let user = quoted(sql, "user_name = ")?;
            return Some(lines(self.role_grants.get(user).into_iter().flatten()));
        }
        if sql.starts_with("SELECT DISTINCT role_name FROM system.grants") {
            let db = quoted(sql, "database = ")?;
            // A user's grant has no role: ClickHouse's TSV writes its NULL as `\N`.
            let null = "\\N".to_owned();
            let on_db = |(_, on): &(String, access::Object)| match on {
                access::Object::Database(d) | access::Object::Table(d, _) => d == db,
                access::Object::Global => false,
            };
            let roles = self
                .grants
                .iter()
                .filter(|(_, held)| held.iter().any(on_db))
                .map(|(grantee, _)| {
                    if self.roles.contains(grantee) {
                        grantee
                    } else {
                        &null
                    }
                });
            return Some(lines(roles.collect::<BTreeSet<_>>()));
        }
        None
    }

    /// `CREATE USER [IF NOT EXISTS] u …` and `ALTER USER u …`: the user, its authentication methods
    /// (checked as ClickHouse checks them), `HOST`, `DEFAULT DATABASE`.
    fn user_statement(&mut self, sql: &str) -> Result<(), Refused> {
        let methods = auth::methods(sql)?;
        let host_locked = sql.contains(" HOST NONE");
        let default_database = quoted(sql, " DEFAULT DATABASE ").map(str::to_owned);
        if let Some((user, if_not_exists)) = named(sql, "CREATE USER ", "IF NOT EXISTS ") {
            if self.users.contains_key(user) {
                if if_not_exists {
                    return Ok(());
                }
                return Err(Refused {
                    code: codes::ACCESS_ENTITY_ALREADY_EXISTS,
                    message: format!(
                        "user `{user}`: cannot insert because user `{user}` already exists in local_directory"
                    ),
                });
            }
            let new = User {
                methods: methods.unwrap_or_default(),
                locked: host_locked,
                default_database,
            };
            self.users.insert(user.to_owned(), new);
            return Ok(());
        }
        let name = quoted(sql, "ALTER USER ").unwrap_or_default();
        let Some(user) = self.users.get_mut(name) else {
            return Err(unknown_user(name));
        };
        if let Some(methods) = methods {
            user.methods = methods;
        }
        if sql.contains(" HOST ") {
            user.locked = host_locked;
        }
        if default_database.is_some() {
            user.default_database = default_database;
        }
        Ok(())
    }

    /// Everything else the provisioner sends.
    fn change(&mut self, sql: &str) -> Result<String, Refused> {
        let assigned_to = || quoted(sql, " TO ").unwrap_or_default().to_owned();
        if let Some(profile) = quoted(sql, "CREATE SETTINGS PROFILE OR REPLACE ") {
            let settings = sql
                [sql.rfind(" SETTINGS ").expect("SETTINGS") + 10..sql.find(" TO ").expect("TO")]
                .split(", ")
                .map(|s| {
                    let (name, rest) = s.split_once(" = ").expect("name = value");
                    let value = rest.split(' ').next().unwrap_or_default();
                    (name.to_owned(), value.parse().expect("an integer setting"))
                })
                .collect();
            self.profiles
                .insert(profile.to_owned(), (settings, assigned_to()));
        } else if let Some(profile) = quoted(sql, "DROP SETTINGS PROFILE IF EXISTS ") {
            self.profiles.remove(profile);
        } else if let Some(quota) = quoted(sql, "CREATE QUOTA OR REPLACE ") {
            let rest = &sql[sql.find("MAX queries = ").expect("MAX queries") + 14..];
            let max_queries = rest
                .split(' ')
                .next()
                .unwrap_or_default()
                .parse()
                .expect("a count");
            let interval_seconds = interval_seconds(sql).ok_or_else(|| Refused {
                code: codes::NOT_IMPLEMENTED,
                message: "the ClickHouse stand-in models quota intervals in seconds to weeks"
                    .into(),
            })?;
            let quota_of = Quota {
                interval_seconds,
                max_queries,
                to: assigned_to(),
            };
            self.quotas.insert(quota.to_owned(), quota_of);
        } else if let Some(quota) = quoted(sql, "DROP QUOTA IF EXISTS ") {
            self.quotas.remove(quota);
        } else if let Some((db, if_not_exists)) = named(sql, "CREATE DATABASE ", "IF NOT EXISTS ") {
            if self.databases.contains_key(db) && !if_not_exists {
                return Err(Refused {
                    code: codes::DATABASE_ALREADY_EXISTS,
                    message: format!("Database {db} already exists"),
                });
            }
            self.databases.entry(db.to_owned()).or_default();
        } else if let Some((db, if_exists)) = named(sql, "DROP DATABASE ", "IF EXISTS ") {
            if self.databases.remove(db).is_none() && !if_exists {
                return Err(unknown_database(db));
            }
        } else if let Some((user, if_exists)) = named(sql, "DROP USER ", "IF EXISTS ") {
            if self.users.remove(user).is_none() && !if_exists {
                return Err(unknown_user(user));
            }
            self.role_grants.remove(user);
            self.grants.remove(user);
        }
        Ok(String::new())
    }

    pub fn ddl(&self) -> Vec<String> {
        self.statements
            .iter()
            .filter(|s| !s.starts_with("SELECT"))
            .cloned()
            .collect()
    }

    /// Statements that changed an existing user's password.
    pub fn password_changes(&self) -> usize {
        self.statements
            .iter()
            .filter(|s| s.starts_with("ALTER USER ") && s.contains(" BY "))
            .count()
    }

    /// The SHA-256 of `user`'s password with no expiry, as `sha256_hash` set it.
    pub fn password_hash(&self, user: &str) -> Option<String> {
        let methods = &self.users.get(user)?.methods;
        methods
            .iter()
            .find(|m| m.kind == auth::Kind::Sha256 && m.valid_until.is_none())
            .map(|m| m.secret.clone())
    }

    pub fn password_matches(&self, user: &str, password: &str) -> bool {
        self.password_hash(user)
            .is_some_and(|h| h == sha256_hex(password))
    }

    fn now(&self) -> jiff::Timestamp {
        self.clock
            .as_ref()
            .map_or_else(jiff::Timestamp::now, sentry_tenants::clock::Clock::now)
    }

    pub fn is_locked(&self, user: &str) -> Option<bool> {
        self.users.get(user).map(|u| u.locked)
    }

    /// Whether `user` may log in with `password`: one of its methods accepts it now (each until its
    /// own `VALID UNTIL`), logins not locked, and no red run rehearsed with every login refused.
    pub fn may_log_in(&self, user: &str, password: &str) -> bool {
        if crate::rehearsal::logins_refused() {
            return false;
        }
        let now = self.now();
        self.users
            .get(user)
            .is_some_and(|u| !u.locked && u.methods.iter().any(|m| m.accepts(password, now)))
    }
}
