//! Each rule of the ClickHouse **stand-in** (`tests/src/clickhouse_model`), tested against the stand-in
//! itself: what it refuses, with ClickHouse's code, and what it lets through. The statements are written
//! out here as an admin and a tenant would send them; the expected hashes are pinned known answers
//! (`printf … | sha256sum`, MySQL's documented `PASSWORD('password')`), never the product's helpers.
//! The table of these rules and the ClickHouse pages they follow is in docs/testing.md.

use jiff::{SignedDuration, Timestamp};
use sentry_tenants::clock::Clock;
use sentry_tenants_tests::clickhouse_model::{Login, Model, codes};

const VERSION: &str = "26.9.1.1";
/// `printf password | sha256sum`
const SHA256_OF_PASSWORD: &str = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8";
/// `printf passwordsalt | sha256sum`
const SHA256_OF_PASSWORD_SALT: &str =
    "7a37b85c8918eac19a9089c0fa5a2ab4dce3f90528dcdeec108b23ddf3607b99";
/// MySQL's `PASSWORD('password')`: SHA-1 of the SHA-1 of `password`.
const DOUBLE_SHA1_OF_PASSWORD: &str = "2470c0c06dee42fd1618bb99005adca2ec9d1e19";

fn admin(model: &mut Model, sql: &str) -> Result<String, u32> {
    model
        .serve(VERSION, Login::Admin, sql)
        .map_err(|refused| refused.code)
}

fn ok(model: &mut Model, sql: &str) -> String {
    model
        .serve(VERSION, Login::Admin, sql)
        .unwrap_or_else(|r| panic!("{sql}: refused with {} {}", r.code, r.message))
}

fn as_user(model: &mut Model, user: &str, password: &str, sql: &str) -> Result<String, u32> {
    model
        .serve(VERSION, Login::User { user, password }, sql)
        .map_err(|refused| refused.code)
}

fn refusal(model: &mut Model, user: &str, password: &str, sql: &str) -> (u32, String) {
    let refused = model
        .serve(VERSION, Login::User { user, password }, sql)
        .expect_err(sql);
    (refused.code, refused.message)
}

/// Two tenants as the provisioner leaves them: a database, a user whose default database it is, and
/// the tenant's privileges on it.
fn two_tenants() -> Model {
    let mut m = Model::default();
    for (tenant, password) in [("acme", "acme-pw"), ("beta", "beta-pw")] {
        let hash = sentry_tenants_tests::clickhouse_model::sha256_hex(password);
        ok(
            &mut m,
            &format!("CREATE DATABASE IF NOT EXISTS `tenant_{tenant}`"),
        );
        ok(
            &mut m,
            &format!(
                "CREATE USER IF NOT EXISTS `tenant_{tenant}_user` IDENTIFIED WITH sha256_hash BY '{hash}' HOST ANY DEFAULT DATABASE `tenant_{tenant}`"
            ),
        );
        ok(
            &mut m,
            &format!(
                "GRANT SELECT, INSERT, ALTER, CREATE TABLE, CREATE VIEW, DROP TABLE, DROP VIEW, TRUNCATE, OPTIMIZE, SHOW TABLES ON `tenant_{tenant}`.* TO `tenant_{tenant}_user`"
            ),
        );
    }
    m
}

const ACME: (&str, &str) = ("tenant_acme_user", "acme-pw");
const BETA: (&str, &str) = ("tenant_beta_user", "beta-pw");

