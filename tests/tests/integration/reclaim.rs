//! Deleting a tenant, against the in-memory API: the reclaim finalizer on every live tenant, released
//! at once when nothing touched ClickHouse, else only after a Deprovision run succeeded (after any
//! run in flight, retried with backoff, the reason on the `Reclaimed` condition); and the
//! provisioner's side of both policies, with the recording ClickHouse seam.

use std::collections::BTreeSet;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use sentry_tenants::crd::{ReclaimPolicy, RunAction, TENANT_FINALIZER, Tenant, TenantPhase};
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::{PASSWORD_KEY, ProvisionError, Provisioner, RETAINED_FOR};
use sentry_tenants_tests::clickhouse_seam::RecordingClickHouse;
use sentry_tenants_tests::{Cluster, NS, requeue_secs};
use serde_json::json;

const MODERN: &str = "24.8.4.13";
const USER: &str = "tenant_acme_user";
const DATABASE: &str = "tenant_acme";

fn condition(t: &Tenant, type_: &str) -> Option<(String, String, String)> {
    let c = t
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn delete_tenant(c: &Cluster, name: &str) {
    c.tenants()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

async fn gone(c: &Cluster, name: &str) -> bool {
    c.tenants().get_opt(name).await.unwrap().is_none()
}

/// A tenant the provisioner reported provisioned (no real run: the rule tests play the provisioner).
async fn provisioned(c: &Cluster, name: &str) {
    c.create_tenant(name).await;
    c.report_provisioned(name).await;
    c.settle().await;
    assert_eq!(c.tenant(name).await.phase(), Some(TenantPhase::Active));
}

#[tokio::test]
async fn every_live_tenant_carries_the_finalizer_and_keeps_its_generation() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    let t = c.tenant("acme").await;
    assert_eq!(t.finalizers(), [TENANT_FINALIZER]);
    assert_eq!(
        t.metadata.generation,
        Some(1),
        "a metadata change is no new spec"
    );
    let writes = c.log.writes().len();
    c.settle().await;
    assert_eq!(c.log.writes().len(), writes, "added once");
}

#[tokio::test]
async fn a_tenant_nothing_touched_clickhouse_for_is_released_at_once() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.settle().await;
    delete_tenant(&c, "acme").await;
    c.settle().await;
    assert!(gone(&c, "acme").await);
    assert_eq!(c.log.creates_of("runjobs"), 0, "no Deprovision run");
}

#[tokio::test]
async fn a_provisioned_tenant_goes_only_after_its_deprovision_run_succeeded() {
    let c = Cluster::new().await;
    provisioned(&c, "acme").await;
    delete_tenant(&c, "acme").await;
    for _ in 0..3 {
        c.settle().await;
    }
    let t = c.tenant("acme").await;
    assert_eq!(t.phase(), Some(TenantPhase::Terminating));
    let runs = c.runs_of(RunAction::Deprovision).await;
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    let run = &runs[0];
    assert_eq!(run.name_any(), "acme-deprovision-10");
    assert!(
        run.owner_references().is_empty(),
        "not owned: a foreground deletion must not take it"
    );
    assert_eq!(
        run.labels().get("sentry.io/tenant-uid"),
        t.metadata.uid.as_ref()
    );
    assert_eq!(
        condition(&t, "Reclaimed"),
        Some((
            "False".into(),
            "Deprovisioning".into(),
            "Deprovision run acme-deprovision-10 is carrying out reclaimPolicy Retain".into()
        ))
    );
    c.job_running("acme-deprovision-10").await;
    c.settle().await;
    assert!(!gone(&c, "acme").await, "held while the run runs");
    c.job_succeeded("acme-deprovision-10").await;
    c.settle().await;
    assert!(gone(&c, "acme").await);
    // The run stays for its TTL, then goes like any other.
    assert!(c.run("acme-deprovision-10").await.is_some());
    c.clock.advance(SignedDuration::from_secs(301));
    c.settle().await;
    assert!(c.run("acme-deprovision-10").await.is_none());
}

