//! chdb — ClickHouse's own parser and engine as a Python package (PyPI `chdb-core`, installed into
//! `target/chdb-venv` by `scripts/setup.sh`) — in one long-lived process per ClickHouse stand-in
//! (`tests/chdb_parse.py --serve`): it checks every statement's syntax, gives the parse tree the
//! stand-in reads a tenant's query from, and evaluates queries that read no table.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::processes::Owned;

pub struct Chdb {
    _child: Owned,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// A statement as chdb parsed it: its canonical text (`formatQuery`) and its parse tree (`EXPLAIN
/// AST`), or why the tree could not be had.
pub struct Parsed {
    pub formatted: String,
    pub tree: Result<String, String>,
}

impl Chdb {
    pub fn start() -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        // Another checkout of the tests (scripts/mutants.sh's worktree) names the venv setup.sh made.
        let python = std::env::var_os("SENTRY_TENANTS_CHDB_PYTHON").map_or_else(
            || root.join("../target/chdb-venv/bin/python"),
            PathBuf::from,
        );
        assert!(
            python.exists(),
            "{} is missing: run `bash scripts/setup.sh` (it installs chdb-core)",
            python.display()
        );
        let mut child = Owned::spawn(
            Command::new(python)
                .arg(root.join("chdb_parse.py"))
                .arg("--serve")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        )
        .expect("start chdb");
        let stdin = child.child_mut().stdin.take().expect("stdin");
        let stdout = BufReader::new(child.child_mut().stdout.take().expect("stdout"));
        Self {
            _child: child,
            stdin,
            stdout,
        }
    }

    fn ask(&mut self, request: &Value) -> Value {
        writeln!(self.stdin, "{request}").expect("write to chdb");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from chdb");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("chdb answers JSON ({e}): {line}"))
    }

    fn answer(answer: &Value) -> Result<String, String> {
        match (answer["ok"].as_str(), answer["error"].as_str()) {
            (Some(ok), _) => Ok(ok.to_owned()),
            (_, Some(e)) => Err(e.to_owned()),
            _ => Err(format!("unexpected answer from chdb: {answer}")),
        }
    }

    /// `Ok(canonical text)`, or `Err(the parser's message)`.
    pub fn format(&mut self, sql: &str) -> Result<String, String> {
        Self::answer(&self.ask(&Value::String(sql.to_owned())))
    }

    /// The statement's canonical text and parse tree, or `Err(the parser's message)`.
    pub fn parse(&mut self, sql: &str) -> Result<Parsed, String> {
        let answer = self.ask(&json!({ "sql": sql, "ast": true }));
        let formatted = Self::answer(&answer)?;
        let tree = match (answer["ast"].as_str(), answer["ast_error"].as_str()) {
            (Some(tree), _) => Ok(tree.to_owned()),
            (_, error) => Err(error.unwrap_or("no parse tree").to_owned()),
        };
        Ok(Parsed { formatted, tree })
    }

    /// The TSV rows of a query that reads no table, as ClickHouse computes them.
    pub fn evaluate(&mut self, sql: &str) -> Result<String, String> {
        Self::answer(&self.ask(&json!({ "sql": sql, "evaluate": true })))
    }
}
