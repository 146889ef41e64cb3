//! Copies of a tenant's credentials in its applications' namespaces, the provisioner's side against
//! the in-memory API: a copy is written where the namespace consented, reported where it did not,
//! follows a rotation, and is deleted once no longer asked for. The apiserver's answer to "may I
//! write Secrets there?" (a SelfSubjectAccessReview) is played by an intercept as RBAC gives it after
//! `grant-credentials`: the verbs of `manifests/credentials.yaml` on Secrets in consenting
//! namespaces, nothing elsewhere. The cluster tier proves the same on the real control plane, with
//! the real RoleBindings (`tests/tests/cluster/copies.rs`).

use std::collections::{BTreeMap, BTreeSet};

use http::Method;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use sentry_tenants::crd::{CopyState, CopyStatus, RunAction};
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::ProvisionError;
use sentry_tenants_tests::clickhouse_seam::RecordingClickHouse;
use sentry_tenants_tests::{Cluster, NS, Recorded, app_copy_of, secret_data, status_body};
use serde_json::{Value, json};

const MODERN: &str = "24.8.4.13";
/// What the provisioner's ClusterRole grants in a namespace that consented.
const GRANTED: [&str; 5] = ["get", "create", "update", "patch", "delete"];

/// Answers every SelfSubjectAccessReview as RBAC would with `consenting` namespaces bound.
fn consent_in(c: &Cluster, consenting: &[&str]) {
    consent_in_refusing_writes(c, consenting, None);
}