/// The finalizer's write answered 409 (this copy of the tenant is out of date; a newer one is on its
/// way): no run is made yet — a deletion meanwhile would leave the run's work in ClickHouse behind —
/// and the reconcile succeeds; any other refusal fails it, to be retried; once written, the run comes.
#[tokio::test]
async fn no_run_is_made_before_the_finalizer_is_on() {
    let c = Cluster::new().await;
    c.create_tenant_with("acme", sentry_tenants::crd::ProvisioningPolicy::Automatic)
        .await;
    c.intercept.answer_status(
        http::Method::PATCH,
        "/tenants/acme",
        409,
        "Conflict",
        "Operation cannot be fulfilled on tenants.sentry.io \"acme\": the object has been modified",
    );
    c.reconcile_tenant("acme").await;
    assert!(c.runs_of(RunAction::Provision).await.is_empty());
    c.intercept.refuse(http::Method::PATCH, "/tenants/acme");
    assert!(c.try_reconcile_tenant("acme").await.is_err());
    assert!(c.runs_of(RunAction::Provision).await.is_empty());
    c.intercept.clear();
    c.reconcile_tenant("acme").await;
    assert_eq!(c.tenant("acme").await.finalizers(), [TENANT_FINALIZER]);
    assert_eq!(c.runs_of(RunAction::Provision).await.len(), 1);
}

/// A Manual tenant "acme" whose Provision run acme-provision-1 has its pod running.
async fn with_a_running_provision_run() -> Cluster {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    c.settle().await;
    c.job_running("acme-provision-1").await;
    c.settle().await;
    c
}

#[tokio::test]
async fn a_run_in_flight_finishes_before_the_deprovision_run_starts() {
    let c = with_a_running_provision_run().await;
    delete_tenant(&c, "acme").await;
    c.settle().await;
    let t = c.tenant("acme").await;
    assert_eq!(
        condition(&t, "Reclaimed").map(|(_, reason, _)| reason),
        Some("WaitingForRun".into())
    );
    assert!(c.runs_of(RunAction::Deprovision).await.is_empty());
    assert_eq!(
        c.run("acme-provision-1").await.unwrap().phase(),
        Some(sentry_tenants::crd::RunPhase::Running),
        "a started run follows its Job, whatever happened to the tenant"
    );
    // It fails (the provisioner refuses a tenant being deleted, or ClickHouse did): the user may
    // exist, so the Deprovision run still comes.
    c.job_failed(
        "acme-provision-1",
        "BackoffLimitExceeded",
        "tenant is being deleted",
    )
    .await;
    c.settle().await;
    assert_eq!(c.runs_of(RunAction::Deprovision).await.len(), 1);
}

/// A run deleted before it finished (here by the garbage collector's cascade, as a Foreground
/// deletion of the tenant does, or by hand) may still have its pod changing ClickHouse: the
/// Deprovision run waits until the run is gone, which it is only once its Job's pods are.
#[tokio::test]
async fn a_run_deleted_before_it_finished_holds_the_deprovision_run_until_its_pod_is_gone() {
    let c = with_a_running_provision_run().await;
    c.hold_job_deletion_for_its_pods("acme-provision-1").await;
    c.runjobs()
        .delete("acme-provision-1", &DeleteParams::default())
        .await
        .unwrap();
    delete_tenant(&c, "acme").await;
    c.settle().await;
    let (_, reason, message) = condition(&c.tenant("acme").await, "Reclaimed").unwrap();
    assert_eq!(reason, "WaitingForRun");
    assert!(
        message.starts_with("Run acme-provision-1 has not finished"),
        "{message}"
    );
    assert!(c.runs_of(RunAction::Deprovision).await.is_empty());
    assert!(
        c.run("acme-provision-1").await.is_some(),
        "its pod is not gone yet"
    );

    c.job_pods_gone("acme-provision-1").await;
    c.settle().await;
    assert!(c.run("acme-provision-1").await.is_none());
    // Its pod may have created the user before it was stopped: the tenant keeps it as failed, and the
    // Deprovision run comes as for any Provision run that failed.
    let t = c.tenant("acme").await;
    let recorded = &t.history()[0];
    assert_eq!(
        (
            recorded.name.as_str(),
            recorded.phase,
            recorded.message.as_str()
        ),
        (
            "acme-provision-1",
            sentry_tenants::crd::RunPhase::Failed,
            "Run failed: deleted before it finished; its pod was stopped"
        )
    );
    assert_eq!(c.runs_of(RunAction::Deprovision).await.len(), 1);
}

