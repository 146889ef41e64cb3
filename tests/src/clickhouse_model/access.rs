//! What a tenant's statement needs before ClickHouse runs it, read from chdb's parse tree (`EXPLAIN
//! AST`) and canonical text (`formatQuery`) — never from the statement's own text: the privileges it
//! needs on which objects (as ClickHouse's access check names them), the tables and databases that
//! must exist, and what it changes. A statement shape this does not model is refused
//! ([`codes::NOT_IMPLEMENTED`]), so nothing passes a test because the stand-in let it through.

use super::{Refused, codes};

/// One line of `EXPLAIN AST` and the lines indented under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub label: String,
    pub children: Vec<Node>,
}

impl Node {
    /// The node's kind: the label's first word (`TableIdentifier`, `Function`, …).
    pub fn kind(&self) -> &str {
        self.label.split(' ').next().unwrap_or_default()
    }

    /// The label after the kind, without its `(alias a)` and `(children N)`: a name, a function's.
    pub fn argument(&self) -> &str {
        let rest = self.label.split_once(' ').map_or("", |(_, rest)| rest);
        let rest = rest.split(" (children ").next().unwrap_or_default();
        rest.split(" (alias ").next().unwrap_or_default().trim()
    }

    fn walk<'a>(&'a self, out: &mut Vec<(&'a Node, Option<&'a Node>)>, parent: Option<&'a Node>) {
        out.push((self, parent));
        for child in &self.children {
            child.walk(out, Some(self));
        }
    }

    /// Every node under this one (itself included) with its parent.
    pub fn all(&self) -> Vec<(&Node, Option<&Node>)> {
        let mut out = Vec::new();
        self.walk(&mut out, None);
        out
    }
}

/// The tree of `EXPLAIN AST`'s output: one node a line, children indented one space deeper.
pub fn tree(text: &str) -> Option<Node> {
    let mut stack: Vec<(usize, Node)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let depth = line.len() - line.trim_start_matches(' ').len();
        let node = Node {
            label: line.trim().to_owned(),
            children: Vec::new(),
        };
        while stack.last().is_some_and(|(d, _)| *d >= depth) {
            let (_, done) = stack.pop()?;
            stack.last_mut()?.1.children.push(done);
        }
        stack.push((depth, node));
    }
    while stack.len() > 1 {
        let (_, done) = stack.pop()?;
        stack.last_mut()?.1.children.push(done);
    }
    stack.pop().map(|(_, root)| root)
}

/// What a privilege is held on, as `GRANT … ON` names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Object {
    /// `*.*`
    Global,
    /// `db.*`
    Database(String),
    /// `db.table`
    Table(String, String),
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Global => write!(f, "*.*"),
            Self::Database(db) => write!(f, "{db}.*"),
            Self::Table(db, table) => write!(f, "{db}.{table}"),
        }
    }
}

/// A privilege a statement needs: `SELECT` on `db.table`, `CREATE USER` on `*.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub privilege: String,
    pub on: Object,
}

/// What a statement changes in the stand-in's catalogue of databases and tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Nothing,
    CreateTable {
        database: String,
        table: String,
        if_not_exists: bool,
    },
    DropTable {
        database: String,
        table: String,
        if_exists: bool,
    },
}

/// A tenant's statement as the access check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// In the order ClickHouse checks them; the first one not held refuses the statement.
    pub needs: Vec<Need>,
    /// Tables read or written that must exist (`UNKNOWN_TABLE` otherwise), and databases named.
    pub tables: Vec<(String, String)>,
    pub databases: Vec<String>,
    pub change: Change,
    /// Settings a `SET` changes, checked against the user's settings profile.
    pub settings: Vec<String>,
    /// Reads nothing but literals: chdb computes its answer.
    pub literal_only: bool,
}

/// System tables any user may read on a server with `select_from_system_db_requires_grant` (ClickHouse's
/// shipped `config.xml`): the constant ones and those filtered to what the user may see.
pub const OPEN_SYSTEM_TABLES: [&str; 5] = ["one", "tables", "columns", "databases", "contributors"];

