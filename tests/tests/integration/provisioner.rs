//! The provisioner's idempotency, never-rotate and status-sync rules, against the in-memory Kubernetes
//! API and the recording ClickHouse seam. Real-server behaviour is in `clickhouse_live.rs`, statement
//! syntax in `clickhouse_parser.rs`.

use std::collections::BTreeSet;

use http::Method;
use jiff::SignedDuration;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use sentry_tenants::crd::{RunAction, TenantPhase};
use sentry_tenants::names::{ClickHousePrefix, TenantName};
use sentry_tenants::provision::{
    ChError, Outcome, PASSWORD_KEY, ProvisionError, Provisioner, TenantSync,
};
use sentry_tenants_tests::clickhouse_model::access::Object;
use sentry_tenants_tests::clickhouse_seam::RecordingClickHouse;
use sentry_tenants_tests::{Cluster, NS};
use serde_json::json;

const MODERN: &str = "24.8.4.13";
const USER: &str = "tenant_acme_user";

fn provisioner(
    c: &Cluster,
    ch: &RecordingClickHouse,
    rotate: bool,
) -> Provisioner<RecordingClickHouse> {
    c.provisioner(ch, rotate)
}

fn acme() -> TenantName {
    TenantName::parse("acme").unwrap()
}

/// A cluster with the tenant `acme` provisioned, and its ClickHouse.
async fn provisioned_acme() -> (Cluster, RecordingClickHouse) {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    (c, ch)
}

async fn password(c: &Cluster) -> Option<String> {
    on_file(c, PASSWORD_KEY).await
}

/// A key of acme's credentials Secret, if the Secret and the key are there.
async fn on_file(c: &Cluster, key: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(c.admin.clone(), NS)
        .get_opt("acme-clickhouse")
        .await
        .unwrap()?;
    let value = secret.data?.remove(key)?;
    Some(String::from_utf8(value.0).unwrap())
}

async fn clear_status(c: &Cluster) {
    let patch = json!({"status": null});
    c.tenants()
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn provision_stores_credentials_before_the_user_exists_and_reports_status() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let outcome = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    assert!(outcome.describe().contains("new credentials"));

    let ddl = ch.ddl();
    let uid = c.tenant("acme").await.metadata.uid.unwrap();
    let role = format!("`sentry-tenants/{NS}/acme/{uid}`");
    assert_eq!(ddl.len(), 6, "{ddl:#?}");
    // The owner mark first, so that whatever exists of the tenant afterwards is known as its own.
    assert_eq!(ddl[0], format!("CREATE ROLE IF NOT EXISTS {role}"));
    assert_eq!(
        ddl[1],
        format!("GRANT SHOW TABLES ON `tenant_acme`.* TO {role}")
    );
    assert!(ddl[2].starts_with("CREATE DATABASE IF NOT EXISTS `tenant_acme`"));
    assert!(ddl[3].starts_with(
        "CREATE USER IF NOT EXISTS `tenant_acme_user` IDENTIFIED WITH sha256_hash BY '"
    ));
    assert_eq!(ddl[4], format!("GRANT {role} TO `tenant_acme_user`"));
    assert!(ddl[5].starts_with("GRANT SELECT"));
    let pw = password(&c).await.expect("Secret written");
    assert!(
        ch.may_log_in("tenant_acme_user", &pw),
        "the user logs in with the Secret's password"
    );
    assert!(
        ch.statements().iter().all(|s| !s.contains(&pw)),
        "the plaintext password never reaches ClickHouse"
    );

    // The Secret was created before the first DDL statement.
    let writes: Vec<_> = c
        .log
        .writes()
        .iter()
        .map(|w| (w.method.clone(), w.resource().to_owned()))
        .collect();
    assert_eq!(writes[0], (Method::POST, "secrets".to_owned()));

    let secret = Api::<Secret>::namespaced(c.admin.clone(), NS)
        .get("acme-clickhouse")
        .await
        .unwrap();
    let data = secret.data.clone().unwrap();
    let text = |k: &str| String::from_utf8(data[k].0.clone()).unwrap();
    assert_eq!(
        (text("url"), text("database"), text("username")),
        (
            "http://clickhouse:8123".into(),
            "tenant_acme".into(),
            "tenant_acme_user".into()
        )
    );
    assert_eq!(
        (text("host"), text("port")),
        ("clickhouse".into(), "8123".into())
    );
    assert_eq!(
        text("uri"),
        format!("http://tenant_acme_user:{pw}@clickhouse:8123/?database=tenant_acme")
    );
    assert_eq!(
        secret.owner_references()[0].kind,
        "Tenant",
        "deleting the tenant deletes its Secret"
    );

    let status = c.tenant("acme").await.status.unwrap();
    assert_eq!(
        status.click_house_database_name.as_deref(),
        Some("tenant_acme")
    );
    assert_eq!(
        status.click_house_secret_ref.unwrap().name,
        "acme-clickhouse"
    );
    assert_eq!(
        status.tantivy_index_path.as_deref(),
        Some("/var/lib/sentry/tantivy/acme")
    );
    assert_eq!(status.access_locked, Some(false));
    c.settle().await;
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
}

#[tokio::test]
async fn a_hundred_reruns_leave_the_password_byte_identical() {
    let (c, ch) = provisioned_acme().await;
    let p = provisioner(&c, &ch, false);
    let first = password(&c).await.unwrap();
    for i in 0..100 {
        // Every other run also loses the status sync, so the full DDL path runs again with the Secret on file.
        if i % 2 == 0 {
            clear_status(&c).await;
        }
        p.run(&acme(), RunAction::Provision).await.unwrap();
        assert_eq!(
            password(&c).await.unwrap(),
            first,
            "re-run {i} changed the password"
        );
    }
    assert!(ch.password_matches("tenant_acme_user", &first));
    // A re-run that finds the user re-asserts its hosts (`ALTER USER … HOST ANY`), never its password.
    assert!(
        ch.ddl()
            .iter()
            .filter(|s| s.starts_with("ALTER USER"))
            .all(|s| s == "ALTER USER `tenant_acme_user` HOST ANY"),
        "no rotation ever happened"
    );
    assert_eq!(ch.password_changes(), 0);
}

/// Provisions acme, then loses what the tenant knew of it: its credentials Secret and its status (the
/// user, marked as the tenant's, stays).
async fn provisioned_then_secret_lost(c: &Cluster, ch: &RecordingClickHouse) -> String {
    provisioner(c, ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    let lost = password(c).await.unwrap();
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .delete("acme-clickhouse", &Default::default())
        .await
        .unwrap();
    clear_status(c).await;
    ch.clear();
    lost
}

#[tokio::test]
async fn the_tenants_own_user_without_its_secret_is_refused_not_rotated() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let lost = provisioned_then_secret_lost(&c, &ch).await;
    let err = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert!(matches!(err, ProvisionError::WouldRotate { .. }), "{err}");
    assert!(
        err.to_string().contains("--rotate"),
        "says how to recover deliberately: {err}"
    );
    assert!(ch.ddl().is_empty());
    assert!(password(&c).await.is_none(), "no Secret written");
    assert!(ch.password_matches("tenant_acme_user", &lost));
}