/// A finished run deleted before rule 6 cleaned it up (here by the garbage collector's cascade, as a
/// Foreground deletion of the tenant does) leaves its outcome in the tenant's history: a Provision run
/// that failed may have created the user, so the Deprovision run comes for it. Before, the run went
/// without a record and the tenant — never provisioned, no run left — was released at once.
#[tokio::test]
async fn a_failed_provision_run_deleted_with_its_tenant_still_brings_the_deprovision_run() {
    let c = with_a_running_provision_run().await;
    c.job_failed("acme-provision-1", "BackoffLimitExceeded", "grants refused")
        .await;
    c.settle().await;
    assert!(
        c.tenant("acme").await.history().is_empty(),
        "not cleaned up yet"
    );
    delete_tenant(&c, "acme").await;
    c.runjobs()
        .delete("acme-provision-1", &DeleteParams::default())
        .await
        .unwrap();
    c.settle().await;
    assert!(c.run("acme-provision-1").await.is_none());
    let t = c.tenant("acme").await;
    let recorded = &t.history()[0];
    assert_eq!(
        (recorded.name.as_str(), recorded.phase),
        ("acme-provision-1", sentry_tenants::crd::RunPhase::Failed)
    );
    assert_eq!(c.runs_of(RunAction::Deprovision).await.len(), 1);
}

/// A failing Deprovision run is retried with a growing delay for as long as it fails (six attempts
/// here, more than the four there used to be), its condition naming the next attempt and the escape
/// hatch; removing the finalizer by hand still lets the tenant go.
#[tokio::test]
async fn a_failing_deprovision_is_retried_without_end_and_the_escape_hatch_is_named() {
    let c = Cluster::new().await;
    provisioned(&c, "acme").await;
    delete_tenant(&c, "acme").await;
    c.settle().await;
    for attempt in 2u64..=6 {
        let run = format!("acme-deprovision-{}", 8 + attempt);
        c.job_failed(&run, "BackoffLimitExceeded", "ClickHouse unreachable")
            .await;
        c.settle().await;
        let (_, reason, message) = condition(&c.tenant("acme").await, "Reclaimed").unwrap();
        assert_eq!(reason, "DeprovisionRetrying");
        assert!(
            message.starts_with(&format!(
                "Deprovision run {run} failed: Job failed (BackoffLimitExceeded): ClickHouse unreachable. Attempt {attempt} starts at"
            )) && message.contains("remove the finalizer sentry.io/tenant-reclaim"),
            "{message}"
        );
        assert_eq!(c.log.creates_of("runjobs") as u64, attempt - 1, "waits");
        // ... and asks to be woken when the attempt is due: 15 s doubling, the upper half jittered.
        let step = f64::from(15 * (1 << (attempt - 2)));
        let wake = requeue_secs(&c.reconcile_tenant("acme").await).expect("a wake-up");
        assert!(
            (step / 2.0..=step).contains(&wake),
            "attempt {attempt}: {wake} s is outside [{}, {step}]",
            step / 2.0
        );
        c.clock.advance(SignedDuration::from_secs(301));
        c.settle().await;
        assert_eq!(c.log.creates_of("runjobs") as u64, attempt);
    }
    assert!(!gone(&c, "acme").await);
    // The escape hatch: removing the finalizer by hand lets it go.
    c.remove_finalizers("acme").await;
    c.settle().await;
    assert!(gone(&c, "acme").await);
}

#[tokio::test]
async fn a_new_tenant_of_the_same_name_takes_nothing_from_the_old_ones_runs() {
    let c = Cluster::new().await;
    provisioned(&c, "acme").await;
    delete_tenant(&c, "acme").await;
    c.settle().await;
    c.job_succeeded("acme-deprovision-10").await;
    c.settle().await;
    assert!(gone(&c, "acme").await);
    // Re-created while the old Deprovision run waits for its TTL.
    provisioned(&c, "acme").await;
    let t = c.tenant("acme").await;
    assert!(t.history().is_empty(), "{:?}", t.history());
    delete_tenant(&c, "acme").await;
    c.settle().await;
    let mut names: Vec<String> = c
        .runs_of(RunAction::Deprovision)
        .await
        .iter()
        .map(|r| r.name_any())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["acme-deprovision-10", "acme-deprovision-11"],
        "the old run is not taken for this tenant's"
    );
    assert!(
        !gone(&c, "acme").await,
        "the old run's success releases nothing"
    );
    c.job_succeeded("acme-deprovision-11").await;
    c.settle().await;
    assert!(gone(&c, "acme").await);
}

