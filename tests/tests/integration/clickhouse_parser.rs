//! Every statement the provisioner can generate, checked by a current ClickHouse SQL parser: chdb-core
//! (PyPI), through `SELECT formatQuery(…)`. `scripts/setup.sh` installs it into `target/chdb-venv`.
//! Syntax only: what the statements *do* on a server with SQL users is not verified live here.

use std::io::Write;
use std::process::{Command, Stdio};

use sentry_tenants::crd::{ReclaimPolicy, RunAction, TenantLimits};
use sentry_tenants::limits::{MAX_CONCURRENT_QUERIES, MAX_EXECUTION_SECONDS, MAX_QUERIES_PER_HOUR};
use sentry_tenants::names::MAX_TENANT_NAME;
use sentry_tenants::provision::rotation::Retiring;
use sentry_tenants::provision::sha256_hex;
use sentry_tenants::provision::sql::{
    Desired, Ident, TENANT_PRIVILEGES, plan, quote_ident, quote_str, rotate, rotate_keeping,
};
use sentry_tenants_tests::doc_block;
use serde_json::Value;

fn python() -> String {
    std::env::var("SENTRY_TENANTS_CHDB_PYTHON").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/chdb-venv/bin/python"
        )
        .to_owned()
    })
}

/// Parses each statement; returns the parser's verdict for each, in order.
fn parse_all(statements: &[String]) -> Vec<Result<String, String>> {
    let py = python();
    assert!(
        std::path::Path::new(&py).exists(),
        "{py} is missing: run `bash scripts/setup.sh` (it installs chdb-core)"
    );
    let mut child = sentry_tenants_tests::processes::Owned::spawn(
        Command::new(&py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/chdb_parse.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    )
    .unwrap();
    child
        .child_mut()
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(statements).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "parser script failed");
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    results
        .into_iter()
        .map(|r| match r.get("ok") {
            Some(ok) => Ok(ok.as_str().unwrap().to_owned()),
            None => Err(r["error"].as_str().unwrap_or_default().to_owned()),
        })
        .collect()
}

/// Ordinary names, the shortest and longest allowed, and names that are SQL keywords once derived.
fn tenant_names() -> Vec<String> {
    let mut names: Vec<String> = [
        "acme",
        "a",
        "acme-corp-eu-1",
        "select",
        "from-where",
        "default",
        "system",
        "x-0",
    ]
    .map(String::from)
    .to_vec();
    names.push("z".repeat(MAX_TENANT_NAME));
    names.push(format!("a{}", "-9".repeat((MAX_TENANT_NAME - 1) / 2)));
    names
}

/// None, each one alone at its bounds, and all together.
fn every_kind_of_limits() -> Vec<TenantLimits> {
    let none = TenantLimits::default();
    let mut out = vec![none.clone()];
    for memory in ["1Mi", "9999Gi"] {
        out.push(TenantLimits {
            max_memory_per_query: Some(memory.into()),
            ..none.clone()
        });
    }
    for n in [1, MAX_EXECUTION_SECONDS] {
        out.push(TenantLimits {
            max_execution_seconds: Some(n),
            ..none.clone()
        });
    }
    for n in [1, MAX_CONCURRENT_QUERIES] {
        out.push(TenantLimits {
            max_concurrent_queries: Some(n),
            ..none.clone()
        });
    }
    for n in [1, MAX_QUERIES_PER_HOUR] {
        out.push(TenantLimits {
            queries_per_hour: Some(n),
            ..none.clone()
        });
    }
    out.push(TenantLimits {
        max_memory_per_query: Some("4Gi".into()),
        max_execution_seconds: Some(60),
        max_concurrent_queries: Some(5),
        queries_per_hour: Some(1000),
    });
    out
}

