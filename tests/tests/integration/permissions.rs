//! Which buttons the dashboard's account sees: the in-memory API answers SelfSubjectAccessReviews and
//! SelfSubjectReviews as the apiserver does (the authorizer's verdict per verb, resource, group and
//! namespace; the user name from the authenticator), and the dashboard's reviews are read back.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use sentry_tenants::web::permissions::{Permissions, review, who_am_i};
use sentry_tenants_app::model::Allowed;
use sentry_tenants_tests::control_plane::wait_until;
use sentry_tenants_tests::{Cluster, NS, status_body};
use serde_json::{Value, json};
use tokio::sync::watch;

/// A review as asked: verb, resource, group, namespace.
type Asked = (String, String, String, String);

/// The `(verb, resource)` pairs of group `sentry.io` in [`NS`] the account is granted, as RBAC would
/// hold them; every review asked is recorded.
#[derive(Clone, Default)]
struct Authorizer {
    granted: Arc<Mutex<BTreeSet<(String, String)>>>,
    asked: Arc<Mutex<Vec<Asked>>>,
}

impl Authorizer {
    fn granting(c: &Cluster, grants: &[(&str, &str)]) -> Self {
        let authorizer = Self::default();
        for grant in grants {
            authorizer.grant(*grant);
        }
        let answering = authorizer.clone();
        c.intercept.set(move |method, path, _, body| {
            (*method == Method::POST && path.ends_with("/selfsubjectaccessreviews"))
                .then(|| (201, answering.answer(body)))
        });
        authorizer
    }

    fn grant(&self, (verb, resource): (&str, &str)) {
        let grant = (verb.to_owned(), resource.to_owned());
        self.granted.lock().unwrap().insert(grant);
    }

    fn take_away(&self, (verb, resource): (&str, &str)) {
        let grant = (verb.to_owned(), resource.to_owned());
        self.granted.lock().unwrap().remove(&grant);
    }

    /// The review sent back with its status filled in, as the apiserver answers a create.
    fn answer(&self, review: &Value) -> Value {
        let asked = &review["spec"]["resourceAttributes"];
        let field = |name: &str| asked[name].as_str().unwrap_or_default().to_owned();
        let (verb, resource) = (field("verb"), field("resource"));
        let (group, namespace) = (field("group"), field("namespace"));
        let allowed = group == "sentry.io"
            && namespace == NS
            && self
                .granted
                .lock()
                .unwrap()
                .contains(&(verb.clone(), resource.clone()));
        self.asked
            .lock()
            .unwrap()
            .push((verb, resource, group, namespace));
        let mut answered = review.clone();
        answered["status"] = if allowed {
            json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"dashboard\""})
        } else {
            json!({"allowed": false})
        };
        answered
    }
}

#[tokio::test]
async fn each_action_kind_shows_as_its_own_permission_allows() {
    let c = Cluster::new().await;
    let authorizer = Authorizer::granting(&c, &[("create", "tenants"), ("patch", "tenants")]);
    let allowed = review(&c.client, NS).await;
    assert_eq!(
        allowed,
        Allowed {
            create: true,
            start_runs: false,
            change: true,
            delete: false,
        }
    );
    let mut asked = authorizer.asked.lock().unwrap().clone();
    asked.sort();
    let expected: Vec<Asked> = [
        ("create", "runjobs"),
        ("create", "tenants"),
        ("delete", "tenants"),
        ("patch", "tenants"),
    ]
    .into_iter()
    .map(|(verb, resource)| (verb.into(), resource.into(), "sentry.io".into(), NS.into()))
    .collect();
    assert_eq!(
        asked, expected,
        "one review per action kind, in the group and namespace"
    );

    authorizer.grant(("create", "runjobs"));
    authorizer.grant(("delete", "tenants"));
    authorizer.take_away(("create", "tenants"));
    let allowed = review(&c.client, NS).await;
    let expected = Allowed {
        create: false,
        ..Allowed::ALL
    };
    assert_eq!(allowed, expected);
}

/// A review the apiserver fails to answer hides nothing: the button stays, and the API server answers
/// the click itself.
#[tokio::test]
async fn a_review_that_cannot_be_made_shows_the_buttons() {
    let c = Cluster::new().await;
    c.intercept
        .refuse(Method::POST, "/selfsubjectaccessreviews");
    assert_eq!(review(&c.client, NS).await, Allowed::ALL);
}

/// A grant taken away shows within one review period: the refresh asks again and the next page reads
/// the new answer.
#[tokio::test]
async fn a_grant_taken_away_hides_its_button_at_the_next_review() {
    let c = Cluster::new().await;
    let authorizer = Authorizer::granting(&c, &[("create", "tenants"), ("delete", "tenants")]);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let period = Duration::from_millis(20);
    let permissions =
        Permissions::reviewed_every(period, c.client.clone(), NS.into(), shutdown_rx).await;
    let first = Allowed {
        create: true,
        delete: true,
        ..Allowed::NONE
    };
    assert_eq!(permissions.now(), first, "reviewed before the first page");

    authorizer.take_away(("delete", "tenants"));
    let after = Allowed {
        delete: false,
        ..first
    };
    wait_until("the next review's answer", async || {
        (permissions.now() == after).then_some(())
    })
    .await;
    shutdown.send_replace(true);
}

#[tokio::test]
async fn the_dashboard_names_the_account_the_apiserver_knows() {
    let c = Cluster::new().await;
    c.intercept.set(|method, path, _, body| {
        (*method == Method::POST && path == "/apis/authentication.k8s.io/v1/selfsubjectreviews")
            .then(|| {
                let mut answered = body.clone();
                answered["status"] = json!({"userInfo": {
                    "username": "jane@example.com",
                    "groups": ["platform", "system:authenticated"],
                }});
                (201, answered)
            })
    });
    assert_eq!(
        who_am_i(&c.client).await.as_deref(),
        Some("jane@example.com")
    );
}

/// Before Kubernetes 1.28 there is no SelfSubjectReview: the apiserver answers 404 and the dashboard
/// says it cannot name the account.
#[tokio::test]
async fn an_apiserver_without_self_subject_reviews_names_nobody() {
    let c = Cluster::new().await;
    c.intercept.set(|method, path, _, _| {
        (*method == Method::POST && path.ends_with("/selfsubjectreviews")).then(|| {
            (
                404,
                status_body(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            )
        })
    });
    assert_eq!(who_am_i(&c.client).await, None);
}