#[test]
fn only_the_methods_clickhouse_accepts_with_hashes_of_their_length() {
    let mut m = Model::default();
    let sha = |hash: &str| format!("CREATE USER `u` IDENTIFIED WITH sha256_hash BY '{hash}'");
    assert_eq!(
        admin(&mut m, &sha(&SHA256_OF_PASSWORD[1..])),
        Err(codes::BAD_ARGUMENTS)
    );
    assert_eq!(
        admin(&mut m, &sha(&"zz".repeat(32))),
        Err(codes::BAD_ARGUMENTS)
    );
    assert_eq!(
        admin(
            &mut m,
            &format!("CREATE USER `u` IDENTIFIED WITH double_sha1_hash BY '{SHA256_OF_PASSWORD}'")
        ),
        Err(codes::BAD_ARGUMENTS),
        "a double SHA-1 hash is 20 bytes"
    );
    assert_eq!(
        admin(
            &mut m,
            &format!(
                "CREATE USER `u` IDENTIFIED WITH bcrypt_hash BY '{}'",
                "$".repeat(58)
            )
        ),
        Err(codes::BAD_ARGUMENTS),
        "a bcrypt hash is 59 or 60 bytes"
    );
    assert_eq!(
        admin(
            &mut m,
            "CREATE USER `u` IDENTIFIED WITH no_password, plaintext_password BY 'x'"
        ),
        Err(codes::BAD_ARGUMENTS)
    );
    assert_eq!(
        admin(&mut m, "CREATE USER `u` IDENTIFIED WITH magic BY 'x'"),
        Err(codes::SYNTAX_ERROR),
        "chdb's parser knows ClickHouse's methods"
    );
    assert_eq!(
        admin(&mut m, "CREATE USER `u` IDENTIFIED WITH ldap SERVER 'corp'"),
        Err(codes::NOT_IMPLEMENTED),
        "a method the stand-in does not model is refused, not accepted"
    );
    assert!(m.users.is_empty(), "no refused statement made a user");

    for (user, clause) in [
        ("by_sha", format!("sha256_hash BY '{SHA256_OF_PASSWORD}'")),
        (
            "by_salt",
            format!("sha256_hash BY '{SHA256_OF_PASSWORD_SALT}' SALT 'salt'"),
        ),
        (
            "by_double",
            format!("double_sha1_hash BY '{DOUBLE_SHA1_OF_PASSWORD}'"),
        ),
        ("by_plain", "plaintext_password BY 'password'".to_owned()),
        (
            "by_sha_password",
            "sha256_password BY 'password'".to_owned(),
        ),
        ("by_bcrypt", "bcrypt_password BY 'password'".to_owned()),
    ] {
        ok(
            &mut m,
            &format!("CREATE USER `{user}` IDENTIFIED WITH {clause}"),
        );
        assert_eq!(
            as_user(&mut m, user, "password", "SELECT 1"),
            Ok("1\n".to_owned()),
            "{user}"
        );
        assert_eq!(
            as_user(&mut m, user, "Password", "SELECT 1"),
            Err(codes::AUTHENTICATION_FAILED),
            "{user}"
        );
    }
}