fn unmodelled(what: &str) -> Refused {
    Refused {
        code: codes::NOT_IMPLEMENTED,
        message: format!(
            "the ClickHouse stand-in does not model {what} for a tenant's login; it refuses what it does not model"
        ),
    }
}

/// `db.table` or `table` (in the user's default database), for plain names only: a name with a dot,
/// space or quote in it reads ambiguously in `EXPLAIN AST`, so it is refused as unmodelled.
fn table_name(name: &str, default_db: &str) -> Result<(String, String), Refused> {
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    match name.split('.').collect::<Vec<_>>()[..] {
        [table] if plain(table) => Ok((default_db.to_owned(), table.to_owned())),
        [db, table] if plain(db) && plain(table) => Ok((db.to_owned(), table.to_owned())),
        _ => Err(unmodelled(&format!("the name `{name}`"))),
    }
}

/// The `Identifier` children of a DDL node: (database, table), (table) or (database).
fn identifiers(node: &Node) -> Vec<&str> {
    node.children
        .iter()
        .filter(|c| c.kind() == "Identifier")
        .map(Node::argument)
        .collect()
}

/// The database a `CREATE DATABASE`/`DROP DATABASE` node names.
fn database_named(node: &Node) -> Result<String, Refused> {
    plain_name(identifiers(node).first().copied().unwrap_or_default())
}

fn plain_name(name: &str) -> Result<String, Refused> {
    table_name(name, "").map(|(_, n)| n)
}

/// The object a DDL node names: its identifiers as (database, table), the database defaulted.
fn ddl_table(node: &Node, default_db: &str) -> Result<(String, String), Refused> {
    match identifiers(node)[..] {
        [table] => Ok((default_db.to_owned(), plain_name(table)?)),
        [db, table] => Ok((plain_name(db)?, plain_name(table)?)),
        _ => Err(unmodelled(&format!("`{}`", node.label))),
    }
}

fn need(privilege: &str, on: Object) -> Need {
    Need {
        privilege: privilege.to_owned(),
        on,
    }
}

const TABLE_FUNCTION_PRIVILEGE: &str = "CREATE TEMPORARY TABLE";