/// A user of the tenant's name that sentry-tenants did not make for it (made by hand, or by another
/// install before owner marks existed) is refused before any statement, even with `--rotate`: the
/// deliberate rotation is for the tenant's own user only.
#[tokio::test]
async fn a_user_that_is_not_the_tenants_is_refused_even_with_rotate() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    ch.add_user("tenant_acme_user", "someone-elses-password");
    for rotate in [false, true] {
        let err = provisioner(&c, &ch, rotate)
            .run(&acme(), RunAction::Provision)
            .await
            .unwrap_err();
        assert!(matches!(err, ProvisionError::NotOurs { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "ClickHouse user tenant_acme_user exists but was not made by sentry-tenants for this tenant (it carries no owner mark, the tenant's status does not record it, and the tenant's credentials do not log in to it): left alone; give the tenant another name, or remove the object in ClickHouse if it is a leftover nobody uses"
        );
        assert!(ch.ddl().is_empty(), "rotate={rotate}: {:?}", ch.ddl());
        assert!(ch.password_matches("tenant_acme_user", "someone-elses-password"));
    }
    assert!(
        password(&c).await.is_none(),
        "refused before a Secret was written"
    );
}

/// A tenant provisioned before owner marks existed (its user and database carry none; its status
/// records them) is marked at its next run, its user even when its database is gone.
#[tokio::test]
async fn a_tenant_from_before_owner_marks_is_marked_at_its_next_run() {
    for database_dropped in [false, true] {
        let c = Cluster::new().await;
        let t = c.create_tenant("acme").await;
        let ch = RecordingClickHouse::new(MODERN);
        let p = provisioner(&c, &ch, false);
        p.run(&acme(), RunAction::Provision).await.unwrap();
        let mark = format!("sentry-tenants/{NS}/acme/{}", t.metadata.uid.unwrap());
        ch.run_by_hand(&format!("DROP ROLE IF EXISTS `{mark}`"));
        if database_dropped {
            ch.run_by_hand("DROP DATABASE `tenant_acme`");
        }
        assert!(ch.model(|m| m.roles.is_empty() && m.role_grants[USER].is_empty()));

        c.set_suspended("acme", true).await;
        p.run(&acme(), RunAction::Suspend)
            .await
            .unwrap_or_else(|e| panic!("database dropped: {database_dropped}: {e}"));
        let (user_marks, database_marks) = ch.model(|m| {
            let database_marks: Vec<_> =
                m.grants.get(&mark).into_iter().flatten().cloned().collect();
            (m.role_grants[USER].clone(), database_marks)
        });
        assert_eq!(user_marks, BTreeSet::from([mark.clone()]));
        let database_marked = database_marks
            .iter()
            .any(|(_, on)| *on == Object::Database("tenant_acme".into()));
        assert_eq!(database_marked, !database_dropped, "{database_marks:?}");
        assert_eq!(ch.is_locked(USER), Some(true));
    }
}

/// Credentials on file prove a user of the tenant's name only by logging in to it: a run cut short
/// after storing them, then a user of that name made by hand with another password, is refused before
/// any statement, and the password on file stays.
#[tokio::test]
async fn credentials_on_file_that_do_not_log_in_prove_no_user_the_tenants() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    // The version and the two existence probes answered; the first statement after the Secret fails.
    ch.fail_after(3, ChError::Unreachable("connection reset".into()));
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    ch.recover();
    let on_file = password(&c).await.expect("stored before the user was made");
    assert!(!ch.has_user(USER));

    ch.add_user(USER, "someone-elses-password");
    ch.clear();
    let err = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert!(matches!(err, ProvisionError::NotOurs { .. }), "{err}");
    assert!(ch.ddl().is_empty(), "{:?}", ch.ddl());
    assert!(ch.password_matches(USER, "someone-elses-password"));
    assert_eq!(password(&c).await, Some(on_file));
}

#[tokio::test]
async fn rotate_issues_new_credentials_only_when_asked() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let lost = provisioned_then_secret_lost(&c, &ch).await;
    provisioner(&c, &ch, true)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    let pw = password(&c).await.unwrap();
    assert_ne!(pw, lost);
    assert!(ch.password_matches("tenant_acme_user", &pw));
    assert!(
        ch.ddl()
            .iter()
            .any(|s| s.starts_with("ALTER USER `tenant_acme_user` IDENTIFIED WITH sha256_hash"))
    );
    // Rotating an active tenant again replaces the password on file and in ClickHouse.
    provisioner(&c, &ch, true)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    let rotated = password(&c).await.unwrap();
    assert_ne!(rotated, pw);
    assert!(ch.password_matches("tenant_acme_user", &rotated));
}

/// A run that finds the status already saying what it would write writes none: the re-run of a
/// Provision (database, Secret, index path, credentials) and of a SetLimits (the limits) sends no
/// status patch; a status saying otherwise is written.
#[tokio::test]
async fn a_rerun_that_finds_its_status_on_the_tenant_writes_none() {
    let (c, ch) = provisioned_acme().await;
    c.patch_spec("acme", json!({"limits": {"queriesPerHour": 100}}))
        .await;
    let status_writes = async |action| {
        let p = provisioner(&c, &ch, false);
        let (ran, writes) = c.log.writes_during(p.run(&acme(), action)).await;
        ran.unwrap();
        writes
            .iter()
            .filter(|r| r.kind() == "patch tenants/status")
            .count()
    };
    assert_eq!(status_writes(RunAction::SetLimits).await, 1, "new limits");
    for action in [RunAction::Provision, RunAction::SetLimits] {
        assert_eq!(status_writes(action).await, 0, "{action:?}");
    }
    for field in [
        "clickHouseDatabaseName",
        "clickHouseSecretRef",
        "tantivyIndexPath",
    ] {
        c.patch_tenant_status("acme", json!({ field: null })).await;
        assert_eq!(status_writes(RunAction::Provision).await, 1, "{field}");
    }
    c.patch_tenant_status("acme", json!({"appliedLimits": {"queriesPerHour": 99}}))
        .await;
    assert_eq!(
        status_writes(RunAction::SetLimits).await,
        1,
        "limits reported otherwise"
    );
}

/// A run's outcome is told on its Tenant as a Normal Event from the provisioner: the reason its
/// outcome names, the outcome's own words as the note.
#[tokio::test]
async fn a_runs_outcome_is_announced_as_an_event_on_its_tenant() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = provisioner(&c, &ch, false);
    let outcome = p.run(&acme(), RunAction::Provision).await.unwrap();
    c.log.clear();
    p.sync.announce(&acme(), &outcome).await;
    let events = c.log.events();
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    let uid = c.tenant("acme").await.metadata.uid.unwrap();
    assert_eq!(
        (
            &event["type"],
            &event["reason"],
            &event["note"],
            &event["reportingController"],
            &event["regarding"]["kind"],
            &event["regarding"]["name"],
            &event["regarding"]["uid"],
        ),
        (
            &json!("Normal"),
            &json!("Provisioned"),
            &json!(outcome.describe()),
            &json!("sentry-tenants-provisioner"),
            &json!("Tenant"),
            &json!("acme"),
            &json!(uid),
        )
    );
}

