//! `install --clickhouse-ca-configmap` on the real control plane: the provisioning Job mounts the CA
//! ConfigMap and verifies the `https://` ClickHouse URL against it. The ClickHouse HTTP stand-in serves
//! TLS with a certificate from a private CA (made by openssl); while the ConfigMap holds another CA's
//! certificate the Provision run fails naming the certificate, and once it holds the right one the
//! next automatic attempt provisions the tenant.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use sentry_tenants::crd::{RunPhase, TenantPhase};
use sentry_tenants::install::check::ca_configmap_line;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::tls::{make_ca, make_server_cert, server_config};

use crate::provision::{finished, password, tenant_in_phase};
use crate::setup;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

fn config_map(name: &str, pem: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"ca.crt": pem},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_jobs_verify_https_clickhouse_against_the_installed_ca_bundle() {
    let s = setup("tls").await;
    let gateway = s.plane.host_address();
    let dir = std::env::temp_dir().join(format!("sentry-tenants-tls-{}", s.ns));
    std::fs::create_dir_all(&dir).unwrap();
    make_ca(&dir, "corp-ca");
    make_server_cert(&dir, "corp-ca", "clickhouse", &gateway);
    make_ca(&dir, "other-ca");
    let pem = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let ch = ClickHouseStandIn::start_tls(
        &gateway,
        ADMIN.0,
        ADMIN.1,
        server_config(&dir, "clickhouse"),
    )
    .await;
    assert!(ch.url.starts_with("https://"), "{}", ch.url);

    // What `install` checks before it applies anything.
    let maps: Api<ConfigMap> = Api::namespaced(s.admin.clone(), &s.ns);
    let missing = ca_configmap_line(&s.admin, &s.ns, "corp-ca").await;
    assert!(
        !missing.ok && missing.what.ends_with("does not exist"),
        "{missing:?}"
    );
    maps.create(
        &PostParams::default(),
        &config_map("corp-ca", "not a certificate"),
    )
    .await
    .unwrap();
    let unusable = ca_configmap_line(&s.admin, &s.ns, "corp-ca").await;
    assert!(
        !unusable.ok && unusable.what.contains("unusable"),
        "{unusable:?}"
    );

    // The wrong CA first: the run fails, saying why.
    let wrong = serde_json::json!({"data": {"ca.crt": pem("other-ca.crt")}});
    maps.patch("corp-ca", &PatchParams::default(), &Patch::Merge(&wrong))
        .await
        .unwrap();
    assert!(ca_configmap_line(&s.admin, &s.ns, "corp-ca").await.ok);
    let values = sentry_tenants::install::Values {
        clickhouse_url: ch.url.clone(),
        clickhouse_ca_configmap: Some("corp-ca".into()),
        ..s.values()
    };
    s.install_with(ADMIN, values).await;
    s.apply("apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\n");
    let first = finished(&s, "acme-provision-10").await;
    let status = first.status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Failed));
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("unreachable") && message.to_lowercase().contains("certificate"),
        "{message}"
    );
    assert!(!ch.has_user(&s.ch_user("acme")), "nothing was sent");

    // The right CA: the next automatic attempt's pod mounts it and provisions the tenant.
    let right = serde_json::json!({"data": {"ca.crt": pem("corp-ca.crt")}});
    maps.patch("corp-ca", &PatchParams::default(), &Patch::Merge(&right))
        .await
        .unwrap();
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    assert!(ch.may_log_in(&s.ch_user("acme"), &password(&s, "acme").await));
    let secret_url = {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(s.admin.clone(), &s.ns);
        let secret = secrets.get("acme-clickhouse").await.unwrap();
        String::from_utf8(secret.data.unwrap()["url"].0.clone()).unwrap()
    };
    assert_eq!(
        secret_url, ch.url,
        "the tenant's Secret names the https URL"
    );
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
    let _ = std::fs::remove_dir_all(&dir);
}
