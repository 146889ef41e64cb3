//! Tenant isolation on the real control plane: two tenants provisioned by real Jobs against the
//! ClickHouse **stand-in** (as strict as ClickHouse on every rule it models: docs/testing.md), then
//! each tenant's login — the credentials its Secret holds, sent over HTTP as an application sends them
//! — tried on the other tenant's database and on the server's own tables, past its quota, and while
//! it is suspended. (After a scheduled rotation both passwords log in until the overlap ends, then
//! only the new one: `rotate.rs`.)

use sentry_tenants::crd::TenantPhase;
use sentry_tenants_tests::clickhouse_model::codes;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

use crate::provision::{password, tenant_in_phase};
use crate::setup;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");
/// More than the login checks and statements before the quota is tried, so those are never refused for it.
const QUERIES_PER_HOUR: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_login_reaches_its_own_database_and_nothing_else() {
    let s = setup("isolation").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    s.apply(&format!(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  limits:\n    queriesPerHour: {QUERIES_PER_HOUR}\n"
    ));
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: beta\nspec: {}\n");
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    tenant_in_phase(&s, "beta", TenantPhase::Active).await;
    let acme = (s.ch_user("acme"), password(&s, "acme").await);
    let beta = (s.ch_user("beta"), password(&s, "beta").await);
    let beta_db = s.ch_database("beta");
    let as_acme = async |sql: &str| ch.query_as(&acme.0, &acme.1, sql).await;
    let as_beta = async |sql: &str| ch.query_as(&beta.0, &beta.1, sql).await;

    // Each works in its own database, named or not.
    let table = "CREATE TABLE events (at DateTime, what String) ENGINE = MergeTree ORDER BY at";
    assert_eq!(as_beta(table).await, Ok(String::new()));
    assert_eq!(
        as_beta("INSERT INTO events VALUES (now(), 'signup')").await,
        Ok(String::new())
    );
    assert_eq!(as_acme(table).await, Ok(String::new()));
    assert_eq!(
        as_acme(&format!(
            "SELECT count() FROM {}.events",
            s.ch_database("acme")
        ))
        .await,
        Ok(String::new())
    );
    assert_eq!(as_acme("SELECT * FROM system.one").await, Ok(String::new()));

    // acme on beta's database and on the server's own tables: read, write, create, drop.
    let denied = [
        (
            format!("SELECT * FROM {beta_db}.events"),
            format!("SELECT ON {beta_db}.events"),
        ),
        (
            format!("SELECT count() FROM events WHERE what IN (SELECT what FROM {beta_db}.events)"),
            format!("SELECT ON {beta_db}.events"),
        ),
        (
            format!("INSERT INTO {beta_db}.events VALUES (now(), 'forged')"),
            format!("INSERT ON {beta_db}.events"),
        ),
        (
            format!("CREATE TABLE {beta_db}.spy (x UInt8) ENGINE = Memory"),
            format!("CREATE TABLE ON {beta_db}.spy"),
        ),
        (
            format!("ALTER TABLE {beta_db}.events DELETE WHERE 1"),
            format!("ALTER ON {beta_db}.events"),
        ),
        (
            format!("TRUNCATE TABLE {beta_db}.events"),
            format!("TRUNCATE ON {beta_db}.events"),
        ),
        (
            format!("DROP TABLE {beta_db}.events"),
            format!("DROP TABLE ON {beta_db}.events"),
        ),
        (
            format!("DROP DATABASE {beta_db}"),
            format!("DROP DATABASE ON {beta_db}.*"),
        ),
        (
            format!("SHOW TABLES FROM {beta_db}"),
            format!("SHOW TABLES ON {beta_db}.*"),
        ),
        (
            format!("SELECT * FROM remote('127.0.0.1', {beta_db}.events)"),
            "CREATE TEMPORARY TABLE ON *.*".to_owned(),
        ),
        (
            "SELECT name FROM system.users".to_owned(),
            "SELECT ON system.users".to_owned(),
        ),
        (
            "SELECT * FROM system.grants".to_owned(),
            "SELECT ON system.grants".to_owned(),
        ),
        (
            "SELECT query FROM system.query_log".to_owned(),
            "SELECT ON system.query_log".to_owned(),
        ),
        (
            format!("GRANT SELECT ON {beta_db}.* TO {}", acme.0),
            "GRANT OPTION ON *.*".to_owned(),
        ),
    ];
    for (sql, grant) in &denied {
        let (code, message) = as_acme(sql).await.expect_err(sql);
        assert_eq!(code, codes::ACCESS_DENIED, "{sql}: {message}");
        assert!(
            message.contains(&format!("necessary to have the grant {grant}")),
            "{sql}: {message}"
        );
    }
    assert!(
        ch.model(|m| m.databases[&beta_db].contains("events")),
        "beta's table is still there"
    );
    let ran = ch.model(|m| m.tenant_statements.clone());
    let leaked: Vec<_> = denied
        .iter()
        .filter(|(sql, _)| ran.iter().any(|(_, r)| r == sql))
        .collect();
    assert!(leaked.is_empty(), "refused statements ran: {leaked:?}");

    // Over its quota, acme is refused; beta is not.
    let mut over = None;
    for _ in 0..=2 * QUERIES_PER_HOUR {
        if let Err((code, message)) = as_acme("SELECT 1").await {
            over = Some((code, message));
            break;
        }
    }
    let (code, message) = over.expect("a query over the quota is refused");
    assert_eq!(code, codes::QUOTA_EXCEEDED, "{message}");
    assert!(
        message.contains(&format!("/{QUERIES_PER_HOUR}.")),
        "{message}"
    );
    assert_eq!(as_beta("SELECT 1").await, Ok("1\n".to_owned()));

    // Suspended, acme cannot log in at all.
    s.set_suspended("acme", true);
    tenant_in_phase(&s, "acme", TenantPhase::Suspended).await;
    wait_until("acme's login to be locked", async || {
        (ch.is_locked(&acme.0) == Some(true)).then_some(())
    })
    .await;
    let (code, message) = as_acme("SELECT 1").await.expect_err("a suspended login");
    assert_eq!(code, codes::AUTHENTICATION_FAILED, "{message}");
    assert_eq!(as_beta("SELECT 1").await, Ok("1\n".to_owned()));
    assert!(ch.refused().is_empty(), "refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}