#[tokio::test]
async fn an_active_tenant_gets_no_ddl_but_its_status_is_resynced() {
    let (c, ch) = provisioned_acme().await;
    // An old tenant, provisioned before the index path existed: back-fill it.
    let patch = json!({"status": {"tantivyIndexPath": null}});
    c.tenants()
        .patch_status("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    ch.clear();
    let outcome = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    assert!(outcome.describe().contains("no DDL"));
    assert!(
        ch.statements().is_empty(),
        "ClickHouse not contacted: {:?}",
        ch.statements()
    );
    assert_eq!(
        c.tenant("acme")
            .await
            .status
            .unwrap()
            .tantivy_index_path
            .as_deref(),
        Some("/var/lib/sentry/tantivy/acme")
    );
}

#[tokio::test]
async fn spec_and_a_display_name_are_never_written() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let patch = json!({"spec": {"displayName": "Acme Corp (EU)"}});
    c.tenants()
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let ch = RecordingClickHouse::new(MODERN);
    c.log.clear();
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Suspend)
        .await
        .unwrap();
    assert_eq!(
        c.tenant("acme").await.spec.display_name.as_deref(),
        Some("Acme Corp (EU)")
    );
    for w in c.log.writes().iter().filter(|w| w.resource() == "tenants") {
        assert!(
            w.path.ends_with("/status"),
            "only status writes: {} {}",
            w.method,
            w.path
        );
        assert!(w.body.get("spec").is_none());
    }
}

#[tokio::test]
async fn an_old_server_is_refused_before_anything_is_written() {
    for version in ["18.16.1", "20.3.21.2"] {
        let c = Cluster::new().await;
        c.create_tenant("acme").await;
        let ch = RecordingClickHouse::new(version);
        let err = provisioner(&c, &ch, false)
            .run(&acme(), RunAction::Provision)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProvisionError::ServerTooOld { .. }),
            "{version}"
        );
        assert!(err.to_string().contains("needs ClickHouse 20.4 or newer"));
        assert_eq!(ch.statements(), ["SELECT version()"]);
        assert!(password(&c).await.is_none());
    }
}

/// 20.4, the first release with SQL access control, is enough.
#[tokio::test]
async fn the_first_server_with_access_control_is_provisioned() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new("20.4.2.9");
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    let password = password(&c).await.unwrap();
    assert!(ch.may_log_in(USER, &password));
}

#[tokio::test]
async fn suspend_locks_and_resume_unlocks_idempotently() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = provisioner(&c, &ch, false);
    let err = p.run(&acme(), RunAction::Suspend).await.unwrap_err();
    assert!(
        matches!(err, ProvisionError::NotProvisioned { .. }),
        "{err}"
    );

    p.run(&acme(), RunAction::Provision).await.unwrap();
    ch.clear();
    // A Suspend run for a tenant that is not suspended (resumed since the run was made) changes nothing.
    let late = p.run(&acme(), RunAction::Suspend).await.unwrap();
    assert!(
        late.describe().starts_with("skipped:"),
        "{}",
        late.describe()
    );
    assert_eq!(ch.ddl(), Vec::<String>::new());

    c.set_suspended("acme", true).await;
    for _ in 0..2 {
        p.run(&acme(), RunAction::Suspend).await.unwrap();
    }
    assert_eq!(
        ch.ddl(),
        [
            "ALTER USER `tenant_acme_user` HOST NONE",
            "KILL QUERY WHERE user = 'tenant_acme_user' ASYNC",
            "ALTER USER `tenant_acme_user` HOST NONE",
            "KILL QUERY WHERE user = 'tenant_acme_user' ASYNC"
        ]
    );
    assert_eq!(
        c.tenant("acme").await.status.unwrap().access_locked,
        Some(true)
    );
    c.set_suspended("acme", false).await;
    p.run(&acme(), RunAction::Resume).await.unwrap();
    assert_eq!(
        ch.ddl().last().unwrap(),
        "ALTER USER `tenant_acme_user` HOST ANY"
    );
    assert_eq!(
        c.tenant("acme").await.status.unwrap().access_locked,
        Some(false)
    );
}

/// A lock stops new logins; the queries the tenant is running are ended too, after the lock (so none
/// can start in between), and the run says how many: no one else's.
#[tokio::test]
async fn suspend_ends_the_tenants_running_queries_and_says_how_many() {
    let (c, ch) = provisioned_acme().await;
    let p = provisioner(&c, &ch, false);
    ch.start_query("tenant_acme_user", "q1");
    ch.start_query("tenant_acme_user", "q2");
    ch.start_query("tenant_globex_user", "q3");
    ch.clear();

    c.set_suspended("acme", true).await;
    let outcome = p.run(&acme(), RunAction::Suspend).await.unwrap();
    assert_eq!(
        ch.ddl(),
        [
            "ALTER USER `tenant_acme_user` HOST NONE",
            "KILL QUERY WHERE user = 'tenant_acme_user' ASYNC"
        ]
    );
    assert_eq!(
        ch.running(),
        [("tenant_globex_user".to_owned(), "q3".to_owned())]
    );
    assert_eq!(
        outcome.describe(),
        "ClickHouse logins locked; 2 running queries of the tenant asked to stop"
    );
    let again = p.run(&acme(), RunAction::Suspend).await.unwrap();
    assert_eq!(
        again.describe(),
        "ClickHouse logins locked; no query of the tenant was running"
    );
}

#[tokio::test]
async fn a_suspended_tenant_is_provisioned_locked() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.set_suspended("acme", true).await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    assert!(
        ch.ddl()
            .iter()
            .any(|s| s.starts_with("CREATE USER") && s.contains(" HOST NONE ")),
        "{:#?}",
        ch.ddl()
    );
    assert_eq!(
        c.tenant("acme").await.status.unwrap().access_locked,
        Some(true)
    );
    c.settle().await;
    assert_eq!(
        c.log.creates_of("runjobs"),
        0,
        "already locked: no Suspend run needed"
    );
}

