//! A tenant's own login, in the order ClickHouse takes it: authentication; the statement parsed (a
//! syntax error costs no quota); the query counted against the user's quota; the privileges the
//! statement needs against the user's grants and its roles'; `SET` against its settings profile; the
//! databases and tables it names against those that exist; then its change, and its answer.

use super::access::{self, Change, Need, Object};
use super::{Model, Refused, codes, unknown_database};

fn refused(code: u32, message: String) -> Refused {
    Refused { code, message }
}

/// Whether holding `held` gives `needed`: the same privilege, `ALL`, or the group it belongs to
/// (`CREATE` gives `CREATE TABLE`).
fn privilege_covers(held: &str, needed: &str) -> bool {
    held == needed
        || matches!(held, "ALL" | "ALL PRIVILEGES")
        || needed
            .strip_prefix(held)
            .is_some_and(|rest| rest.starts_with(' '))
}

fn object_covers(held: &Object, needed: &Object) -> bool {
    match (held, needed) {
        (Object::Global, _) => true,
        (Object::Database(h), Object::Database(n) | Object::Table(n, _)) => h == n,
        (Object::Table(hd, ht), Object::Table(nd, nt)) => hd == nd && ht == nt,
        _ => false,
    }
}

impl Model {
    /// Answers `sql` sent by `user` with `password`, or refuses it as ClickHouse would.
    pub fn answer_as(&mut self, user: &str, password: &str, sql: &str) -> Result<String, Refused> {
        if !self.may_log_in(user, password) {
            return Err(refused(
                codes::AUTHENTICATION_FAILED,
                format!(
                    "{user}: Authentication failed: password is incorrect, or there is no user with such name"
                ),
            ));
        }
        let parsed = self
            .chdb()
            .parse(sql)
            .map_err(|m| refused(codes::SYNTAX_ERROR, format!("Syntax error: {m}")))?;
        self.count_query(user)?;
        let default_db = self.users[user]
            .default_database
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let tree = parsed.tree.unwrap_or_default();
        let statement = access::read(&parsed.formatted, &tree, &default_db)?;
        if let Some(need) = statement.needs.iter().find(|n| !self.holds(user, n)) {
            return Err(refused(
                codes::ACCESS_DENIED,
                format!(
                    "{user}: Not enough privileges. To execute this query, it's necessary to have the grant {} ON {}",
                    need.privilege, need.on
                ),
            ));
        }
        self.check_settings(user, &statement.settings)?;
        self.check_catalogue(&statement)?;
        match &statement.change {
            Change::Nothing => {}
            Change::CreateTable {
                database, table, ..
            } => {
                let tables = self.databases.entry(database.clone()).or_default();
                tables.insert(table.clone());
            }
            Change::DropTable {
                database, table, ..
            } => {
                if let Some(tables) = self.databases.get_mut(database) {
                    tables.remove(table);
                }
            }
        }
        self.tenant_statements
            .push((user.to_owned(), sql.to_owned()));
        if statement.literal_only {
            return self
                .chdb()
                .evaluate(sql)
                .map_err(|m| refused(codes::BAD_ARGUMENTS, m));
        }
        Ok(String::new())
    }

    /// Whether `user` holds `need`, by its own grants or those of a role granted to it. Any privilege
    /// on a database or one of its tables gives `SHOW TABLES` on it, as ClickHouse grants it implicitly.
    pub fn holds(&self, user: &str, need: &Need) -> bool {
        let roles = self.role_grants.get(user).into_iter().flatten();
        let grantees = std::iter::once(user).chain(roles.map(String::as_str));
        let held: Vec<&(String, Object)> = grantees
            .filter_map(|g| self.grants.get(g))
            .flatten()
            .collect();
        let implicit_show = |(_, on): &&(String, Object)| match (&need.on, on) {
            (Object::Database(n), Object::Database(h) | Object::Table(h, _)) => n == h,
            _ => false,
        };
        held.iter().any(|(privilege, on)| {
            privilege_covers(privilege, &need.privilege) && object_covers(on, &need.on)
        }) || (need.privilege == "SHOW TABLES" && held.iter().any(implicit_show))
    }

    /// Counts the query in each quota assigned to `user`, in its current interval (intervals start at
    /// multiples of their length since the epoch); one over its maximum is refused.
    fn count_query(&mut self, user: &str) -> Result<(), Refused> {
        let now = self.now().as_second();
        let quotas: Vec<(String, super::Quota)> = self
            .quotas
            .iter()
            .filter(|(_, q)| q.to == user)
            .map(|(name, q)| (name.clone(), q.clone()))
            .collect();
        for (name, quota) in quotas {
            let interval = now.div_euclid(quota.interval_seconds);
            let used = self
                .quota_usage
                .entry((name.clone(), interval))
                .or_default();
            *used += 1;
            if *used > quota.max_queries {
                let end = jiff::Timestamp::from_second((interval + 1) * quota.interval_seconds)
                    .map_or_else(|_| "?".to_owned(), |t| t.strftime("%F %T").to_string());
                return Err(refused(
                    codes::QUOTA_EXCEEDED,
                    format!(
                        "Quota for user `{user}` for {}s has been exceeded: queries = {used}/{}. Interval will end at {end}. Name of quota template: `{name}`",
                        quota.interval_seconds, quota.max_queries
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A `SET` of a setting the user's profile constrains (`READONLY`/`CONST`) is refused.
    fn check_settings(&self, user: &str, settings: &[String]) -> Result<(), Refused> {
        let constrained = self
            .profiles
            .values()
            .filter(|(_, to)| to == user)
            .flat_map(|(constraints, _)| constraints.iter().map(|(name, _)| name));
        for name in constrained {
            if settings.contains(name) {
                return Err(refused(
                    codes::SETTING_CONSTRAINT_VIOLATION,
                    format!("Setting {name} should not be changed"),
                ));
            }
        }
        Ok(())
    }

    /// The databases and tables the statement names exist; the table it creates does not.
    fn check_catalogue(&self, statement: &access::Statement) -> Result<(), Refused> {
        for db in &statement.databases {
            if !self.databases.contains_key(db) {
                return Err(unknown_database(db));
            }
        }
        for (db, table) in &statement.tables {
            let tables = self.databases.get(db).ok_or_else(|| unknown_database(db))?;
            if !tables.contains(table) {
                return Err(refused(
                    codes::UNKNOWN_TABLE,
                    format!("Table {db}.{table} does not exist"),
                ));
            }
        }
        if let Change::CreateTable {
            database,
            table,
            if_not_exists: false,
        } = &statement.change
            && self
                .databases
                .get(database)
                .is_some_and(|t| t.contains(table))
        {
            return Err(refused(
                codes::TABLE_ALREADY_EXISTS,
                format!("Table {database}.{table} already exists"),
            ));
        }
        Ok(())
    }
}