fn provisioner(c: &Cluster, ch: &RecordingClickHouse) -> Provisioner<RecordingClickHouse> {
    c.provisioner(ch, false)
}

fn acme() -> TenantName {
    TenantName::parse("acme").unwrap()
}

async fn secret(c: &Cluster) -> Option<Secret> {
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .get_opt("acme-clickhouse")
        .await
        .unwrap()
}

fn password_of(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()[PASSWORD_KEY].0.clone()
}

/// A tenant provisioned by the real provisioner, then deleted (held by its finalizer).
async fn provisioned_then_deleted(c: &Cluster, ch: &RecordingClickHouse, policy: ReclaimPolicy) {
    c.create_tenant("acme").await;
    c.patch_spec("acme", json!({"reclaimPolicy": policy.as_str()}))
        .await;
    c.settle().await;
    provisioner(c, ch)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    delete_tenant(c, "acme").await;
}

#[tokio::test]
async fn retain_locks_the_user_keeps_the_rest_and_a_new_tenant_adopts_it_with_the_same_password() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioned_then_deleted(&c, &ch, ReclaimPolicy::Retain).await;
    let before = password_of(&secret(&c).await.unwrap());
    ch.clear();
    let outcome = provisioner(&c, &ch)
        .run(&acme(), RunAction::Deprovision)
        .await
        .unwrap();
    assert!(
        outcome
            .describe()
            .starts_with("retained database tenant_acme")
    );
    assert_eq!(ch.ddl(), ["ALTER USER `tenant_acme_user` HOST NONE"]);
    assert_eq!(ch.is_locked(USER), Some(true));
    assert!(ch.has_user(USER) && ch.has_database(DATABASE));
    let kept = secret(&c).await.unwrap();
    assert!(kept.owner_references().is_empty(), "{:?}", kept.metadata);
    assert_eq!(
        kept.labels().get(RETAINED_FOR).map(String::as_str),
        Some("acme")
    );
    // Idempotent: a second run finds it all done.
    provisioner(&c, &ch)
        .run(&acme(), RunAction::Deprovision)
        .await
        .unwrap();

    // The tenant goes; a new one of the same name adopts what was retained. An earlier tenant of the
    // name left its mark too (its adopter's run was cut short before it dropped it).
    c.remove_finalizers("acme").await;
    assert!(gone(&c, "acme").await);
    let earlier = format!("sentry-tenants/{NS}/acme/00000000-0000-4000-8000-000000000001");
    for sql in [
        format!("CREATE ROLE IF NOT EXISTS `{earlier}`"),
        format!("GRANT `{earlier}` TO `{USER}`"),
        format!("GRANT SHOW TABLES ON `{DATABASE}`.* TO `{earlier}`"),
    ] {
        ch.run_by_hand(&sql);
    }
    let new = c.create_tenant("acme").await;
    ch.clear();
    let outcome = provisioner(&c, &ch)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    assert!(
        outcome
            .describe()
            .contains("by adopting the user and credentials Secret"),
        "{}",
        outcome.describe()
    );
    let adopted = secret(&c).await.unwrap();
    assert_eq!(password_of(&adopted), before, "byte-identical password");
    assert_eq!(
        adopted.owner_references()[0].uid,
        new.metadata.uid.clone().unwrap(),
        "owned by the new tenant"
    );
    assert!(!adopted.labels().contains_key(RETAINED_FOR));
    assert_eq!(ch.password_changes(), 0, "never a rotation");
    assert_eq!(ch.is_locked(USER), Some(false), "logins allowed again");
    let password = String::from_utf8(before).unwrap();
    assert!(ch.may_log_in(USER, &password));
    // The deleted tenants' owner marks gone with them, each dropped once: what was retained is the
    // new tenant's alone.
    let role_drops = ch.ddl().into_iter().filter(|s| s.starts_with("DROP ROLE"));
    assert_eq!(role_drops.count(), 2, "{:?}", ch.ddl());
    let mark = format!("sentry-tenants/{NS}/acme/{}", new.metadata.uid.unwrap());
    let (roles, marks) = ch.model(|m| (m.roles.clone(), m.role_grants[USER].clone()));
    assert_eq!(roles, BTreeSet::from([mark.clone()]));
    assert_eq!(marks, BTreeSet::from([mark]));
}