/// A Secret that only has the credentials Secret's name — made by hand, the admin Secret a tenant's
/// name happens to spell, another object's — is never read for a password nor changed, not even by a
/// deliberate rotation, and nothing reaches ClickHouse's user list.
#[tokio::test]
async fn a_secret_with_the_credentials_name_that_is_not_the_tenants_is_never_used() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let secrets = Api::<Secret>::namespaced(c.admin.clone(), NS);
    let squatter = |owner: serde_json::Value| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "acme-clickhouse", "namespace": NS, "ownerReferences": owner},
            "data": {"password": "dGhlLWFkbWluLXBhc3N3b3Jk"},
        }))
        .unwrap()
    };
    secrets
        .create(&Default::default(), &squatter(json!([])))
        .await
        .unwrap();
    let ch = RecordingClickHouse::new(MODERN);
    for rotate in [false, true] {
        let err = provisioner(&c, &ch, rotate)
            .run(&acme(), RunAction::Provision)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Secret acme-clickhouse is not tenant \"acme\"'s (it has no controlling owner: made by hand or by another tool): refusing to read or change it; if it is a leftover, delete it, otherwise give the tenant another name",
            "rotate: {rotate}"
        );
    }
    // Controlled by another Tenant of the same name (deleted since, its Secret left behind).
    secrets
        .delete("acme-clickhouse", &Default::default())
        .await
        .unwrap();
    let other = json!([{"apiVersion": "sentry.io/v1alpha1", "kind": "Tenant", "name": "acme",
        "uid": "0a0b0c0d-not-this-one", "controller": true}]);
    secrets
        .create(&Default::default(), &squatter(other))
        .await
        .unwrap();
    let err = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("(it is controlled by Tenant acme (uid 0a0b0c0d-not-this-one))"),
        "{err}"
    );
    assert!(ch.ddl().is_empty(), "{:#?}", ch.ddl());
    let kept = secrets.get("acme-clickhouse").await.unwrap();
    assert_eq!(
        kept.data.unwrap()[PASSWORD_KEY].0,
        b"the-admin-password",
        "the Secret is left as it was"
    );
    assert!(
        c.tenant("acme")
            .await
            .status
            .is_none_or(|s| s.click_house_database_name.is_none())
    );
}

#[tokio::test]
async fn missing_tenant_and_foreign_password_are_clear_errors() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    let err = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tenant \"acme\" does not exist in namespace \"sentry-tenants\""
    );

    c.create_tenant("acme").await;
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    clear_status(&c).await;
    ch.add_user("tenant_acme_user", "someone-changed-it");
    let err = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProvisionError::PasswordMismatch { .. }),
        "{err}"
    );
}

/// Two first provisions at once: the one whose Secret create finds the other's Secret made meanwhile
/// takes the password on file, so ClickHouse and the Secret agree; a create refused otherwise fails the
/// run with the API's reason.
#[tokio::test]
async fn a_secret_made_meanwhile_is_taken_and_a_refused_create_fails_the_run() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.intercept.refuse(Method::POST, "/secrets");
    let err = provisioner(&c, &RecordingClickHouse::new(MODERN), false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("create secret acme-clickhouse")
            && err.to_string().contains("etcdserver: request timed out"),
        "{err}"
    );
    c.intercept.clear();

    // The other run's Secret, on file; this run reads before it is made and creates after.
    provisioner(&c, &RecordingClickHouse::new(MODERN), false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    clear_status(&c).await;
    let theirs = password(&c).await.unwrap();
    let created = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = created.clone();
    c.intercept.set(move |method, path, _, _| {
        use std::sync::atomic::Ordering::SeqCst;
        let secret = path.ends_with("/secrets/acme-clickhouse");
        match *method {
            Method::GET if secret && !seen.load(SeqCst) => Some((
                404,
                sentry_tenants_tests::status_body(404, "NotFound", "not found"),
            )),
            Method::POST if path.ends_with("/secrets") => {
                seen.store(true, SeqCst);
                Some((
                    409,
                    sentry_tenants_tests::status_body(409, "AlreadyExists", "already exists"),
                ))
            }
            _ => None,
        }
    });
    let ch = RecordingClickHouse::new(MODERN);
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    assert!(
        created.load(std::sync::atomic::Ordering::SeqCst),
        "the create was tried"
    );
    assert_eq!(
        password(&c).await.unwrap(),
        theirs,
        "the Secret on file stays"
    );
    assert!(
        ch.may_log_in(USER, &theirs),
        "ClickHouse has the password on file"
    );
}

#[tokio::test]
async fn unreachable_clickhouse_mid_provision_fails_classified_and_a_retry_reuses_the_credentials()
{
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = provisioner(&c, &ch, false);
    ch.fail(ChError::Unreachable("connection refused".into()));
    let err = p.run(&acme(), RunAction::Provision).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "ClickHouse at http://clickhouse:8123 is unreachable: connection refused (check --clickhouse-url and that the server is running)"
    );
    assert!(!c.tenant("acme").await.is_provisioned());
    ch.recover();
    ch.fail(ChError::Server {
        status: 401,
        code: Some(516),
        message: "Code: 516. admin: Authentication failed".into(),
    });
    assert!(matches!(
        p.run(&acme(), RunAction::Provision).await.unwrap_err(),
        ProvisionError::AuthFailed { .. }
    ));
    ch.recover();
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let pw = password(&c).await.unwrap();
    assert!(ch.password_matches("tenant_acme_user", &pw));
}

/// The whole path: a Provision RunJob's Job runs the provisioner with the env the Job carries, and only
/// the provisioner's status write makes the tenant Active.
#[tokio::test]
async fn a_provision_runjob_drives_the_tenant_to_active_only_through_the_provisioner() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    c.settle().await;
    let job = c.job("acme-provision-1").await.unwrap();
    let env = job.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let var = |n: &str| {
        env.iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value.clone())
            .unwrap()
    };
    let tenant = TenantName::parse(&var("SENTRY_TENANTS_TENANT")).unwrap();
    let action: RunAction = var("SENTRY_TENANTS_ACTION").parse().unwrap();
    let sync = TenantSync::new(
        c.client.clone(),
        &var("SENTRY_TENANTS_NAMESPACE"),
        &var("SENTRY_TENANTS_TANTIVY_ROOT"),
    )
    .for_run(Some(var("SENTRY_TENANTS_RUN_ID")));
    let ch = RecordingClickHouse::new(MODERN);
    c.job_running("acme-provision-1").await;
    c.settle().await;
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Provisioning)
    );

    let p = Provisioner {
        clickhouse: ch,
        clickhouse_url: var("SENTRY_TENANTS_CLICKHOUSE_URL"),
        sync,
        rotate: false,
        cluster: None,
        prefix: sentry_tenants_tests::legacy_prefix(),
        clock: c.clock.clone(),
    };
    p.run(&tenant, action).await.unwrap();
    let run_uid = c.run("acme-provision-1").await.unwrap().metadata.uid;
    assert!(run_uid.is_some());
    assert_eq!(
        c.tenant("acme")
            .await
            .status
            .unwrap()
            .credentials
            .unwrap()
            .written_by,
        run_uid,
        "the credentials report names the run that wrote it"
    );
    c.job_succeeded("acme-provision-1").await;
    c.settle().await;
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
    c.clock.advance(SignedDuration::from_secs(300));
    c.settle().await;
    assert!(c.run("acme-provision-1").await.is_none());
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Active),
        "still Active after cleanup"
    );
}

/// An attempt that created the user and then failed leaves it with the hosts of its day; a retry made
/// after the tenant was suspended must lock the user, not only report it locked.
#[tokio::test]
async fn a_retried_provision_locks_a_user_an_earlier_attempt_left_unlocked() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = provisioner(&c, &ch, false);
    // Version, the four ownership reads, the owner role and its grant, CREATE DATABASE and CREATE
    // USER are answered; the user's owner mark is not: the retry proves the user by its login.
    ch.fail_after(9, ChError::Unreachable("connection reset".into()));
    p.run(&acme(), RunAction::Provision).await.unwrap_err();
    assert_eq!(ch.is_locked("tenant_acme_user"), Some(false));

    ch.recover();
    c.set_suspended("acme", true).await;
    p.run(&acme(), RunAction::Provision).await.unwrap();
    assert_eq!(
        c.tenant("acme").await.status.unwrap().access_locked,
        Some(true)
    );
    assert_eq!(
        ch.is_locked("tenant_acme_user"),
        Some(true),
        "reported locked, so locked: {:#?}",
        ch.ddl()
    );
    let password = password(&c).await.unwrap();
    assert!(ch.password_matches("tenant_acme_user", &password));
    assert!(!ch.may_log_in("tenant_acme_user", &password));
}