/// [`consent_in`], and the copy's create (POST) or delete (DELETE) in `app` refused with
/// `refusal`'s code and reason, as an apiserver whose RBAC changed after the review (403) or that
/// failed (500) answers.
fn consent_in_refusing_writes(
    c: &Cluster,
    consenting: &[&str],
    refusal: Option<(Method, u16, &'static str)>,
) {
    let consenting: BTreeSet<String> = consenting.iter().map(|n| n.to_string()).collect();
    c.intercept.set(move |method, path, _, review| {
        if let Some((refused, code, reason)) = &refusal
            && method == refused
            && path.contains("/namespaces/app/secrets")
        {
            let (code, reason) = (*code, *reason);
            return Some((code, status_body(code, reason, "refused by the test")));
        }
        if *method != Method::POST || !path.ends_with("/selfsubjectaccessreviews") {
            return None;
        }
        let asked = &review["spec"]["resourceAttributes"];
        let field = |name: &str| asked[name].as_str().unwrap_or_default();
        let allowed = field("group").is_empty()
            && field("resource") == "secrets"
            && consenting.contains(field("namespace"))
            && GRANTED.contains(&field("verb"));
        let mut answer = review.clone();
        answer["status"] = json!({ "allowed": allowed });
        Some((201, answer))
    });
}

fn acme() -> TenantName {
    TenantName::parse("acme").unwrap()
}

async fn asking_for_copies_in(c: &Cluster, namespaces: &[&str]) {
    let copies: Vec<_> = namespaces.iter().map(|ns| (*ns, "acme-db")).collect();
    asking_for_copies(c, &copies).await;
}

/// `acme`'s spec asking for a copy at each (namespace, Secret name).
async fn asking_for_copies(c: &Cluster, copies: &[(&str, &str)]) {
    let copies: Vec<Value> = copies
        .iter()
        .map(|(ns, name)| json!({"namespace": ns, "secretName": name, "labels": {"example.com/team": "payments"}}))
        .collect();
    c.patch_spec("acme", json!({"credentials": {"copies": copies}}))
        .await;
}

async fn secret_in(c: &Cluster, namespace: &str, name: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(c.admin.clone(), namespace)
        .get_opt(name)
        .await
        .unwrap()
}

/// What a copy must hold: the application's keys of the credentials Secret, nothing else of it.
async fn expected_copy(c: &Cluster) -> BTreeMap<String, Vec<u8>> {
    app_copy_of(&secret_in(c, NS, "acme-clickhouse").await.unwrap())
}

/// `acme` provisioned with a copy asked for in `app`, which consented.
async fn provisioned_with_a_copy_in_app() -> (Cluster, RecordingClickHouse) {
    let (c, ch) = provisioned_asking_for_a_copy_in_app(None).await;
    assert!(secret_in(&c, "app", "acme-db").await.is_some());
    (c, ch)
}

/// `acme` provisioned asking for a copy in `app`, which consented; its write refused as
/// [`consent_in_refusing_writes`] says.
async fn provisioned_asking_for_a_copy_in_app(
    refusal: Option<(Method, u16, &'static str)>,
) -> (Cluster, RecordingClickHouse) {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    consent_in_refusing_writes(&c, &["app"], refusal);
    c.create_tenant("acme").await;
    asking_for_copies_in(&c, &["app"]).await;
    c.provisioner(&ch, false)
        .run(&acme(), RunAction::Provision)
        .await
        .unwrap();
    (c, ch)
}

/// The API writes of one provisioner run of `action` on `acme`, which must succeed.
async fn writes_of(c: &Cluster, ch: &RecordingClickHouse, action: RunAction) -> Vec<Recorded> {
    let p = c.provisioner(ch, false);
    let (outcome, writes) = c.log.writes_during(p.run(&acme(), action)).await;
    outcome.unwrap();
    writes
}

async fn reported_copies(c: &Cluster) -> Vec<CopyStatus> {
    let t = c.tenant("acme").await;
    t.status.unwrap().credentials.unwrap().copies
}

#[tokio::test]
async fn a_copy_is_written_only_where_its_namespace_consented_and_each_is_reported() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    consent_in(&c, &["app"]);
    c.create_tenant("acme").await;
    asking_for_copies_in(&c, &["app", "other"]).await;

    let writes = writes_of(&c, &ch, RunAction::Provision).await;
    let created: Vec<_> = writes
        .iter()
        .filter(|w| w.method == Method::POST && w.path.ends_with("/namespaces/app/secrets"))
        .map(|w| {
            w.query
                .split('&')
                .filter(|kv| !kv.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(created, [["fieldManager=sentry-tenants-provisioner"]]);

    let copy = secret_in(&c, "app", "acme-db").await.expect("the copy");
    assert_eq!(secret_data(&copy), expected_copy(&c).await);
    assert_eq!(copy.labels()["example.com/team"], "payments");
    assert_eq!(
        copy.labels()["sentry.io/tenant-uid"],
        c.tenant("acme").await.metadata.uid.unwrap()
    );
    assert!(secret_in(&c, "other", "acme-db").await.is_none());
    let into_other: Vec<_> = writes
        .iter()
        .filter(|w| w.path.contains("/namespaces/other/"))
        .collect();
    assert!(into_other.is_empty(), "{into_other:?}");

    let copies = reported_copies(&c).await;
    let states: Vec<_> = copies
        .iter()
        .map(|s| (s.namespace.as_str(), s.state))
        .collect();
    assert_eq!(
        states,
        [
            ("app", CopyState::Delivered),
            ("other", CopyState::NoConsent)
        ]
    );
    assert!(copies[0].credentials_hash.is_some());
    assert_eq!(copies[1].credentials_hash, None);
    assert!(
        copies[1]
            .message
            .contains("sentry-tenants grant-credentials other"),
        "{}",
        copies[1].message
    );
}

#[tokio::test]
async fn a_rotation_rewrites_the_copy_in_the_same_run() {
    let (c, ch) = provisioned_with_a_copy_in_app().await;
    let p = c.provisioner(&ch, false);
    let before = secret_data(&secret_in(&c, "app", "acme-db").await.unwrap());

    p.run(&acme(), RunAction::Rotate).await.unwrap();
    let after = secret_data(&secret_in(&c, "app", "acme-db").await.unwrap());
    assert_ne!(after["password"], before["password"]);
    assert_eq!(after, expected_copy(&c).await);
}

#[tokio::test]
async fn a_copy_no_longer_asked_for_is_deleted_and_leaves_the_report() {
    let (c, ch) = provisioned_with_a_copy_in_app().await;
    let p = c.provisioner(&ch, false);

    asking_for_copies_in(&c, &[]).await;
    p.run(&acme(), RunAction::Deliver).await.unwrap();
    assert!(secret_in(&c, "app", "acme-db").await.is_none());
    let left = reported_copies(&c).await;
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_copy_that_already_holds_the_credentials_is_not_written_again() {
    let (c, ch) = provisioned_with_a_copy_in_app().await;
    let writes = writes_of(&c, &ch, RunAction::Deliver).await;
    let into_app: Vec<_> = writes
        .iter()
        .filter(|w| w.path.contains("/namespaces/app/"))
        .map(|w| format!("{} {}", w.method, w.path))
        .collect();
    assert!(into_app.is_empty(), "{into_app:?}");
    assert_eq!(reported_copies(&c).await[0].state, CopyState::Delivered);
}

#[tokio::test]
async fn a_secret_of_the_copys_name_not_made_for_the_tenant_is_never_written_or_deleted() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    consent_in(&c, &["app"]);
    let theirs = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("acme-db".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "password".to_owned(),
            k8s_openapi::ByteString(b"the app's own".to_vec()),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(c.admin.clone(), "app")
        .create(&Default::default(), &theirs)
        .await
        .unwrap();
    let before = secret_data(&secret_in(&c, "app", "acme-db").await.unwrap());
    assert_eq!(before["password"], b"the app's own");
    c.create_tenant("acme").await;
    asking_for_copies_in(&c, &["app"]).await;
    let p = c.provisioner(&ch, false);
    p.run(&acme(), RunAction::Provision).await.unwrap();

    let copies = reported_copies(&c).await;
    assert_eq!(copies[0].state, CopyState::Conflict);
    assert!(
        copies[0]
            .message
            .contains("is not a copy of this tenant's credentials"),
        "{}",
        copies[0].message
    );
    assert_eq!(
        secret_data(&secret_in(&c, "app", "acme-db").await.unwrap()),
        before
    );

    // No longer asked for: the Secret is still not the tenant's to delete.
    asking_for_copies_in(&c, &[]).await;
    p.run(&acme(), RunAction::Deliver).await.unwrap();
    let left = secret_in(&c, "app", "acme-db").await.expect("left alone");
    assert_eq!(secret_data(&left), before);
}

#[tokio::test]
async fn a_copy_whose_labels_or_annotations_changed_is_rewritten() {
    let (c, ch) = provisioned_with_a_copy_in_app().await;
    let p = c.provisioner(&ch, false);
    c.patch_spec(
        "acme",
        json!({"credentials": {"copies": [{"namespace": "app", "secretName": "acme-db",
            "labels": {"example.com/team": "billing"}}]}}),
    )
    .await;
    p.run(&acme(), RunAction::Deliver).await.unwrap();
    let copy = secret_in(&c, "app", "acme-db").await.unwrap();
    assert_eq!(copy.labels()["example.com/team"], "billing");

    c.patch_spec(
        "acme",
        json!({"credentials": {"copies": [{"namespace": "app", "secretName": "acme-db",
            "labels": {"example.com/team": "billing"},
            "annotations": {"example.com/reload": "true"}}]}}),
    )
    .await;
    p.run(&acme(), RunAction::Deliver).await.unwrap();
    let copy = secret_in(&c, "app", "acme-db").await.unwrap();
    assert_eq!(copy.annotations()["example.com/reload"], "true");
    assert_eq!(secret_data(&copy), expected_copy(&c).await);
}

#[tokio::test]
async fn a_write_refused_after_consent_is_reported_as_no_consent_and_any_other_failure_as_failed() {
    for ((code, reason), state, says) in [
        (
            (403, "Forbidden"),
            CopyState::NoConsent,
            "sentry-tenants grant-credentials app",
        ),
        (
            (500, "InternalError"),
            CopyState::Failed,
            "write Secret app/acme-db",
        ),
    ] {
        let (c, _) = provisioned_asking_for_a_copy_in_app(Some((Method::POST, code, reason))).await;
        let copies = reported_copies(&c).await;
        assert_eq!(copies[0].state, state, "{code}");
        assert!(
            copies[0].message.contains(says),
            "{code}: {}",
            copies[0].message
        );
        assert!(secret_in(&c, "app", "acme-db").await.is_none());
    }
}

#[tokio::test]
async fn a_copy_no_longer_asked_for_that_cannot_be_deleted_stays_reported_with_why_and_when() {
    let (c, ch) = provisioned_with_a_copy_in_app().await;
    let delivered_at = reported_copies(&c).await[0].at.clone();
    // The namespace's consent withdrawn (its RoleBinding deleted), then the copy no longer asked for.
    consent_in(&c, &[]);
    asking_for_copies_in(&c, &[]).await;
    c.clock.advance(jiff::SignedDuration::from_secs(60));
    let failed = c
        .provisioner(&ch, false)
        .run(&acme(), RunAction::Deliver)
        .await;
    // The run fails (a copy it was to settle is not), and reports why.
    assert!(
        matches!(&failed, Err(ProvisionError::CopiesUndelivered { detail })
            if detail.starts_with("app/acme-db: no longer asked for")),
        "{failed:?}"
    );

    assert!(secret_in(&c, "app", "acme-db").await.is_some());
    let left = reported_copies(&c).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].state, CopyState::NoConsent);
    assert!(
        left[0]
            .message
            .starts_with("no longer asked for, not deleted yet: ")
            && left[0]
                .message
                .contains("sentry-tenants grant-credentials app"),
        "{}",
        left[0].message
    );
    assert_eq!(
        left[0].at.0,
        delivered_at.0 + jiff::SignedDuration::from_secs(60)
    );
}

#[tokio::test]
async fn a_delete_refused_after_consent_is_reported_as_no_consent_and_any_other_failure_as_failed()
{
    for ((code, reason), state, says) in [
        (
            (403, "Forbidden"),
            CopyState::NoConsent,
            "sentry-tenants grant-credentials app",
        ),
        (
            (500, "InternalError"),
            CopyState::Failed,
            "delete Secret app/acme-db",
        ),
    ] {
        let (c, ch) = provisioned_with_a_copy_in_app().await;
        consent_in_refusing_writes(&c, &["app"], Some((Method::DELETE, code, reason)));
        asking_for_copies_in(&c, &[]).await;
        let failed = c
            .provisioner(&ch, false)
            .run(&acme(), RunAction::Deliver)
            .await;
        assert!(failed.is_err(), "{code}: the copy was not settled");
        let left = reported_copies(&c).await;
        assert_eq!(left[0].state, state, "{code}");
        assert!(
            left[0].message.contains(says),
            "{code}: {}",
            left[0].message
        );
        assert!(secret_in(&c, "app", "acme-db").await.is_some());
    }
}

#[tokio::test]
async fn a_copys_delete_names_the_uid_it_looked_at_so_a_secret_made_since_is_not_deleted() {
    let (c, ch) = provisioned_with_a_copy_in_app().await;
    let uid = secret_in(&c, "app", "acme-db")
        .await
        .unwrap()
        .uid()
        .unwrap();
    asking_for_copies_in(&c, &[]).await;
    let writes = writes_of(&c, &ch, RunAction::Deliver).await;
    let deletes: Vec<_> = writes
        .iter()
        .filter(|w| w.method == Method::DELETE)
        .map(|w| (w.path.as_str(), &w.body["preconditions"]))
        .collect();
    assert_eq!(
        deletes,
        [(
            "/api/v1/namespaces/app/secrets/acme-db",
            &json!({"uid": uid})
        )]
    );
}

#[tokio::test]
async fn a_copy_gone_or_replaced_before_its_delete_counts_as_deleted() {
    // 404: deleted by someone else since it was read; 409: its uid precondition failed, the Secret
    // of that name is another one now (not ours to delete).
    for (code, reason) in [(404, "NotFound"), (409, "Conflict")] {
        let (c, ch) = provisioned_with_a_copy_in_app().await;
        consent_in_refusing_writes(&c, &["app"], Some((Method::DELETE, code, reason)));
        asking_for_copies_in(&c, &[]).await;
        c.provisioner(&ch, false)
            .run(&acme(), RunAction::Deliver)
            .await
            .unwrap_or_else(|e| panic!("{code}: {e:?}"));
        let left = reported_copies(&c).await;
        assert!(left.is_empty(), "{code}: {left:?}");
    }
}

#[tokio::test]
async fn a_copy_moved_to_another_name_or_namespace_leaves_nothing_at_the_old_place() {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    consent_in(&c, &["app", "web"]);
    c.create_tenant("acme").await;
    let p = c.provisioner(&ch, false);
    let moves = [
        ("app", "acme-db"),
        ("app", "acme-clickhouse"), // same namespace, another name
        ("web", "acme-clickhouse"), // same name, another namespace
    ];
    asking_for_copies(&c, &moves[..1]).await;
    p.run(&acme(), RunAction::Provision).await.unwrap();
    for pair in moves.windows(2) {
        let ((from_ns, from), (to_ns, to)) = (pair[0], pair[1]);
        asking_for_copies(&c, &[(to_ns, to)]).await;
        p.run(&acme(), RunAction::Deliver).await.unwrap();
        assert!(
            secret_in(&c, from_ns, from).await.is_none(),
            "{from_ns}/{from} left behind"
        );
        let moved = secret_in(&c, to_ns, to).await.expect("the moved copy");
        assert_eq!(secret_data(&moved), expected_copy(&c).await);
        let reported: Vec<_> = reported_copies(&c)
            .await
            .into_iter()
            .map(|s| (s.namespace, s.secret_name, s.state))
            .collect();
        assert_eq!(
            reported,
            [(to_ns.to_owned(), to.to_owned(), CopyState::Delivered)]
        );
    }
}

#[tokio::test]
async fn a_deleted_tenants_copies_go_with_it_and_one_that_cannot_is_named() {
    let withdrawn: &[&str] = &[];
    for (consenting, gone) in [(&["app"][..], true), (withdrawn, false)] {
        let (c, ch) = provisioned_with_a_copy_in_app().await;
        c.settle().await; // the finalizer on
        consent_in(&c, consenting);
        c.tenants()
            .delete("acme", &Default::default())
            .await
            .unwrap();
        let outcome = c
            .provisioner(&ch, false)
            .run(&acme(), RunAction::Deprovision)
            .await
            .unwrap();
        let said = outcome.describe();
        let left = "the copy app/acme-db was left: namespace app has not consented to copies";
        assert_eq!(said.contains(left), !gone, "{consenting:?}: {said}");
        assert_eq!(
            secret_in(&c, "app", "acme-db").await.is_none(),
            gone,
            "{consenting:?}"
        );
    }
}

#[tokio::test]
async fn an_unchanged_copy_keeps_the_time_it_was_first_reported_beside_others_of_its_namespace_or_name()
 {
    let c = Cluster::new().await;
    let ch = RecordingClickHouse::new(MODERN);
    consent_in(&c, &["app", "web"]);
    c.create_tenant("acme").await;
    // Each of the later ones shares its namespace or its name with the first.
    asking_for_copies(
        &c,
        &[("app", "acme-db"), ("app", "acme-x"), ("web", "acme-db")],
    )
    .await;
    let p = c.provisioner(&ch, false);
    p.run(&acme(), RunAction::Provision).await.unwrap();
    let first = reported_copies(&c).await;
    assert_eq!(first.len(), 3, "{first:?}");

    c.clock.advance(jiff::SignedDuration::from_secs(60));
    p.run(&acme(), RunAction::Deliver).await.unwrap();
    let again = reported_copies(&c).await;
    let places_and_times = |copies: &[CopyStatus]| {
        copies
            .iter()
            .map(|s| (s.namespace.clone(), s.secret_name.clone(), s.at.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(places_and_times(&again), places_and_times(&first));
}