#[tokio::test]
async fn delete_drops_user_and_database_and_deletes_the_secret() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioned_then_deleted(&c, &ch, ReclaimPolicy::Delete).await;
    assert!(ch.has_user(USER) && ch.has_database(DATABASE));
    ch.clear();
    for _ in 0..2 {
        let outcome = provisioner(&c, &ch)
            .run(&acme(), RunAction::Deprovision)
            .await
            .unwrap();
        assert_eq!(
            outcome.describe(),
            "dropped database tenant_acme and its user, deleted its credentials Secret"
        );
    }
    let uid = c.tenant("acme").await.metadata.uid.unwrap();
    let drop_role = format!("DROP ROLE IF EXISTS `sentry-tenants/{NS}/acme/{uid}`");
    let drop_user = [
        "DROP USER IF EXISTS `tenant_acme_user`",
        "DROP SETTINGS PROFILE IF EXISTS `tenant_acme_profile`",
        "DROP QUOTA IF EXISTS `tenant_acme_quota`",
    ];
    // The re-run finds nothing of the tenant's left: the database is gone, and no longer named.
    assert_eq!(
        ch.ddl(),
        [
            &drop_user[..],
            &["DROP DATABASE IF EXISTS `tenant_acme`", &drop_role],
            &drop_user[..],
            &[&drop_role],
        ]
        .concat(),
        "idempotent"
    );
    assert!(!ch.has_user(USER) && !ch.has_database(DATABASE));
    assert!(secret(&c).await.is_none());
}

/// The user of the tenant's name was dropped and made again for another install's tenant (it carries
/// that tenant's owner mark) while the database stayed this tenant's: Delete drops the database and
/// leaves the user, saying so.
#[tokio::test]
async fn delete_leaves_a_user_of_the_name_that_is_now_anothers_and_drops_the_database() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioned_then_deleted(&c, &ch, ReclaimPolicy::Delete).await;
    let other = "sentry-tenants/other/acme/0f3e9c1a-5b7d-4e2a-9c8f-1d2e3f4a5b6c";
    for sql in [
        format!("DROP USER `{USER}`"),
        format!(
            "CREATE USER `{USER}` IDENTIFIED WITH sha256_hash BY '{}'",
            "ab".repeat(32)
        ),
        format!("CREATE ROLE IF NOT EXISTS `{other}`"),
        format!("GRANT `{other}` TO `{USER}`"),
    ] {
        ch.run_by_hand(&sql);
    }
    ch.clear();

    let outcome = provisioner(&c, &ch)
        .run(&acme(), RunAction::Deprovision)
        .await
        .unwrap();
    assert!(ch.has_user(USER), "{:?}", ch.ddl());
    assert!(!ch.has_database(DATABASE), "{:?}", ch.ddl());
    let user_dropped: Vec<_> = ch
        .ddl()
        .into_iter()
        .filter(|s| s.contains(USER) && s.starts_with("DROP"))
        .collect();
    assert!(user_dropped.is_empty(), "{user_dropped:?}");
    assert!(
        outcome.describe().contains("other/acme"),
        "the user's owner named: {}",
        outcome.describe()
    );
    assert!(secret(&c).await.is_none());
}