/// Every action but Rotate, a hundred times each (Suspend and Resume alternating with the spec they
/// enforce, Deprovision on a deleted tenant under Retain): the password on file and the user's stay
/// byte-identical, and no user is created twice.
#[tokio::test]
async fn a_hundred_reruns_of_every_action_but_rotate_leave_the_password_byte_identical() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    let ch = RecordingClickHouse::new(MODERN);
    let p = provisioner(&c, &ch, false);
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let first = password(&c).await.unwrap();
    for i in 0..100 {
        for (suspended, action) in [(true, RunAction::Suspend), (false, RunAction::Resume)] {
            c.set_suspended("acme", suspended).await;
            p.run(&acme(), action).await.unwrap();
        }
        c.patch_spec("acme", json!({"limits": {"queriesPerHour": 100 + i}}))
            .await;
        p.run(&acme(), RunAction::SetLimits).await.unwrap();
        p.run(&acme(), RunAction::Provision).await.unwrap();
        assert_eq!(password(&c).await.unwrap(), first, "round {i}");
    }
    c.tenants()
        .delete("acme", &Default::default())
        .await
        .unwrap();
    for _ in 0..100 {
        p.run(&acme(), RunAction::Deprovision).await.unwrap();
    }
    assert_eq!(password(&c).await.unwrap(), first);
    assert!(ch.password_matches("tenant_acme_user", &first));
    assert_eq!(ch.password_changes(), 0);
    let creates = ch
        .ddl()
        .iter()
        .filter(|s| s.starts_with("CREATE USER"))
        .count();
    assert_eq!(creates, 1, "one CREATE USER: the first Provision's");
}

/// A current server with `acme` provisioned, its rotation grace `grace`, on the cluster's clock.
async fn provisioned_on_a_current_server(grace: &str) -> (Cluster, RecordingClickHouse) {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let patch = json!({"spec": {"rotationGracePeriod": grace}});
    c.tenants()
        .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let ch = RecordingClickHouse::new("25.3.2.39").with_clock(&c.clock);
    provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    (c, ch)
}

/// `status.credentials.rotatedAt`, which a rotation schedule counts from, is when a run last changed
/// the password: the Provision run that made it, a Rotate run; a re-run that changed nothing keeps it.
#[tokio::test]
async fn the_password_is_dated_by_the_run_that_changed_it_and_a_rerun_keeps_the_date() {
    let (c, ch) = provisioned_on_a_current_server("1h").await;
    let p = provisioner(&c, &ch, false);
    let rotated_at = async || {
        let t = c.tenant("acme").await;
        let credentials = t.status.unwrap().credentials.unwrap();
        credentials.rotated_at.expect("rotatedAt").0.as_second()
    };
    let made = c.clock.now().as_second();
    assert_eq!(rotated_at().await, made, "dated by the Provision run");

    c.clock.advance(SignedDuration::from_secs(3600));
    p.run(&acme(), RunAction::Provision).await.unwrap();
    assert_eq!(rotated_at().await, made, "a re-run changed no password");

    c.clock.advance(SignedDuration::from_secs(3600));
    p.run(&acme(), RunAction::Rotate).await.unwrap();
    assert_eq!(rotated_at().await, c.clock.now().as_second());
}

/// A suspended tenant's logins stay locked through a Rotate and a Revoke: the new password is
/// ClickHouse's and on file, and no login is tried with it (one would be refused, failing the run).
#[tokio::test]
async fn a_suspended_tenants_rotation_and_revocation_leave_its_logins_locked() {
    let (c, ch) = provisioned_on_a_current_server("1h").await;
    let p = provisioner(&c, &ch, false);
    c.set_suspended("acme", true).await;
    p.run(&acme(), RunAction::Suspend).await.unwrap();
    assert_eq!(ch.is_locked(USER), Some(true));
    for action in [RunAction::Rotate, RunAction::Revoke] {
        let old = password(&c).await.unwrap();
        p.run(&acme(), action)
            .await
            .unwrap_or_else(|e| panic!("{action:?}: {e}"));
        let new = password(&c).await.unwrap();
        assert_ne!(new, old, "{action:?}");
        assert!(ch.password_matches(USER, &new), "{action:?}");
        assert_eq!(ch.is_locked(USER), Some(true), "{action:?}");
        assert!(!ch.may_log_in(USER, &new), "{action:?}");
    }
}

/// On a server holding several passwords per user: one statement sets the new password and keeps the
/// old one until the grace period ends; both log in during it, only the new one after.
#[tokio::test]
async fn rotate_keeps_the_old_password_for_the_grace_period_then_only_the_new() {
    let (c, ch) = provisioned_on_a_current_server("2s").await;
    let p = provisioner(&c, &ch, false);
    let old = password(&c).await.unwrap();
    ch.clear();
    let outcome = p.run(&acme(), RunAction::Rotate).await.unwrap();
    let new = password(&c).await.unwrap();
    assert_ne!(new, old);
    assert!(
        outcome.describe().contains("the old one is accepted until"),
        "{}",
        outcome.describe()
    );
    let alter: Vec<String> = ch
        .ddl()
        .into_iter()
        .filter(|s| s.starts_with("ALTER USER"))
        .collect();
    assert_eq!(alter.len(), 1, "{alter:?}");
    assert!(
        alter[0].contains(" VALID UNTIL ") && alter[0].contains(", sha256_hash BY "),
        "{}",
        alter[0]
    );
    assert!(
        ch.may_log_in(USER, &old),
        "the old password during the grace"
    );
    assert!(ch.may_log_in(USER, &new));
    let secret = Api::<Secret>::namespaced(c.admin.clone(), NS)
        .get("acme-clickhouse")
        .await
        .unwrap();
    let data = secret.data.unwrap();
    assert!(!data.contains_key("pendingPassword"), "{:?}", data.keys());
    let uri = String::from_utf8(data["uri"].0.clone()).unwrap();
    assert!(uri.contains(&new), "the uri carries the new password");
    // A second before the grace ends (2 s): still both. Past it: only the new one.
    c.clock.advance(SignedDuration::from_secs(1));
    assert!(
        ch.may_log_in(USER, &old),
        "the old password within the grace"
    );
    c.clock.advance(SignedDuration::from_secs(2));
    assert!(
        !ch.may_log_in(USER, &old),
        "the old password after the grace"
    );
    assert!(ch.may_log_in(USER, &new));
}