#[test]
fn unknown_users_roles_and_databases_are_refused_with_clickhouses_codes() {
    let mut m = two_tenants();
    assert_eq!(
        admin(&mut m, "ALTER USER `ghost` HOST NONE"),
        Err(codes::UNKNOWN_USER)
    );
    assert_eq!(
        admin(
            &mut m,
            &format!("ALTER USER `ghost` IDENTIFIED WITH sha256_hash BY '{SHA256_OF_PASSWORD}'")
        ),
        Err(codes::UNKNOWN_USER),
        "ALTER USER never makes a user"
    );
    assert!(!m.users.contains_key("ghost"));
    assert_eq!(admin(&mut m, "DROP USER `ghost`"), Err(codes::UNKNOWN_USER));
    assert_eq!(
        admin(&mut m, "DROP USER IF EXISTS `ghost`"),
        Ok(String::new())
    );
    assert_eq!(
        admin(&mut m, "CREATE ROLE IF NOT EXISTS `r`"),
        Ok(String::new())
    );
    assert_eq!(
        admin(&mut m, "GRANT `r` TO `ghost`"),
        Err(codes::UNKNOWN_USER)
    );
    assert_eq!(
        admin(&mut m, "GRANT `nobody` TO `tenant_acme_user`"),
        Err(codes::UNKNOWN_ROLE)
    );
    assert_eq!(
        admin(&mut m, "DROP DATABASE `nowhere`"),
        Err(codes::UNKNOWN_DATABASE)
    );
    assert_eq!(
        admin(&mut m, "CREATE DATABASE `tenant_acme`"),
        Err(codes::DATABASE_ALREADY_EXISTS)
    );
    assert_eq!(
        admin(
            &mut m,
            &format!(
                "CREATE USER `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '{SHA256_OF_PASSWORD}'"
            )
        ),
        Err(codes::ACCESS_ENTITY_ALREADY_EXISTS)
    );
    ok(
        &mut m,
        &format!(
            "CREATE USER IF NOT EXISTS `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '{SHA256_OF_PASSWORD}'"
        ),
    );
    assert_eq!(
        as_user(&mut m, ACME.0, ACME.1, "SELECT 1"),
        Ok("1\n".to_owned()),
        "IF NOT EXISTS left the user's password as it was"
    );

    // A tenant's query of its own database once that database is gone.
    ok(&mut m, "DROP DATABASE IF EXISTS `tenant_acme`");
    let (code, message) = refusal(&mut m, ACME.0, ACME.1, "SELECT * FROM events");
    assert_eq!(
        (code, message.as_str()),
        (
            codes::UNKNOWN_DATABASE,
            "Database tenant_acme does not exist"
        )
    );
}

#[test]
fn a_tenant_login_reaches_only_what_its_grants_cover() {
    let mut m = two_tenants();
    let (user, pw) = ACME;
    let mut acme = |sql: &str| as_user(&mut m, user, pw, sql);
    assert_eq!(
        acme("CREATE TABLE events (at DateTime, what String) ENGINE = MergeTree ORDER BY at"),
        Ok(String::new())
    );
    assert_eq!(
        acme("INSERT INTO events VALUES (now(), 'signup')"),
        Ok(String::new())
    );
    assert_eq!(
        acme("SELECT what, count() FROM tenant_acme.events GROUP BY what"),
        Ok(String::new())
    );
    assert_eq!(
        acme("ALTER TABLE events ADD COLUMN n UInt8"),
        Ok(String::new())
    );
    assert_eq!(acme("SHOW TABLES"), Ok(String::new()));
    assert_eq!(acme("SELECT * FROM system.one"), Ok(String::new()));
    assert_eq!(acme("SELECT * FROM missing"), Err(codes::UNKNOWN_TABLE));
    assert_eq!(
        acme("CREATE TABLE events (x UInt8) ENGINE = Memory"),
        Err(codes::TABLE_ALREADY_EXISTS)
    );

    // beta, on acme's database: every kind of statement, however the table is reached.
    let (user, pw) = BETA;
    for (sql, needed) in [
        (
            "SELECT * FROM tenant_acme.events",
            "SELECT ON tenant_acme.events",
        ),
        (
            "SELECT count() FROM events AS e JOIN tenant_acme.events AS a ON 1",
            "SELECT ON tenant_acme.events",
        ),
        (
            "SELECT 1 WHERE 1 IN (SELECT 1 FROM tenant_acme.events)",
            "SELECT ON tenant_acme.events",
        ),
        (
            "SELECT 1 IN tenant_acme.events",
            "SELECT ON tenant_acme.events",
        ),
        (
            "INSERT INTO tenant_acme.events VALUES (now(), 'x')",
            "INSERT ON tenant_acme.events",
        ),
        (
            "CREATE TABLE tenant_acme.spy (x UInt8) ENGINE = Memory",
            "CREATE TABLE ON tenant_acme.spy",
        ),
        (
            "ALTER TABLE tenant_acme.events DELETE WHERE 1",
            "ALTER ON tenant_acme.events",
        ),
        (
            "TRUNCATE TABLE tenant_acme.events",
            "TRUNCATE ON tenant_acme.events",
        ),
        (
            "DROP TABLE tenant_acme.events",
            "DROP TABLE ON tenant_acme.events",
        ),
        (
            "DROP DATABASE tenant_acme",
            "DROP DATABASE ON tenant_acme.*",
        ),
        (
            "SHOW TABLES FROM tenant_acme",
            "SHOW TABLES ON tenant_acme.*",
        ),
        (
            "SELECT * FROM remote('127.0.0.1', tenant_acme.events)",
            "CREATE TEMPORARY TABLE ON *.*",
        ),
        (
            "SELECT * FROM file('/etc/passwd')",
            "CREATE TEMPORARY TABLE ON *.*",
        ),
        ("SELECT name FROM system.users", "SELECT ON system.users"),
        (
            "SELECT * FROM system.query_log",
            "SELECT ON system.query_log",
        ),
        (
            "CREATE USER spy IDENTIFIED WITH plaintext_password BY 'x'",
            "CREATE USER ON *.*",
        ),
        (
            "GRANT SELECT ON tenant_acme.* TO tenant_beta_user",
            "GRANT OPTION ON *.*",
        ),
        (
            "DROP DATABASE tenant_beta",
            "DROP DATABASE ON tenant_beta.*",
        ),
    ] {
        let (code, message) = refusal(&mut m, user, pw, sql);
        assert_eq!(code, codes::ACCESS_DENIED, "{sql}: {message}");
        assert!(
            message.ends_with(&format!("necessary to have the grant {needed}")),
            "{sql}: {message}"
        );
    }
    assert_eq!(
        refusal(
            &mut m,
            user,
            pw,
            "RENAME TABLE tenant_acme.events TO tenant_beta.events"
        )
        .0,
        codes::NOT_IMPLEMENTED,
        "what the stand-in does not model is refused"
    );
    assert_eq!(
        refusal(&mut m, user, pw, "TRUNCATE DATABASE tenant_acme").0,
        codes::NOT_IMPLEMENTED,
        "a database's truncation is not read as a table's"
    );
    assert_eq!(
        refusal(
            &mut m,
            user,
            pw,
            "CREATE TABLE m ENGINE = Merge('tenant_acme', '.*')"
        )
        .0,
        codes::NOT_IMPLEMENTED,
        "an engine that reads other tables is not modelled"
    );
    assert!(
        m.databases["tenant_acme"].contains("events"),
        "acme's table outlived every attempt"
    );
    let beta_ran: Vec<_> = m
        .tenant_statements
        .iter()
        .filter(|(u, _)| u == BETA.0)
        .collect();
    assert!(
        beta_ran.is_empty(),
        "no refused statement ran: {beta_ran:?}"
    );
}

