//! The provisioner against a live ClickHouse with SQL users (≥ 20.4), when
//! `SENTRY_TENANTS_E2E_CLICKHOUSE_URL` names one (admin user and password in
//! `SENTRY_TENANTS_E2E_CLICKHOUSE_USER` / `_PASSWORD`; the admin needs access_management). None can be
//! installed on the machines this project is built on, so there the test is reported as ignored.
//!
//! Provision → the tenant user logs in with the Secret's password and sees its database; Suspend → its
//! logins fail; Resume → they work again; a re-run keeps the password. Cleans up its user and database.

use sentry_tenants::crd::RunAction;
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::{
    Auth, ClickHouse, HttpClickHouse, PASSWORD_KEY, Provisioner, TenantSync,
};
use sentry_tenants_tests::{Cluster, NS};

#[tokio::test]
#[cfg_attr(
    not(e2e_clickhouse),
    ignore = "skipped: set SENTRY_TENANTS_E2E_CLICKHOUSE_URL (ClickHouse >= 20.4) to run"
)]
async fn provision_suspend_resume_against_live_clickhouse() {
    let url = std::env::var("SENTRY_TENANTS_E2E_CLICKHOUSE_URL")
        .expect("SENTRY_TENANTS_E2E_CLICKHOUSE_URL");
    let user =
        std::env::var("SENTRY_TENANTS_E2E_CLICKHOUSE_USER").unwrap_or_else(|_| "default".into());
    let password = std::env::var("SENTRY_TENANTS_E2E_CLICKHOUSE_PASSWORD").unwrap_or_default();
    let tenant = format!("e2e-{}", std::process::id());
    let name = TenantName::parse(&tenant).unwrap();
    let c = Cluster::new().await;
    c.create_tenant(&tenant).await;
    let p = Provisioner {
        clickhouse: HttpClickHouse::new(&url, &user, &password, Auth::Headers).unwrap(),
        clickhouse_url: url.clone(),
        sync: TenantSync::new(c.client.clone(), NS, "/tmp/tantivy"),
        rotate: false,
        cluster: None,
        prefix: sentry_tenants_tests::legacy_prefix(),
        clock: sentry_tenants::clock::Clock::System,
    };
    p.run(&name, RunAction::Provision).await.unwrap();
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(c.admin.clone(), NS);
    let secret = secrets.get(&name.credentials_secret()).await.unwrap();
    let tenant_pw = String::from_utf8(secret.data.unwrap()[PASSWORD_KEY].0.clone()).unwrap();
    let database = p.prefix.database(&name);
    let tenant_user = sentry_tenants::names::clickhouse_user(&database);
    let login = |sql: &'static str| p.clickhouse.query_as(&tenant_user, &tenant_pw, sql);
    assert_eq!(
        login("SELECT currentDatabase()").await.unwrap().trim(),
        database
    );
    login("CREATE TABLE t (x UInt8) ENGINE = Memory")
        .await
        .unwrap();

    c.set_suspended(&tenant, true).await;
    p.run(&name, RunAction::Suspend).await.unwrap();
    assert!(
        login("SELECT 1").await.is_err(),
        "suspended user must not log in"
    );
    c.set_suspended(&tenant, false).await;
    p.run(&name, RunAction::Resume).await.unwrap();
    login("SELECT 1").await.unwrap();
    let patch = serde_json::json!({"status": null});
    c.tenants()
        .patch_status(
            &tenant,
            &Default::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    p.run(&name, RunAction::Provision).await.unwrap();
    login("SELECT 1").await.expect("re-run kept the password");

    p.clickhouse
        .query(&format!("DROP USER IF EXISTS `{tenant_user}`"))
        .await
        .unwrap();
    p.clickhouse
        .query(&format!("DROP DATABASE IF EXISTS `{database}`"))
        .await
        .unwrap();
}