/// Two rotations within one grace period: the second keeps the first one's old password until that
/// one's own expiry (it used to replace the whole list, cutting it off at once), and each old password
/// goes exactly when its grace ends.
#[tokio::test]
async fn a_second_rotation_keeps_the_first_ones_old_password_until_its_own_expiry() {
    let (c, ch) = provisioned_on_a_current_server("60s").await;
    let p = provisioner(&c, &ch, false);
    let p0 = password(&c).await.unwrap();
    p.run(&acme(), RunAction::Rotate).await.unwrap();
    let p1 = password(&c).await.unwrap();
    c.clock.advance(SignedDuration::from_secs(30));
    let outcome = p.run(&acme(), RunAction::Rotate).await.unwrap();
    let p2 = password(&c).await.unwrap();
    assert!(
        outcome
            .describe()
            .ends_with("; 1 password of an earlier rotation until its own expiry"),
        "{}",
        outcome.describe()
    );
    let logs_in = |pw: &str| ch.may_log_in(USER, pw);
    assert!(
        logs_in(&p0) && logs_in(&p1) && logs_in(&p2),
        "all three, 30 s into the first grace"
    );
    let retiring = on_file(&c, "retiringPasswords").await.unwrap();
    assert_eq!(
        retiring.matches("validUntil").count(),
        2,
        "p0 and p1 by hash: {retiring}"
    );
    assert!(
        !retiring.contains(&p0) && !retiring.contains(&p1),
        "hashes, never passwords"
    );

    c.clock.advance(SignedDuration::from_secs(31));
    assert!(
        !logs_in(&p0),
        "p0 ends with the first grace (60 s after the first rotation)"
    );
    assert!(logs_in(&p1) && logs_in(&p2));
    c.clock.advance(SignedDuration::from_secs(30));
    assert!(!logs_in(&p1), "p1 ends with the second grace");
    assert!(logs_in(&p2));

    // The next rotation drops what has expired from the Secret's list.
    p.run(&acme(), RunAction::Rotate).await.unwrap();
    let retiring = on_file(&c, "retiringPasswords").await.unwrap();
    assert_eq!(retiring.matches("validUntil").count(), 1, "{retiring}");
}

/// Revoke, for a leaked password: a new one and no other, at once — a rotation's grace included —
/// and the tenant's running queries ended; the Secret lists no earlier password any more.
#[tokio::test]
async fn revoke_refuses_every_earlier_password_at_once_and_ends_the_tenants_queries() {
    let (c, ch) = provisioned_on_a_current_server("1h").await;
    let p = provisioner(&c, &ch, false);
    let p0 = password(&c).await.unwrap();
    p.run(&acme(), RunAction::Rotate).await.unwrap();
    let p1 = password(&c).await.unwrap();
    assert!(ch.may_log_in(USER, &p0), "p0 within its grace");
    ch.start_query(USER, "q1");
    ch.start_query("tenant_globex_user", "q2");
    ch.clear();

    let outcome = p.run(&acme(), RunAction::Revoke).await.unwrap();
    let p2 = password(&c).await.unwrap();
    assert!(p2 != p0 && p2 != p1);
    assert!(!ch.may_log_in(USER, &p0) && !ch.may_log_in(USER, &p1));
    assert!(ch.may_log_in(USER, &p2));
    assert_eq!(
        ch.running(),
        [("tenant_globex_user".to_owned(), "q2".to_owned())],
        "only the tenant's query ended"
    );
    assert_eq!(
        outcome.describe(),
        "revoked every earlier password of tenant_acme at once: the Secret holds the new one; 1 running query of the tenant asked to stop"
    );
    let alter: Vec<String> = ch
        .ddl()
        .into_iter()
        .filter(|s| s.starts_with("ALTER USER"))
        .collect();
    assert_eq!(alter.len(), 1, "{alter:?}");
    assert!(!alter[0].contains("VALID UNTIL"), "{}", alter[0]);
    assert_eq!(on_file(&c, "retiringPasswords").await, None);
    assert_eq!(on_file(&c, "pendingPassword").await, None);
    let uri = on_file(&c, "uri").await.unwrap();
    assert!(uri.contains(&format!(":{p2}@")), "{uri}");
}

/// A Revoke cut short after its new password went on file (ClickHouse gone before the switch): the
/// old password still works, and the retry switches to that same new one.
#[tokio::test]
async fn a_revoke_cut_short_is_finished_by_its_retry_with_the_same_new_password() {
    let (c, ch) = provisioned_on_a_current_server("1h").await;
    let p = provisioner(&c, &ch, false);
    let old = password(&c).await.unwrap();
    ch.clear();
    p.run(&acme(), RunAction::Revoke).await.unwrap();
    let switch = ch
        .statements()
        .iter()
        .position(|s| s.starts_with("ALTER USER `tenant_acme_user` IDENTIFIED"))
        .expect("a revoke switches the password");
    let revoked = password(&c).await.unwrap();
    ch.clear();
    ch.fail_after(switch, ChError::Unreachable("connection reset".into()));
    p.run(&acme(), RunAction::Revoke).await.unwrap_err();
    assert_eq!(password(&c).await.unwrap(), revoked, "nothing switched yet");
    assert!(ch.may_log_in(USER, &revoked) && !ch.may_log_in(USER, &old));
    let pending = on_file(&c, "pendingPassword").await.unwrap();
    ch.recover();
    p.run(&acme(), RunAction::Revoke).await.unwrap();
    assert_eq!(password(&c).await.unwrap(), pending);
    assert!(ch.may_log_in(USER, &pending) && !ch.may_log_in(USER, &revoked));
}

/// On a server with one password per user the switch is immediate, and the run says so.
#[tokio::test]
async fn rotate_on_an_older_server_is_a_single_switch_and_says_so() {
    let (c, ch) = provisioned_acme().await;
    let p = provisioner(&c, &ch, false);
    let old = password(&c).await.unwrap();
    let outcome = p.run(&acme(), RunAction::Rotate).await.unwrap();
    let new = password(&c).await.unwrap();
    assert_eq!(
        outcome.describe(),
        "rotated the credentials of tenant_acme in a single switch: ClickHouse 24.8.4.13 keeps one password per user (several arrived in 24.11), so the old password stopped working at once"
    );
    assert!(!ch.may_log_in(USER, &old));
    assert!(ch.may_log_in(USER, &new));
    assert_eq!(ch.password_changes(), 1);
}

/// A Rotate run cut short after the new password went on file (ClickHouse gone before the ALTER):
/// the retry uses that same new password, so nothing the first attempt wrote is lost or contradicted.
#[tokio::test]
async fn a_rotate_run_cut_short_is_finished_by_its_retry_with_the_same_new_password() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let ch = RecordingClickHouse::new("25.3.2.39").with_clock(&c.clock);
    let p = provisioner(&c, &ch, false);
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let old = password(&c).await.unwrap();
    // version, the four ownership reads: then the ALTER fails.
    ch.fail_after(5, ChError::Unreachable("connection reset".into()));
    p.run(&acme(), RunAction::Rotate).await.unwrap_err();
    assert_eq!(password(&c).await.unwrap(), old, "nothing switched yet");
    let pending = on_file(&c, "pendingPassword").await.unwrap();
    ch.recover();
    p.run(&acme(), RunAction::Rotate).await.unwrap();
    assert_eq!(password(&c).await.unwrap(), pending);
    assert!(ch.may_log_in(USER, &pending) && ch.may_log_in(USER, &old));
}