/// reclaimPolicy Delete deletes the Secret it read, by uid (a Secret made under the name meanwhile is
/// not it); one gone before its delete arrives counts as deleted; a delete the API refuses fails the run.
#[tokio::test]
async fn the_secret_read_is_the_one_deleted_and_only_a_refused_delete_fails_the_run() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioned_then_deleted(&c, &ch, ReclaimPolicy::Delete).await;
    let uid = secret(&c).await.unwrap().metadata.uid;
    assert!(uid.is_some());

    c.intercept
        .refuse(http::Method::DELETE, "/secrets/acme-clickhouse");
    let err = provisioner(&c, &ch)
        .run(&acme(), RunAction::Deprovision)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("delete secret acme-clickhouse")
            && err.to_string().contains("etcdserver: request timed out"),
        "{err}"
    );

    c.log.clear();
    c.intercept.answer_status(
        http::Method::DELETE,
        "/secrets/acme-clickhouse",
        404,
        "NotFound",
        "secrets \"acme-clickhouse\" not found",
    );
    let outcome = provisioner(&c, &ch)
        .run(&acme(), RunAction::Deprovision)
        .await
        .unwrap();
    assert_eq!(
        outcome.describe(),
        "dropped database tenant_acme and its user, deleted its credentials Secret"
    );
    let deletes: Vec<_> = c
        .log
        .writes()
        .into_iter()
        .filter(|w| w.method == http::Method::DELETE && w.resource() == "secrets")
        .collect();
    assert_eq!(deletes.len(), 1, "{deletes:#?}");
    assert_eq!(
        deletes[0].body["preconditions"]["uid"].as_str(),
        uid.as_deref(),
        "deleted on condition that it is still the Secret read"
    );
}

/// Every write of the provisioner names it as the field manager, so `managedFields` tells its fields
/// from the operator's and a person's: over a provision, a rotation, a rotation that makes the deleted
/// Secret again, a Retain and the adoption by a new tenant of the name.
#[tokio::test]
async fn every_write_of_the_provisioner_names_its_field_manager() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    let mut theirs = Vec::new();
    let run = async |action, theirs: &mut Vec<sentry_tenants_tests::Recorded>| {
        let (ran, writes) = c
            .log
            .writes_during(provisioner(&c, &ch).run(&acme(), action))
            .await;
        ran.unwrap();
        theirs.extend(writes);
    };
    c.create_tenant("acme").await;
    c.patch_spec("acme", json!({"reclaimPolicy": "Retain"}))
        .await;
    c.settle().await;
    run(RunAction::Provision, &mut theirs).await;
    run(RunAction::Rotate, &mut theirs).await;
    Api::<Secret>::namespaced(c.admin.clone(), NS)
        .delete("acme-clickhouse", &DeleteParams::default())
        .await
        .unwrap();
    run(RunAction::Rotate, &mut theirs).await;
    delete_tenant(&c, "acme").await;
    run(RunAction::Deprovision, &mut theirs).await;
    c.remove_finalizers("acme").await;
    assert!(gone(&c, "acme").await);
    c.create_tenant("acme").await;
    run(RunAction::Provision, &mut theirs).await;
    assert!(
        secret(&c)
            .await
            .unwrap()
            .labels()
            .get(RETAINED_FOR)
            .is_none(),
        "adopted"
    );

    let kinds: std::collections::BTreeSet<String> = theirs.iter().map(|w| w.kind()).collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            "create configmaps",
            "create secrets",
            "patch secrets",
            "patch tenants/status"
        ],
        "the writes this flow makes"
    );
    for w in &theirs {
        assert!(
            w.query
                .split('&')
                .any(|p| p == "fieldManager=sentry-tenants-provisioner"),
            "{} {} ?{}",
            w.method,
            w.path,
            w.query
        );
    }
}

#[tokio::test]
async fn deprovision_of_a_live_tenant_is_refused_and_changes_nothing() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    c.create_tenant("acme").await;
    provisioner(&c, &ch)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    ch.clear();
    let err = provisioner(&c, &ch)
        .run(&acme(), RunAction::Deprovision)
        .await
        .unwrap_err();
    assert!(matches!(err, ProvisionError::NotDeleting { .. }), "{err}");
    assert!(ch.statements().is_empty());
    assert!(
        secret(&c)
            .await
            .unwrap()
            .labels()
            .get(RETAINED_FOR)
            .is_none()
    );
}

#[tokio::test]
async fn every_other_action_on_a_tenant_being_deleted_is_refused_and_changes_nothing() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    provisioned_then_deleted(&c, &ch, ReclaimPolicy::Delete).await;
    let password = password_of(&secret(&c).await.unwrap());
    for action in RunAction::ALL
        .into_iter()
        .filter(|a| *a != RunAction::Deprovision)
    {
        ch.clear();
        let p = provisioner(&c, &ch);
        let (result, writes) = c.log.writes_during(p.run(&acme(), action)).await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProvisionError::TenantDeleting { .. }),
            "{action:?}: {err}"
        );
        assert!(
            ch.statements().is_empty(),
            "{action:?}: {:?}",
            ch.statements()
        );
        assert!(writes.is_empty(), "{action:?}: {writes:?}");
    }
    assert_eq!(password_of(&secret(&c).await.unwrap()), password);
}

