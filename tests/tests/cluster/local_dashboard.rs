//! `sentry-tenants dashboard --local` on the real control plane, as a person runs it: the binary with a
//! kubeconfig of a ServiceAccount whose Role lets it read everything and patch tenants, nothing more.
//! The pages offer only what that Role allows; an action it forbids fails with the API server's own
//! 403, named as what the person may not do, and writes nothing; an action it allows is made under the
//! person's identity, as the API server's audit log shows.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use sentry_tenants::crd::{RunJob, Tenant};
use sentry_tenants_tests::control_plane::wait_until;
use sentry_tenants_tests::processes::Owned;
use serde_json::Value;

use sentry_tenants_tests::cluster_tier::tenant;

use crate::{Setup, setup};

/// A Role with `rules` (YAML list items), bound to the namespace's ServiceAccount `account`.
fn role_for(account: &str, rules: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {account}
rules:
{rules}---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {account}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {account}
subjects:
- kind: ServiceAccount
  name: {account}
"
    )
}

/// May read tenants, runs and Jobs, and patch tenants (Suspend, Resume, limits); may not create runs
/// (Provision, Rotate) nor create or delete tenants.
fn suspender_role(account: &str) -> String {
    role_for(
        account,
        "- apiGroups: [sentry.io]
  resources: [tenants]
  verbs: [get, list, watch, patch]
- apiGroups: [sentry.io]
  resources: [runjobs]
  verbs: [get, list, watch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch]
",
    )
}

/// May create runs (Provision, Rotate), nothing else.
fn run_starter_role(account: &str) -> String {
    role_for(
        account,
        "- apiGroups: [sentry.io]
  resources: [runjobs]
  verbs: [create]
",
    )
}

/// The CLI serving the dashboard, and where.
struct LocalDashboard {
    _child: Owned,
    origin: String,
}

