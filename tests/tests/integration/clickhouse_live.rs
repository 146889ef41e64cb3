//! The provisioner's ClickHouse transport against a real server: Debian's `clickhouse-server` 18.16,
//! started by the test. It predates SQL users, so user/grant DDL cannot run on it — which makes it
//! exactly the server the "too old" refusal must catch.

use sentry_tenants::crd::RunAction;
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::sql::provision;
use sentry_tenants::provision::{
    Auth, ChError, ClickHouse, HttpClickHouse, ProvisionError, Provisioner, TenantSync,
};
use sentry_tenants_tests::clickhouse_server::{ADMIN, ADMIN_PASSWORD, ClickHouseServer};
use sentry_tenants_tests::{Cluster, NS};

const ALL_AUTH: [Auth; 3] = [Auth::Headers, Auth::Basic, Auth::Query];

#[tokio::test]
async fn every_auth_method_reaches_the_server_over_http() {
    let server = ClickHouseServer::start();
    for auth in ALL_AUTH {
        let ch = HttpClickHouse::new(&server.url(), ADMIN, ADMIN_PASSWORD, auth).unwrap();
        assert_eq!(
            ch.query("SELECT version()").await.unwrap().trim(),
            "18.16.1",
            "{auth:?}"
        );
        assert_eq!(
            ch.query_as(ADMIN, ADMIN_PASSWORD, "SELECT 1")
                .await
                .unwrap()
                .trim(),
            "1"
        );
    }
}

#[tokio::test]
async fn a_wrong_password_is_an_authentication_failure_for_every_method() {
    let server = ClickHouseServer::start();
    for auth in ALL_AUTH {
        let ch = HttpClickHouse::new(&server.url(), ADMIN, "wrong", auth).unwrap();
        let err = ch.query("SELECT 1").await.unwrap_err();
        assert!(
            matches!(
                err,
                ChError::Server {
                    code: Some(193),
                    ..
                }
            ),
            "{auth:?}: {err:?}"
        );
        let classified = ProvisionError::from_clickhouse(&server.url(), err);
        assert!(
            matches!(classified, ProvisionError::AuthFailed { .. }),
            "{classified}"
        );
        assert!(
            classified
                .to_string()
                .contains("Wrong password for user admin"),
            "{classified}"
        );
    }
}

#[tokio::test]
async fn server_errors_carry_their_code_and_a_one_line_message() {
    let server = ClickHouseServer::start();
    let ch = HttpClickHouse::new(&server.url(), ADMIN, ADMIN_PASSWORD, Auth::Headers).unwrap();
    let err = ch.query("SELEC 1").await.unwrap_err();
    let ChError::Server {
        status,
        code,
        message,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((*status, *code), (400, Some(62)));
    assert!(
        message.starts_with("Code: 62, DB::Exception: Syntax error") && !message.contains('\n'),
        "{message}"
    );
    let err = ch.query("SELECT * FROM no_such_db.t").await.unwrap_err();
    assert!(
        matches!(err, ChError::Server { code: Some(81), .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn create_database_if_not_exists_is_idempotent() {
    let server = ClickHouseServer::start();
    let ch = HttpClickHouse::new(&server.url(), ADMIN, ADMIN_PASSWORD, Auth::Basic).unwrap();
    let ids = sentry_tenants_tests::tenant_idents("acme-corp");
    let statements = provision(&ids, "00", false);
    let create_db = &statements
        .iter()
        .find(|s| s.sql.starts_with("CREATE DATABASE"))
        .expect("Provision creates the database")
        .sql;
    for _ in 0..3 {
        ch.query(create_db).await.unwrap();
    }
    let count = ch
        .query("SELECT count() FROM system.databases WHERE name = 'tenant_acme_corp'")
        .await
        .unwrap();
    assert_eq!(count.trim(), "1");
}

#[tokio::test]
async fn the_provisioner_refuses_a_server_without_sql_users_before_writing_anything() {
    let server = ClickHouseServer::start();
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let p = Provisioner {
        clickhouse: HttpClickHouse::new(&server.url(), ADMIN, ADMIN_PASSWORD, Auth::Headers)
            .unwrap(),
        clickhouse_url: server.url(),
        sync: TenantSync::new(c.client.clone(), NS, "/var/lib/sentry/tantivy"),
        rotate: false,
        cluster: None,
        prefix: sentry_tenants_tests::legacy_prefix(),
        clock: sentry_tenants::clock::Clock::System,
    };
    let err = p
        .run(&TenantName::parse("acme").unwrap(), RunAction::Provision)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ClickHouse 18.16.1 is too old: it has no SQL access control (CREATE USER, GRANT); sentry-tenants needs ClickHouse 20.4 or newer"
    );
    assert!(
        c.log.writes().is_empty(),
        "nothing written to Kubernetes: {:?}",
        c.log.writes()
    );
    // And it is right: this server cannot parse the user DDL at all.
    let ids = sentry_tenants_tests::tenant_idents("acme");
    let create_user = provision(&ids, "00", false)
        .into_iter()
        .find(|s| s.sql.starts_with("CREATE USER"))
        .expect("Provision creates the user");
    let err = p.clickhouse.query(&create_user.sql).await.unwrap_err();
    assert!(
        matches!(err, ChError::Server { code: Some(62), .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_classified() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let ch = HttpClickHouse::new(&url, ADMIN, ADMIN_PASSWORD, Auth::Headers).unwrap();
    let err = ProvisionError::from_clickhouse(&url, ch.query("SELECT 1").await.unwrap_err());
    assert!(matches!(err, ProvisionError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("Connection refused"), "{err}");
}