/// `provision-tenant --rotate` on a tenant with credentials on file, cut short just before ClickHouse
/// hears of the new password: the Secret still holds the old one, which still logs in; the re-run
/// finishes with the password it left pending, and the whole Secret (`uri` too) says so.
#[tokio::test]
async fn a_deliberate_rotation_cut_short_keeps_the_old_password_working_and_its_rerun_finishes_it()
{
    let (c, ch) = provisioned_acme().await;
    let rotate = provisioner(&c, &ch, true);
    ch.clear();
    rotate.run(&acme(), RunAction::Provision).await.unwrap();
    let old = password(&c).await.unwrap();
    let before_switch = ch
        .statements()
        .iter()
        .position(|s| s.starts_with("ALTER USER `tenant_acme_user` IDENTIFIED"))
        .expect("a rotation switches the password");

    ch.clear();
    ch.fail_after(
        before_switch,
        ChError::Unreachable("connection reset".into()),
    );
    rotate.run(&acme(), RunAction::Provision).await.unwrap_err();
    assert_eq!(password(&c).await.unwrap(), old, "nothing switched yet");
    assert!(ch.may_log_in(USER, &old), "the apps' password still works");
    let pending = on_file(&c, "pendingPassword").await.unwrap();

    ch.recover();
    rotate.run(&acme(), RunAction::Provision).await.unwrap();
    assert_eq!(password(&c).await.unwrap(), pending);
    assert!(ch.may_log_in(USER, &pending) && !ch.may_log_in(USER, &old));
    let uri = on_file(&c, "uri").await.unwrap();
    assert!(uri.contains(&format!(":{pending}@")), "{uri}");
    assert_eq!(on_file(&c, "pendingPassword").await, None);
}

/// Two rotations started together read the same Secret; the one that stores its new password
/// second finds the Secret changed since its read and fails before ClickHouse hears of its password,
/// so the Secret never ends up holding a password ClickHouse does not have.
#[tokio::test]
async fn of_two_rotations_started_together_only_one_puts_its_password_on_file() {
    let (c, _ch) = provisioned_acme().await;
    let sync = TenantSync::new(c.client.clone(), NS, "/var/lib/sentry/tantivy");
    let tenant = c.tenant("acme").await;
    let first = sync
        .passwords_for_rotation(&acme(), &tenant)
        .await
        .unwrap()
        .unwrap();
    let second = sync
        .passwords_for_rotation(&acme(), &tenant)
        .await
        .unwrap()
        .unwrap();
    sync.store_pending_password(&acme(), &first, "first-new")
        .await
        .unwrap();
    let err = sync
        .store_pending_password(&acme(), &second, "second-new")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("another run changed the Secret since this one read it"),
        "{err}"
    );
    let on_file = sync
        .passwords_for_rotation(&acme(), &tenant)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(on_file.pending.as_deref(), Some("first-new"));

    // Refused for another reason, the write is reported as such, not as a rotation at the same time.
    c.intercept
        .refuse(Method::PATCH, "/secrets/acme-clickhouse");
    let err = sync
        .store_pending_password(&acme(), &on_file, "third-new")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("update secret acme-clickhouse")
            && err.contains("etcdserver: request timed out"),
        "{err}"
    );
}

/// The install's prefix changed (an install made before prefixes, upgraded; or `--clickhouse-prefix`
/// passed later): a tenant keeps the names it was given — from its status, from its Secret when a run
/// was cut short before the status was written, from the Secret a deleted Tenant of its name
/// retained — and only a tenant with none gets the new prefix's names.
#[tokio::test]
async fn names_once_given_survive_a_change_of_the_prefix() {
    let (c, ch) = provisioned_acme().await;
    let pw = password(&c).await.unwrap();
    let upgraded = Provisioner {
        prefix: ClickHousePrefix::parse("prod").unwrap(),
        ..provisioner(&c, &ch, false)
    };

    // Recorded in its status.
    ch.clear();
    c.set_suspended("acme", true).await;
    upgraded.run(&acme(), RunAction::Suspend).await.unwrap();
    assert_eq!(ch.ddl()[0], "ALTER USER `tenant_acme_user` HOST NONE");
    c.set_suspended("acme", false).await;
    upgraded.run(&acme(), RunAction::Resume).await.unwrap();

    // A run cut short before the status: the Secret names the database.
    clear_status(&c).await;
    ch.clear();
    upgraded.run(&acme(), RunAction::Provision).await.unwrap();
    let status = c.tenant("acme").await.status.unwrap();
    assert_eq!(
        status.click_house_database_name.as_deref(),
        Some("tenant_acme")
    );
    assert!(
        ch.ddl().iter().all(|s| !s.contains("prod_")),
        "{:#?}",
        ch.ddl()
    );
    assert!(ch.may_log_in(USER, &pw));

    // Retained by a deleted Tenant of the name, adopted by a new one.
    let secrets = Api::<Secret>::namespaced(c.admin.clone(), NS);
    let retained = json!({"metadata": {
        "ownerReferences": [],
        "labels": {sentry_tenants::provision::RETAINED_FOR: "acme"},
    }});
    secrets
        .patch(
            "acme-clickhouse",
            &PatchParams::default(),
            &Patch::Merge(&retained),
        )
        .await
        .unwrap();
    c.tenants()
        .delete("acme", &Default::default())
        .await
        .unwrap();
    c.create_tenant("acme").await;
    ch.clear();
    let adopted = upgraded.run(&acme(), RunAction::Provision).await.unwrap();
    assert!(
        adopted.describe().contains("tenant_acme"),
        "{}",
        adopted.describe()
    );
    assert_eq!(
        password(&c).await.as_deref(),
        Some(pw.as_str()),
        "never rotated"
    );
    assert!(ch.may_log_in(USER, &pw));

    // A tenant with no names yet gets the new prefix's.
    c.create_tenant("globex").await;
    let globex = TenantName::parse("globex").unwrap();
    upgraded.run(&globex, RunAction::Provision).await.unwrap();
    let status = c.tenant("globex").await.status.unwrap();
    assert_eq!(
        status.click_house_database_name.as_deref(),
        Some("prod_globex")
    );
    let secret = secrets.get("globex-clickhouse").await.unwrap();
    let username = String::from_utf8(secret.data.unwrap()["username"].0.clone()).unwrap();
    assert_eq!(username, "prod_globex_user");
}

/// The marker beside acme's credentials Secret: the ConfigMap owned by the Secret whose uid the
/// tenant's status reports, and that uid.
async fn marker_of_reported_secret(c: &Cluster) -> (Option<ConfigMap>, String) {
    let tenant = c.tenants().get("acme").await.unwrap();
    let uid =
        (tenant.status.unwrap().credentials.unwrap().secret_uid).expect("a reported Secret uid");
    let marker = Api::<ConfigMap>::namespaced(c.admin.clone(), NS)
        .get_opt(&format!("acme-clickhouse.{uid}"))
        .await
        .unwrap();
    (marker, uid)
}