#[test]
fn privileges_come_from_roles_granted_to_the_user_too() {
    let mut m = two_tenants();
    ok(&mut m, "CREATE DATABASE IF NOT EXISTS `shared`");
    let acme = |m: &mut Model, sql: &str| as_user(m, ACME.0, ACME.1, sql);
    assert_eq!(
        acme(&mut m, "SHOW TABLES FROM shared"),
        Err(codes::ACCESS_DENIED)
    );
    ok(&mut m, "CREATE ROLE IF NOT EXISTS `readers`");
    ok(&mut m, "GRANT SHOW TABLES ON `shared`.* TO `readers`");
    ok(&mut m, "GRANT `readers` TO `tenant_acme_user`");
    assert_eq!(acme(&mut m, "SHOW TABLES FROM shared"), Ok(String::new()));
    ok(&mut m, "DROP ROLE IF EXISTS `readers`");
    assert_eq!(
        acme(&mut m, "SHOW TABLES FROM shared"),
        Err(codes::ACCESS_DENIED)
    );
}

#[test]
fn a_quota_counts_queries_per_interval_and_refuses_the_one_over() {
    let start: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
    let clock = Clock::manual(start);
    let mut m = two_tenants();
    m.clock = Some(clock.clone());
    ok(
        &mut m,
        "CREATE QUOTA OR REPLACE `tenant_acme_quota` FOR INTERVAL 1 hour MAX queries = 3 TO `tenant_acme_user`",
    );
    let acme = |m: &mut Model, sql: &str| as_user(m, ACME.0, ACME.1, sql);
    assert_eq!(
        acme(&mut m, "SELEC 1"),
        Err(codes::SYNTAX_ERROR),
        "not counted: it never parsed"
    );
    for _ in 0..3 {
        assert_eq!(acme(&mut m, "SELECT 1"), Ok("1\n".to_owned()));
    }
    let (code, message) = refusal(&mut m, ACME.0, ACME.1, "SELECT 1");
    assert_eq!(code, codes::QUOTA_EXCEEDED);
    assert!(
        message.contains("queries = 4/3. Interval will end at 2026-12-04 11:00:00"),
        "{message}"
    );
    assert_eq!(
        as_user(&mut m, BETA.0, BETA.1, "SELECT 1"),
        Ok("1\n".to_owned()),
        "another user's queries are not counted in acme's quota"
    );
    clock.advance(SignedDuration::from_mins(59));
    assert_eq!(acme(&mut m, "SELECT 1"), Err(codes::QUOTA_EXCEEDED));
    clock.advance(SignedDuration::from_mins(1));
    assert_eq!(
        acme(&mut m, "SELECT 1"),
        Ok("1\n".to_owned()),
        "a new interval"
    );
}

