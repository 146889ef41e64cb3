//! What a ClickHouse server remembers of the provisioner's statements, for the test doubles that answer
//! them (the in-process seam and the HTTP stand-in): every statement, each user's password hash, and
//! whether its logins are locked (`HOST NONE`). Statements are read the way the provisioner writes them
//! (`sql.rs`); the real server's reading of them is checked against Debian's ClickHouse and chdb's parser.

use std::collections::{BTreeSet, HashMap, HashSet};

/// A statement the server refuses: its exception code and message, as ClickHouse answers them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: u32,
    pub message: String,
}

/// ClickHouse's codes for the refusals modelled here.
pub mod codes {
    pub const BAD_ARGUMENTS: u32 = 36;
    pub const UNKNOWN_USER: u32 = 192;
    pub const UNKNOWN_ROLE: u32 = 511;
}

#[derive(Default, Debug)]
pub struct Model {
    pub statements: Vec<String>,
    /// User → hex SHA-256 of its password, as `IDENTIFIED WITH sha256_hash BY` set it.
    pub users: HashMap<String, String>,
    pub locked: HashMap<String, bool>,
    pub databases: HashSet<String>,
    /// User → its other authentication methods (ClickHouse ≥ 24.9 holds several per user), each a
    /// password hash accepted until its own `VALID UNTIL`, as rotations on such a server leave them.
    pub expiring: HashMap<String, Vec<(String, jiff::Timestamp)>>,
    /// Settings profile → its `setting = value` constraints, in order, and the user it is assigned to.
    pub profiles: HashMap<String, (Vec<(String, i64)>, String)>,
    /// Quota → queries per hour, and the user it is assigned to.
    pub quotas: HashMap<String, (i64, String)>,
    /// Whose now a `VALID UNTIL` is compared with: the in-memory tier's manual clock, or (None) this
    /// machine's, as a server's own.
    pub clock: Option<sentry_tenants::clock::Clock>,
    /// Queries running now, as (user, query id): a test starts them; `KILL QUERY WHERE user = …`
    /// ends the user's, answering a line per query as the server does.
    pub running: Vec<(String, String)>,
    /// Clusters in `system.clusters`, and whether users live in a replicated user directory.
    pub clusters: HashSet<String>,
    pub replicated_users: bool,
    /// Roles (`CREATE ROLE`), the roles granted to each user (`GRANT role TO user`), and each
    /// grantee's databases with a privilege on them (`GRANT … ON db.* TO grantee`).
    pub roles: BTreeSet<String>,
    pub role_grants: HashMap<String, BTreeSet<String>>,
    pub database_grants: HashMap<String, BTreeSet<String>>,
}

/// ClickHouse's `max_authentication_methods_per_user` default: a user with more is refused.
pub const MAX_AUTHENTICATION_METHODS: usize = 100;

/// The authentication methods of `IDENTIFIED WITH sha256_hash BY 'h' [VALID UNTIL 't'], sha256_hash BY
/// 'h' …`, in order: each hash and its expiry, if it has one.
fn auth_methods(sql: &str) -> Vec<(String, Option<jiff::Timestamp>)> {
    let mut methods = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find(" BY '") {
        rest = &rest[at + 5..];
        let end = rest.find('\'').expect("a closed hash");
        let hash = rest[..end].to_owned();
        rest = &rest[end + 1..];
        let mut until = None;
        if let Some(time) = rest.strip_prefix(" VALID UNTIL '") {
            let end = time.find('\'').expect("a closed time");
            until = Some(
                time[..end]
                    .parse()
                    .expect("VALID UNTIL is an RFC 3339 time"),
            );
            rest = &time[end + 1..];
        }
        methods.push((hash, until));
    }
    methods
}

fn quoted_after<'a>(sql: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &sql[sql.find(marker)? + marker.len()..];
    let quote = rest.chars().next()?;
    let rest = &rest[1..];
    Some(&rest[..rest.find(quote)?])
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

impl Model {
    /// Records `sql` and answers it as a server of `version` would, or refuses it as the server would.
    pub fn answer(&mut self, version: &str, sql: &str) -> Result<String, Refused> {
        self.statements.push(sql.to_owned());
        self.answer_recorded(version, sql)
    }