/// Every run that writes the credentials writes the marker the operator watches in place of the
/// Secret: owned by the Secret (the garbage collector deletes it with the Secret), named by its uid.
#[tokio::test]
async fn provision_writes_a_marker_owned_by_the_credentials_secret() {
    let (c, _ch) = provisioned_acme().await;
    let secret = Api::<Secret>::namespaced(c.admin.clone(), NS)
        .get("acme-clickhouse")
        .await
        .unwrap();
    let (marker, uid) = marker_of_reported_secret(&c).await;
    assert_eq!(Some(uid.as_str()), secret.metadata.uid.as_deref());
    let marker = marker.expect("the marker");
    let owner = &marker.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Secret", "acme-clickhouse", uid.as_str())
    );
    assert_eq!(marker.labels()["sentry.io/tenant"], "acme");
    let created = c
        .log
        .all()
        .into_iter()
        .find(|r| r.method == Method::POST && r.path.ends_with("/configmaps"))
        .expect("the marker's create");
    assert!(
        created
            .query
            .contains("fieldManager=sentry-tenants-provisioner"),
        "{}",
        created.query
    );
}

/// A marker another run made between this run's look and its create is read, and as it stands for
/// the same Secret the run goes on; a ConfigMap of the marker's name that does not stand for that
/// Secret stops the run, saying so; a failed create is reported as the create's failure.
#[tokio::test]
async fn a_marker_made_meanwhile_is_taken_and_one_that_is_not_the_secrets_stops_the_run() {
    let (c, ch) = provisioned_acme().await;
    let (_, uid) = marker_of_reported_secret(&c).await;
    let name = format!("acme-clickhouse.{uid}");
    let resync = async || {
        provisioner(&c, &ch, false)
            .run(&acme(), RunAction::Provision)
            .await
    };
    // This run's first look finds nothing: the other run's marker is made just after it.
    let looked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let suffix = format!("/configmaps/{name}");
    c.intercept.set({
        let looked = looked.clone();
        move |method, path, _, _| {
            let first = *method == Method::GET
                && path.ends_with(&suffix)
                && !looked.swap(true, std::sync::atomic::Ordering::SeqCst);
            first.then(|| (404, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})))
        }
    });
    c.log.clear();
    resync()
        .await
        .expect("the marker made meanwhile is this Secret's");
    let posts = c
        .log
        .count(|r| r.method == Method::POST && r.path.ends_with("/configmaps"));
    assert_eq!(posts, 1, "one create, answered AlreadyExists, then read");

    c.intercept.refuse(Method::POST, "/configmaps");
    let markers = Api::<ConfigMap>::namespaced(c.admin.clone(), NS);
    markers.delete(&name, &Default::default()).await.unwrap();
    let err = resync().await.unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("create configmap {name}")),
        "{err}"
    );
    c.intercept.clear();

    let foreign: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    markers.create(&Default::default(), &foreign).await.unwrap();
    let err = resync().await.unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "ConfigMap {NS}/{name} exists and is not owned by that Secret"
        )),
        "{err}"
    );
}

/// A Rotate run on a tenant whose credentials Secret was deleted makes it again: a new password, the
/// only one ClickHouse accepts from then on (the old one's hash was only in the deleted Secret), a
/// new marker for the new Secret, and the status naming it.
#[tokio::test]
async fn a_rotate_after_the_secret_was_deleted_makes_it_again_with_only_the_new_password() {
    let (c, ch) = provisioned_on_a_current_server("60s").await;
    let old = password(&c).await.unwrap();
    let (_, old_uid) = marker_of_reported_secret(&c).await;
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .delete("acme-clickhouse", &Default::default())
        .await
        .unwrap();
    ch.clear();
    let outcome = provisioner(&c, &ch, false)
        .run(&acme(), RunAction::Rotate)
        .await
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::SecretRemade {
            database: "tenant_acme".into()
        }
    );
    let new = password(&c).await.expect("the Secret made again");
    assert_ne!(new, old);
    assert!(ch.may_log_in(USER, &new));
    assert!(
        !ch.may_log_in(USER, &old),
        "no overlap for a password nobody holds on file"
    );
    let secret = Api::<Secret>::namespaced(c.admin.clone(), NS)
        .get("acme-clickhouse")
        .await
        .unwrap();
    let owner = &secret.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("Tenant", Some(true))
    );
    assert!(on_file(&c, "pendingPassword").await.is_none());
    let (marker, uid) = marker_of_reported_secret(&c).await;
    assert_ne!(uid, old_uid);
    assert_eq!(Some(uid.as_str()), secret.metadata.uid.as_deref());
    assert!(marker.is_some(), "the new Secret's marker");
}

/// Two Rotate runs making the deleted Secret again at once: the one whose create finds the other's
/// stops before ClickHouse hears of its password (the two would switch to different ones); a create
/// refused otherwise fails the run with the API's reason.
#[tokio::test]
async fn of_two_runs_making_the_secret_again_the_second_stops_before_clickhouse() {
    let (c, ch) = provisioned_on_a_current_server("60s").await;
    let old = password(&c).await.unwrap();
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .delete("acme-clickhouse", &Default::default())
        .await
        .unwrap();
    ch.clear();
    for (code, reason, said) in [
        (
            409,
            "AlreadyExists",
            "make secret acme-clickhouse again: another run made it meanwhile",
        ),
        (500, "InternalError", "create secret acme-clickhouse"),
    ] {
        c.intercept
            .answer_status(Method::POST, "/secrets", code, reason, "refused");
        let err = provisioner(&c, &ch, false)
            .run(&acme(), RunAction::Rotate)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(said), "{code}: {err}");
        assert!(
            ch.statements().iter().all(|s| !s.starts_with("ALTER USER")),
            "{code}"
        );
        assert!(ch.may_log_in(USER, &old), "{code}: the password unchanged");
    }
}

/// Cut short before ClickHouse heard of it, the Secret made again holds the new password as pending
/// only — never a `password` ClickHouse refuses — and the old one still works; the retry finishes
/// with that same new password.
#[tokio::test]
async fn a_secret_remade_by_a_rotate_cut_short_is_finished_by_its_retry() {
    let (c, ch) = provisioned_on_a_current_server("60s").await;
    let old = password(&c).await.unwrap();
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .delete("acme-clickhouse", &Default::default())
        .await
        .unwrap();
    let p = provisioner(&c, &ch, false);
    // version, the four ownership reads: then the ALTER fails.
    ch.fail_after(5, ChError::Unreachable("connection reset".into()));
    p.run(&acme(), RunAction::Rotate).await.unwrap_err();
    assert_eq!(
        password(&c).await,
        None,
        "no password on file that ClickHouse refuses"
    );
    let pending = on_file(&c, "pendingPassword")
        .await
        .expect("the new one, pending");
    assert!(ch.may_log_in(USER, &old), "nothing switched yet");
    ch.recover();
    p.run(&acme(), RunAction::Rotate).await.unwrap();
    assert_eq!(password(&c).await.unwrap(), pending);
    assert!(ch.may_log_in(USER, &pending) && !ch.may_log_in(USER, &old));
}