/// Reads of tables anywhere under `root`: each table named in a `FROM`/`JOIN`/subquery, the table of an
/// `IN table`, a table function (which needs `CREATE TEMPORARY TABLE` first), a dictionary read.
fn reads(root: &Node, default_db: &str, out: &mut Statement) -> Result<(), Refused> {
    for (node, parent) in root.all() {
        let parent_kind = parent.map_or("", Node::kind);
        match (node.kind(), parent_kind) {
            ("TableIdentifier", _) => {
                let (db, table) = table_name(node.argument(), default_db)?;
                select(out, db, table);
            }
            ("Function", "TableExpression" | "InsertQuery") => {
                out.needs
                    .push(need(TABLE_FUNCTION_PRIVILEGE, Object::Global));
            }
            ("Function", _) if node.argument().starts_with("dict") => {
                let first = node.children.first().and_then(|args| args.children.first());
                let name = first
                    .filter(|a| a.kind() == "Literal")
                    .map(|a| a.argument().trim_matches('\''))
                    .ok_or_else(|| unmodelled("a dictionary named by an expression"))?;
                let (db, dict) = table_name(name, default_db)?;
                out.needs.push(need("dictGet", Object::Table(db, dict)));
            }
            ("Function", _) if is_in(node.argument()) => {
                let set = node.children.first().and_then(|args| args.children.get(1));
                if let Some(set) = set.filter(|s| s.kind() == "Identifier") {
                    let (db, table) = table_name(set.argument(), default_db)?;
                    select(out, db, table);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn is_in(function: &str) -> bool {
    matches!(function, "in" | "notIn" | "globalIn" | "globalNotIn")
}

fn select(out: &mut Statement, db: String, table: String) {
    if db == "system" && OPEN_SYSTEM_TABLES.contains(&table.as_str()) {
        return;
    }
    if db != "system" {
        out.tables.push((db.clone(), table.clone()));
    }
    out.needs.push(need("SELECT", Object::Table(db, table)));
}

/// Functions of their arguments alone: a query of literals and these reads nothing of the server's.
const PURE_FUNCTIONS: [&str; 12] = [
    "plus",
    "minus",
    "multiply",
    "divide",
    "modulo",
    "negate",
    "equals",
    "notEquals",
    "less",
    "greater",
    "and",
    "or",
];

/// Nodes that carry nothing but literals and pure functions of them.
fn only_literals(root: &Node) -> bool {
    root.all().iter().all(|(n, _)| match n.kind() {
        "SelectWithUnionQuery" | "ExpressionList" | "SelectQuery" | "Literal" => true,
        "Function" => PURE_FUNCTIONS.contains(&n.argument()),
        _ => false,
    })
}

/// Access-management and server statements: the global privilege each needs, which no tenant holds.
fn global_privilege(kind: &str, formatted: &str) -> Option<String> {
    let words = |n: usize| {
        formatted
            .split_whitespace()
            .take(n)
            .collect::<Vec<_>>()
            .join(" ")
    };
    Some(match kind {
        "CreateUserQuery" => "CREATE USER".to_owned(),
        "CreateRoleQuery" => "CREATE ROLE".to_owned(),
        "CreateQuotaQuery" => "CREATE QUOTA".to_owned(),
        "CreateSettingsProfileQuery" => "CREATE SETTINGS PROFILE".to_owned(),
        "CreateRowPolicyQuery" => "CREATE ROW POLICY".to_owned(),
        "DropAccessEntityQuery" if formatted.starts_with("DROP SETTINGS PROFILE") => {
            "DROP SETTINGS PROFILE".to_owned()
        }
        "DropAccessEntityQuery" if formatted.starts_with("DROP ROW POLICY") => {
            "DROP ROW POLICY".to_owned()
        }
        "DropAccessEntityQuery" => words(2),
        // A grant needs every privilege it gives held `WITH GRANT OPTION`, a role's `ROLE ADMIN`.
        "GrantQuery" => "GRANT OPTION".to_owned(),
        "SYSTEM" => words(3),
        _ => return None,
    })
}

/// What `formatted` (chdb's canonical text) with parse tree `ast` needs, for a user whose default
/// database is `default_db`.
pub fn read(formatted: &str, ast: &str, default_db: &str) -> Result<Statement, Refused> {
    let root = tree(ast).ok_or_else(|| unmodelled("a statement with no parse tree"))?;
    let mut out = Statement {
        needs: Vec::new(),
        tables: Vec::new(),
        databases: Vec::new(),
        change: Change::Nothing,
        settings: Vec::new(),
        literal_only: false,
    };
    let starts = |prefix: &str| formatted.starts_with(prefix);
    let if_exists = formatted.contains(" IF EXISTS ");
    let if_not_exists = formatted.contains(" IF NOT EXISTS ");
    match root.kind() {
        "SelectWithUnionQuery" | "SelectIntersectExceptQuery" => {
            out.literal_only = only_literals(&root);
        }
        "InsertQuery" => {
            if root
                .children
                .first()
                .is_some_and(|c| c.kind() == "Identifier")
            {
                let (db, table) = ddl_table(&root, default_db)?;
                out.needs
                    .push(need("INSERT", Object::Table(db.clone(), table.clone())));
                out.tables.push((db, table));
            }
        }
        "CreateQuery" if starts("CREATE DATABASE") => {
            let db = database_named(&root)?;
            out.needs
                .push(need("CREATE DATABASE", Object::Database(db)));
        }
        "CreateQuery" if starts("CREATE TEMPORARY TABLE") => {
            out.needs
                .push(need("CREATE TEMPORARY TABLE", Object::Global));
        }
        "CreateQuery"
            if starts("CREATE TABLE")
                || starts("CREATE VIEW")
                || starts("CREATE MATERIALIZED VIEW") =>
        {
            let (db, table) = ddl_table(&root, default_db)?;
            let copies_another = root.children.iter().all(|c| c.kind() == "Identifier");
            if copies_another {
                return Err(unmodelled("`CREATE TABLE … AS another_table`"));
            }
            if let Some(engine) = engine(&root).filter(|e| !modelled_engine(e)) {
                return Err(unmodelled(&format!("the table engine {engine}")));
            }
            let privilege = if starts("CREATE TABLE") {
                "CREATE TABLE"
            } else {
                "CREATE VIEW"
            };
            out.needs
                .push(need(privilege, Object::Table(db.clone(), table.clone())));
            out.databases.push(db.clone());
            out.change = Change::CreateTable {
                database: db,
                table,
                if_not_exists,
            };
        }
        "DropQuery" if starts("DROP DATABASE") => {
            let db = database_named(&root)?;
            out.needs
                .push(need("DROP DATABASE", Object::Database(db.clone())));
            if !if_exists {
                out.databases.push(db);
            }
        }
        "DropQuery" if starts("DROP TABLE") || starts("DROP VIEW") => {
            let (db, table) = ddl_table(&root, default_db)?;
            let privilege = if starts("DROP TABLE") {
                "DROP TABLE"
            } else {
                "DROP VIEW"
            };
            out.needs
                .push(need(privilege, Object::Table(db.clone(), table.clone())));
            if !if_exists {
                out.tables.push((db.clone(), table.clone()));
            }
            out.change = Change::DropTable {
                database: db,
                table,
                if_exists,
            };
        }
        "AlterQuery" if starts("ALTER TABLE") => {
            table_statement(&root, "ALTER", default_db, &mut out)?
        }
        // Not `TRUNCATE DATABASE` or `TRUNCATE ALL TABLES`: the same node, a database's name in it.
        "TruncateQuery" if starts("TRUNCATE TABLE") => {
            table_statement(&root, "TRUNCATE", default_db, &mut out)?;
            if if_exists {
                out.tables.clear();
            }
        }
        "OptimizeQuery" => table_statement(&root, "OPTIMIZE", default_db, &mut out)?,
        "ShowTables" if starts("SHOW TABLES") => {
            let db = match identifiers(&root).first() {
                Some(db) => plain_name(db)?,
                None => default_db.to_owned(),
            };
            out.needs
                .push(need("SHOW TABLES", Object::Database(db.clone())));
            out.databases.push(db);
        }
        "Set" => {
            let list = formatted.strip_prefix("SET ").unwrap_or_default();
            out.settings = list
                .split(", ")
                .filter_map(|s| s.split_once(" = ").map(|(name, _)| name.trim().to_owned()))
                .collect();
        }
        kind => match global_privilege(kind, formatted) {
            Some(privilege) => out.needs.push(need(&privilege, Object::Global)),
            None => {
                let first = formatted
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ");
                return Err(unmodelled(&format!("`{first} …` ({kind})")));
            }
        },
    }
    reads(&root, default_db, &mut out)?;
    Ok(out)
}

fn table_statement(
    root: &Node,
    privilege: &str,
    default_db: &str,
    out: &mut Statement,
) -> Result<(), Refused> {
    let (db, table) = ddl_table(root, default_db)?;
    out.needs
        .push(need(privilege, Object::Table(db.clone(), table.clone())));
    out.tables.push((db, table));
    Ok(())
}

/// The engine of a `CREATE TABLE`'s `Storage definition`, if it names one.
fn engine(root: &Node) -> Option<String> {
    root.all()
        .into_iter()
        .find(|(n, p)| {
            n.kind() == "Function" && p.is_some_and(|p| p.label.starts_with("Storage definition"))
        })
        .map(|(n, _)| n.argument().to_owned())
}

/// Engines that keep their data to themselves: any other (`Merge`, `Distributed`, `MySQL`, `URL`,
/// `File`, …) reads or writes elsewhere, with access rules of its own that this does not model.
fn modelled_engine(engine: &str) -> bool {
    engine.ends_with("MergeTree")
        || matches!(engine, "Memory" | "Log" | "TinyLog" | "StripeLog" | "Null")
}