#[tokio::test]
async fn a_secret_of_the_name_that_is_not_the_tenants_is_left_alone_by_either_policy() {
    for policy in ReclaimPolicy::ALL {
        let c = Cluster::new().await;
        let ch = RecordingClickHouse::new(MODERN);
        c.create_tenant("acme").await;
        c.patch_spec("acme", json!({"reclaimPolicy": policy.as_str()}))
            .await;
        let foreign: Secret = serde_json::from_value(json!({
            "metadata": {"name": "acme-clickhouse", "namespace": NS, "labels": {"team": "db"}},
            "stringData": {"password": "someone else's"}
        }))
        .unwrap();
        Api::<Secret>::namespaced(c.admin.clone(), NS)
            .create(&Default::default(), &foreign)
            .await
            .unwrap();
        c.settle().await;
        delete_tenant(&c, "acme").await;
        provisioner(&c, &ch)
            .run(&acme(), RunAction::Deprovision)
            .await
            .unwrap();
        let after = secret(&c).await.expect("still there");
        assert_eq!(after.labels().get("team").map(String::as_str), Some("db"));
        assert!(!after.labels().contains_key(RETAINED_FOR), "{policy:?}");
    }
}

/// Another install (namespace `other`) with a tenant `acme` sharing the ClickHouse server: its
/// Provisioner, on an API of its own, provisions it. Returns its password.
async fn other_install_provisions_acme(ch: &RecordingClickHouse) -> String {
    let other = Cluster::new().await;
    let tenant = Tenant::new("acme", Default::default());
    let tenants: Api<Tenant> = Api::namespaced(other.admin.clone(), "other");
    tenants.create(&Default::default(), &tenant).await.unwrap();
    let p = Provisioner {
        sync: sentry_tenants::provision::TenantSync::new(
            other.client.clone(),
            "other",
            "/var/lib/sentry/tantivy",
        ),
        ..other.provisioner(ch, false)
    };
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let secret = Api::<Secret>::namespaced(other.admin.clone(), "other")
        .get("acme-clickhouse")
        .await
        .unwrap();
    String::from_utf8(password_of(&secret)).unwrap()
}

/// The data-loss case of two installs sharing a ClickHouse: this install's `acme` is deleted with
/// either policy while the other install's `acme` owns `tenant_acme`. Before owner marks, Delete
/// dropped the other's user and database and Retain locked its user.
#[tokio::test]
async fn deprovision_leaves_another_installs_tenant_of_the_name_alone_under_either_policy() {
    for policy in ReclaimPolicy::ALL {
        let ch = RecordingClickHouse::new(MODERN);
        let theirs = other_install_provisions_acme(&ch).await;
        let c = Cluster::new().await;
        c.create_tenant("acme").await;
        c.patch_spec("acme", json!({"reclaimPolicy": policy.as_str()}))
            .await;
        c.settle().await; // the finalizer on
        // This install's acme cannot provision: the names are the other's.
        let err = provisioner(&c, &ch)
            .run(&acme(), RunAction::Provision)
            .await
            .unwrap_err();
        let owner = "belongs to Tenant other/acme (uid ";
        assert!(err.to_string().contains(owner), "{policy:?}: {err}");
        ch.clear();
        delete_tenant(&c, "acme").await;
        let outcome = provisioner(&c, &ch)
            .run(&acme(), RunAction::Deprovision)
            .await
            .unwrap();
        let said = outcome.describe();
        assert!(
            said.contains(&format!("ClickHouse user tenant_acme_user {owner}"))
                && said.contains(&format!("ClickHouse database tenant_acme {owner}")),
            "{policy:?}: {said}"
        );
        let own_role_only = ch
            .ddl()
            .iter()
            .all(|s| s.starts_with("DROP ROLE IF EXISTS `sentry-tenants/sentry-tenants/acme/"));
        assert!(own_role_only, "{policy:?}: {:#?}", ch.ddl());
        assert!(ch.has_database(DATABASE), "{policy:?}");
        assert!(
            ch.may_log_in(USER, &theirs),
            "{policy:?}: their login works"
        );
    }
}