#[test]
fn each_authentication_method_logs_in_until_its_own_valid_until() {
    let start: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
    let clock = Clock::manual(start);
    let mut m = two_tenants();
    m.clock = Some(clock.clone());
    let new_hash = sentry_tenants_tests::clickhouse_model::sha256_hex("acme-new");
    let old_hash = sentry_tenants_tests::clickhouse_model::sha256_hex("acme-pw");
    ok(
        &mut m,
        &format!(
            "ALTER USER `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '{old_hash}' VALID UNTIL '2026-12-04T11:00:00Z', sha256_hash BY '{new_hash}'"
        ),
    );
    let logs_in = |m: &mut Model, pw: &str| as_user(m, ACME.0, pw, "SELECT 1").is_ok();
    assert!(logs_in(&mut m, "acme-pw") && logs_in(&mut m, "acme-new"));
    clock.advance(SignedDuration::from_mins(59));
    assert!(logs_in(&mut m, "acme-pw"), "a minute before its end");
    clock.advance(SignedDuration::from_mins(1));
    assert!(
        !logs_in(&mut m, "acme-pw"),
        "at its VALID UNTIL the old password ends"
    );
    assert!(logs_in(&mut m, "acme-new"), "the new one has no end");
}

#[test]
fn a_locked_user_cannot_log_in_and_a_profile_setting_cannot_be_changed() {
    let mut m = two_tenants();
    ok(
        &mut m,
        "CREATE SETTINGS PROFILE OR REPLACE `tenant_acme_profile` SETTINGS max_memory_usage = 1048576 READONLY TO `tenant_acme_user`",
    );
    let (code, message) = refusal(&mut m, ACME.0, ACME.1, "SET max_memory_usage = 0");
    assert_eq!(
        (code, message.as_str()),
        (
            codes::SETTING_CONSTRAINT_VIOLATION,
            "Setting max_memory_usage should not be changed"
        )
    );
    assert_eq!(
        as_user(&mut m, ACME.0, ACME.1, "SET max_threads = 1"),
        Ok(String::new())
    );
    ok(&mut m, "ALTER USER `tenant_acme_user` HOST NONE");
    assert_eq!(
        as_user(&mut m, ACME.0, ACME.1, "SELECT 1"),
        Err(codes::AUTHENTICATION_FAILED)
    );
    ok(&mut m, "ALTER USER `tenant_acme_user` HOST ANY");
    assert_eq!(
        as_user(&mut m, ACME.0, ACME.1, "SELECT 1 + 1"),
        Ok("2\n".to_owned()),
        "chdb computes a query that reads no table"
    );
}