    fn answer_recorded(&mut self, version: &str, sql: &str) -> Result<String, Refused> {
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
        if sql.starts_with("ALTER USER ") {
            let user = quoted_after(sql, "ALTER USER ").unwrap_or_default();
            if !self.users.contains_key(user) {
                return Err(Refused {
                    code: codes::UNKNOWN_USER,
                    message: format!("There is no user `{user}` in user directories"),
                });
            }
        }
        if auth_methods(sql).len() > MAX_AUTHENTICATION_METHODS {
            return Err(Refused {
                code: codes::BAD_ARGUMENTS,
                message: "User can not be created/updated because it exceeds the allowed quantity of authentication methods per user. Check the `max_authentication_methods_per_user` setting".to_owned(),
            });
        }
        Ok(self.change(sql))
    }

    /// `KILL QUERY WHERE user = 'u' ASYNC`: each of the user's running queries is asked to stop (and,
    /// here, stops); the answer is a TSV line per query: status, id, user, query.
    fn kill_queries(&mut self, sql: &str) -> String {
        let user = quoted_after(sql, "WHERE user = ")
            .unwrap_or_default()
            .to_owned();
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
        let unknown_role = |role: &str| Refused {
            code: codes::UNKNOWN_ROLE,
            message: format!("There is no role `{role}` in user directories"),
        };
        if let Some(role) = quoted_after(&sql, "CREATE ROLE IF NOT EXISTS ") {
            self.roles.insert(role.to_owned());
        } else if let Some(role) = quoted_after(&sql, "DROP ROLE IF EXISTS ") {
            self.roles.remove(role);
            self.database_grants.remove(role);
            for granted in self.role_grants.values_mut() {
                granted.remove(role);
            }
        } else if let Some(on) = sql.find(" ON ") {
            // `GRANT privileges ON `db`.* TO grantee`
            let database = quoted_after(&sql[on..], " ON ")
                .unwrap_or_default()
                .to_owned();
            let grantee = quoted_after(&sql, " TO ").unwrap_or_default().to_owned();
            if !self.users.contains_key(&grantee) && !self.roles.contains(&grantee) {
                return Err(unknown_role(&grantee));
            }
            self.database_grants
                .entry(grantee)
                .or_default()
                .insert(database);
        } else {
            // `GRANT role TO user`
            let role = quoted_after(&sql, "GRANT ").unwrap_or_default().to_owned();
            let user = quoted_after(&sql, " TO ").unwrap_or_default().to_owned();
            if !self.roles.contains(&role) {
                return Err(unknown_role(&role));
            }
            if !self.users.contains_key(&user) {
                return Err(Refused {
                    code: codes::UNKNOWN_USER,
                    message: format!("There is no user `{user}` in user directories"),
                });
            }
            self.role_grants.entry(user).or_default().insert(role);
        }
        Ok(())
    }