impl LocalDashboard {
    /// Started with `kubeconfig`; ready once it prints where it serves.
    fn start(s: &Setup, kubeconfig: &std::path::Path) -> Self {
        let mut child = Owned::spawn(
            Command::new(s.plane.project_binary())
                .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
                .args([
                    "dashboard",
                    "--local",
                    "-n",
                    &s.ns,
                    "--port",
                    "0",
                    "--no-browser",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        )
        .expect("the binary starts");
        let mut stderr = BufReader::new(child.child_mut().stderr.take().unwrap());
        let mut said = String::new();
        let origin = loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).expect("read its stderr");
            assert!(read > 0, "the dashboard ended before serving:\n{said}");
            said.push_str(&line);
            if let Some(rest) = line.strip_prefix("Dashboard: ") {
                let url = rest.split_whitespace().next().unwrap();
                break url.trim_end_matches('/').to_owned();
            }
        };
        // Keep reading, so its log lines never fill the pipe.
        std::thread::spawn(move || for _ in stderr.lines() {});
        Self {
            _child: child,
            origin,
        }
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, String) {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Body>();
        let reply = client.request(request).await.expect("a reply");
        let status = reply.status();
        let body = reply.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    async fn page(&self, path: &str) -> String {
        let host = self.origin.trim_start_matches("http://");
        let request = Request::get(format!("{}{path}", self.origin))
            .header(header::HOST, host)
            .body(Body::empty())
            .unwrap();
        let (status, body) = self.send(request).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }

    /// A form post as the hydrated page sends it (same origin, asking for JSON): status and message.
    async fn act(&self, path: &str, form: &str) -> (StatusCode, String) {
        // The token this dashboard process's pages carry, read as a browser has it.
        let page = self.page("/tenants/new").await;
        let session = sentry_tenants_tests::dashboard::session_in(&page).expect("a session token");
        let form = sentry_tenants_tests::dashboard::with_session(form, &session);
        let host = self.origin.trim_start_matches("http://");
        let request = Request::post(format!("{}{path}", self.origin))
            .header(header::HOST, host)
            .header(header::ORIGIN, &self.origin)
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form))
            .unwrap();
        let (status, body) = self.send(request).await;
        let reply: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("JSON: {body}"));
        (
            status,
            reply["message"].as_str().unwrap_or_default().to_owned(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_dashboard_acts_as_the_person_and_their_rbac_decides() {
    let s = setup("local-dash").await;
    s.install_idle().await;
    s.apply(&tenant("acme", false));
    s.apply(&suspender_role("alice"));
    let (ok, _, err) = s
        .plane
        .kubectl(&["create", "serviceaccount", "alice", "-n", &s.ns], None);
    assert!(ok, "{err}");
    let (_, kubeconfig) = s.as_account("alice").await;
    let alice = format!("system:serviceaccount:{}:alice", s.ns);
    let dashboard = LocalDashboard::start(&s, &kubeconfig);

    // The pages offer what the Role allows, and say whose dashboard this is.
    let overview = dashboard.page("/").await;
    assert!(
        overview.contains(&format!("acting as <code>{alice}</code>")),
        "{overview}"
    );
    let page = dashboard.page("/tenants/acme").await;
    assert!(
        page.contains("?confirm=suspend&amp;tenant=acme"),
        "Suspend is offered: {page}"
    );
    assert!(page.contains("?edit=limits"), "Change limits is offered");
    assert!(
        !page.contains("/actions/tenants/acme/provision"),
        "Provision is not offered"
    );
    assert!(!page.contains("?confirm=delete"), "Delete is not offered");
    let list = dashboard.page("/tenants").await;
    assert!(
        !list.contains("href=\"/tenants/new\""),
        "New tenant is not offered"
    );

    // Forbidden actions fail with the person's own 403 and write nothing.
    let (status, message) = dashboard.act("/actions/tenants/acme/provision", "").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
    assert!(
        message.starts_with(&format!("you may not create runjobs in {}: ", s.ns))
            && message.contains(&format!(
                "User \"{alice}\" cannot create resource \"runjobs\""
            )),
        "{message}"
    );
    let (status, message) = dashboard
        .act("/actions/tenants/acme/delete", "confirm_name=acme")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
    assert!(
        message.starts_with(&format!("you may not delete tenants in {}: ", s.ns)),
        "{message}"
    );
    let (status, message) = dashboard.act("/actions/tenants", "name=other").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{message}");
    assert!(
        message.starts_with(&format!("you may not create tenants in {}: ", s.ns)),
        "{message}"
    );
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    assert!(
        runs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let acme = tenants.get("acme").await.unwrap();
    assert!(
        acme.metadata.deletion_timestamp.is_none(),
        "acme is not being deleted"
    );
    assert!(tenants.get_opt("other").await.unwrap().is_none());
    let events: Api<Event> = Api::namespaced(s.admin.clone(), &s.ns);
    let dashboard_events = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DashboardAction"))
        .count();
    assert_eq!(dashboard_events, 0, "a refused action records nothing");

    // An allowed action is made as the person: the API server's audit log names them.
    let (status, message) = dashboard.act("/actions/tenants/acme/suspend", "").await;
    assert_eq!(status, StatusCode::OK, "{message}");
    assert!(tenants.get("acme").await.unwrap().spec.suspended);
    let by_alice = |verb: &str, code: u64| {
        let events = s.plane.audit_events();
        events.iter().any(|e| {
            e["verb"] == verb
                && e["user"]["username"] == alice.as_str()
                && e["objectRef"]["resource"] == "tenants"
                && e["objectRef"]["name"] == "acme"
                && e["objectRef"]["namespace"] == s.ns.as_str()
                && e["responseStatus"]["code"] == code
        })
    };
    wait_until("the audit log to name alice's patch", async || {
        by_alice("patch", 200).then_some(())
    })
    .await;
    assert!(
        by_alice("delete", 403),
        "the refused delete was alice's own request"
    );
}

/// The reviews behind the buttons are renewed while the dashboard runs: a Role granted shows the
/// buttons it allows, and the grant taken away hides them again (every 60 s in the product; every
/// quarter second here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_reviews_follow_a_grant_given_and_taken_away() {
    use sentry_tenants::web::permissions::Permissions;
    let s = setup("local-renew").await;
    let (ok, _, err) = s
        .plane
        .kubectl(&["create", "serviceaccount", "bob", "-n", &s.ns], None);
    assert!(ok, "{err}");
    let (bob, _) = s.as_account("bob").await;
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let every = std::time::Duration::from_millis(250);
    let permissions = Permissions::reviewed_every(every, bob, s.ns.clone(), shutdown).await;
    assert_eq!(
        permissions.now(),
        Default::default(),
        "bob may do nothing yet"
    );

    s.apply(&run_starter_role("bob"));
    wait_until("the grant to show", async || {
        permissions.now().start_runs.then_some(())
    })
    .await;
    let now = permissions.now();
    assert!(
        !now.create && !now.change && !now.delete,
        "only what the Role grants: {now:?}"
    );

    let (ok, _, err) = s
        .plane
        .kubectl(&["delete", "rolebinding", "bob", "-n", &s.ns], None);
    assert!(ok, "{err}");
    wait_until("the grant taken away to hide its buttons", async || {
        (!permissions.now().start_runs).then_some(())
    })
    .await;
}