fn every_generated_statement() -> Vec<String> {
    let hash = sha256_hex("correct horse battery staple");
    let mut out = Vec::new();
    for name in tenant_names() {
        let ids = sentry_tenants_tests::tenant_idents(&name);
        let clusters = [None, Some(Ident::cluster("prod-eu.1").unwrap())];
        for (ids, action) in clusters
            .into_iter()
            .map(|c| ids.clone().on_cluster(c))
            .flat_map(|ids| RunAction::ALL.map(|a| (ids.clone(), a)))
        {
            for locked in [false, true] {
                for reclaim in ReclaimPolicy::ALL {
                    for limits in every_kind_of_limits() {
                        let desired = Desired {
                            locked,
                            reclaim,
                            limits,
                        };
                        let statements = plan(action, &ids, &hash, &desired);
                        out.extend(statements.into_iter().map(|s| s.sql));
                    }
                }
            }
        }
        out.push(rotate(&ids, &hash).sql);
        // A rotation within the grace of two earlier ones lists three passwords.
        let kept: Vec<Retiring> = ["2026-12-03T11:00:00Z", "2026-12-03T11:30:00Z"]
            .iter()
            .map(|until| Retiring {
                sha256: hash.clone(),
                valid_until: until.parse().unwrap(),
            })
            .collect();
        out.push(rotate_keeping(&ids, &kept, &hash).sql);
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_statement_the_provisioner_can_generate_parses() {
    let statements = every_generated_statement();
    assert!(statements.len() > 50, "{}", statements.len());
    let rejected: Vec<String> = statements
        .iter()
        .zip(parse_all(&statements))
        .filter_map(|(s, r)| r.err().map(|e| format!("{s}\n    -> {e}")))
        .collect();
    assert!(
        rejected.is_empty(),
        "rejected by the ClickHouse parser:\n{}",
        rejected.join("\n")
    );
}

#[test]
fn quoting_survives_hostile_identifiers_and_literals() {
    // Our identifiers never contain these, but the quoting functions must hold for any input.
    let hostile = [
        "we`ird",
        "back\\slash",
        "semi;colon DROP DATABASE x",
        "quote'in",
        "uni—côde",
        "`",
    ];
    let statements: Vec<String> = hostile
        .iter()
        .map(|h| {
            format!(
                "SELECT {} AS {} FROM {}.{}",
                quote_str(h),
                quote_ident(h),
                quote_ident(h),
                quote_ident(h)
            )
        })
        .collect();
    for (statement, verdict) in statements.iter().zip(parse_all(&statements)) {
        let formatted = verdict.unwrap_or_else(|e| panic!("{statement}: {e}"));
        // One SELECT with one alias and one table: the hostile text stayed inside its quotes.
        assert!(
            !formatted.contains("DROP DATABASE x\n") && formatted.starts_with("SELECT "),
            "{formatted}"
        );
    }
}

#[test]
fn the_parser_rejects_what_it_should() {
    // Proves this test can fail: a misspelt auth method and an unquoted hostile name are refused.
    let bad = [
        "CREATE USER u IDENTIFIED WITH sha256_hashh BY 'x'".to_owned(),
        "CREATE DATABASE IF NOT EXISTS tenant-acme".to_owned(),
    ];
    for (s, verdict) in bad.iter().zip(parse_all(&bad)) {
        assert!(verdict.is_err(), "accepted: {s}");
    }
}

/// The admin account's setup in the install guide's quick start parses, and grants with GRANT OPTION
/// exactly the privileges the provisioner hands a tenant (ClickHouse lets it grant only those).
#[test]
fn the_quick_start_admin_account_statements_parse_and_cover_the_tenant_grant() {
    let statements: Vec<String> = doc_block("docs/install.md", "Quick start", "sql")
        .split(';')
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(statements.len(), 3, "{statements:#?}");
    for (statement, verdict) in statements.iter().zip(parse_all(&statements)) {
        assert!(verdict.is_ok(), "{statement}: {verdict:?}");
    }
    assert_eq!(
        statements[2],
        format!("GRANT {TENANT_PRIVILEGES} ON *.* TO sentry_admin WITH GRANT OPTION")
    );
    for needed in [
        "CREATE DATABASE",
        "CREATE USER",
        "ALTER USER",
        "SHOW USERS",
        "DROP USER",
        "DROP DATABASE",
    ] {
        assert!(
            statements[1].contains(needed),
            "{needed}: {}",
            statements[1]
        );
    }
}