    /// The answer to a query of the server's own tables, or `None` for a statement.
    fn select(&self, version: &str, sql: &str) -> Option<String> {
        if sql == "SELECT version()" {
            return Some(format!("{version}\n"));
        }
        if sql.starts_with("SELECT count() FROM system.databases") {
            let db = quoted_after(sql, "name = ").unwrap_or_default();
            return Some(format!("{}\n", u8::from(self.databases.contains(db))));
        }
        if sql.starts_with("SELECT granted_role_name FROM system.role_grants") {
            let user = quoted_after(sql, "user_name = ").unwrap_or_default();
            return Some(lines(self.role_grants.get(user).into_iter().flatten()));
        }
        if sql.starts_with("SELECT DISTINCT role_name FROM system.grants") {
            let db = quoted_after(sql, "database = ").unwrap_or_default();
            // A user's grant has no role: ClickHouse's TSV writes its NULL as `\N`.
            let null = "\\N".to_owned();
            let roles = self
                .database_grants
                .iter()
                .filter(|(_, dbs)| dbs.contains(db))
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

    /// Everything else the provisioner sends, answered as before.
    fn change(&mut self, sql: &str) -> String {
        if sql.starts_with("SELECT count() FROM system.users") {
            let user = quoted_after(sql, "name = ").unwrap_or_default();
            return format!("{}\n", u8::from(self.users.contains_key(user)));
        }
        if sql == "SELECT 1" {
            return "1\n".to_owned();
        }
        if sql.starts_with("SELECT count() FROM system.clusters") {
            let cluster = quoted_after(sql, "cluster = ").unwrap_or_default();
            return format!("{}\n", u8::from(self.clusters.contains(cluster)));
        }
        if sql.starts_with("SELECT count() FROM system.user_directories") {
            return format!("{}\n", u8::from(self.replicated_users));
        }
        let host_locked = sql.contains(" HOST NONE");
        let assigned_to = || quoted_after(sql, " TO ").unwrap_or_default().to_owned();
        if let Some(profile) = quoted_after(sql, "CREATE SETTINGS PROFILE OR REPLACE ") {
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
        } else if let Some(profile) = quoted_after(sql, "DROP SETTINGS PROFILE IF EXISTS ") {
            self.profiles.remove(profile);
        } else if let Some(quota) = quoted_after(sql, "CREATE QUOTA OR REPLACE ") {
            let rest = &sql[sql.find("MAX queries = ").expect("MAX queries") + 14..];
            let n = rest
                .split(' ')
                .next()
                .unwrap_or_default()
                .parse()
                .expect("a count");
            self.quotas.insert(quota.to_owned(), (n, assigned_to()));
        } else if let Some(quota) = quoted_after(sql, "DROP QUOTA IF EXISTS ") {
            self.quotas.remove(quota);
        } else if let Some(db) = quoted_after(sql, "CREATE DATABASE IF NOT EXISTS ") {
            self.databases.insert(db.to_owned());
        } else if let Some(db) = quoted_after(sql, "DROP DATABASE IF EXISTS ") {
            self.databases.remove(db);
        } else if let Some(user) = quoted_after(sql, "DROP USER IF EXISTS ") {
            self.users.remove(user);
            self.locked.remove(user);
            self.expiring.remove(user);
            self.role_grants.remove(user);
            self.database_grants.remove(user);
        } else if sql.starts_with("CREATE USER IF NOT EXISTS ") {
            let user = quoted_after(sql, "CREATE USER IF NOT EXISTS ")
                .unwrap_or_default()
                .to_owned();
            let hash = quoted_after(sql, "BY ").unwrap_or_default().to_owned();
            if !self.users.contains_key(&user) {
                self.locked.insert(user.clone(), host_locked);
                self.users.insert(user, hash);
            }
        } else if sql.starts_with("ALTER USER ") {
            let user = quoted_after(sql, "ALTER USER ")
                .unwrap_or_default()
                .to_owned();
            // `IDENTIFIED WITH …` sets the user's whole set of methods: each one listed, those with a
            // `VALID UNTIL` accepted until then. The provisioner always lists one with no expiry.
            let methods = auth_methods(sql);
            if !methods.is_empty() {
                let (forever, expiring): (Vec<_>, Vec<_>) =
                    methods.into_iter().partition(|(_, until)| until.is_none());
                assert_eq!(forever.len(), 1, "one password with no expiry: {sql}");
                self.users.insert(user.clone(), forever[0].0.clone());
                let expiring = expiring
                    .into_iter()
                    .filter_map(|(hash, until)| Some((hash, until?)))
                    .collect();
                self.expiring.insert(user.clone(), expiring);
            }
            if sql.contains(" HOST ") {
                self.locked.insert(user, host_locked);
            }
        }
        String::new()
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

    pub fn password_matches(&self, user: &str, password: &str) -> bool {
        self.users
            .get(user)
            .is_some_and(|h| *h == sha256_hex(password))
    }

    fn now(&self) -> jiff::Timestamp {
        self.clock
            .as_ref()
            .map_or_else(jiff::Timestamp::now, sentry_tenants::clock::Clock::now)
    }

    /// Whether `user` may log in with `password`: its password, or an older one still valid, and
    /// logins not locked (and no red run rehearsed with every login refused).
    pub fn may_log_in(&self, user: &str, password: &str) -> bool {
        if crate::rehearsal::logins_refused() {
            return false;
        }
        let hash = sha256_hex(password);
        let older = self.expiring.get(user).is_some_and(|methods| {
            methods
                .iter()
                .any(|(h, until)| *h == hash && self.now() < *until)
        });
        (self.password_matches(user, password) || older)
            && !self.locked.get(user).copied().unwrap_or(false)
    }
}
