//! The RBAC we ship is exactly what the code calls: a whole tenant lifecycle on the real control plane
//! (install, a tenant created and provisioned from the dashboard, a run cleaned up, its credentials
//! Secret deleted and made again by a Rotate from the dashboard, suspend by kubectl, resume from the dashboard, the tenant's and the run's pages,
//! deletion with each reclaim policy), then the apiserver's audit log is
//! read for what our two ServiceAccounts asked, and compared with the Roles of the bundle both ways:
//! no request outside them, no grant that nothing used.

use std::collections::BTreeSet;

use axum::body::Body;
use http::{Request, StatusCode, header};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::rbac::v1::Role;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use sentry_tenants::crd::{RunJob, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};
use serde_json::Value;
use tower::ServiceExt;

use crate::provision::{provision_run, tenant_in_phase};
use crate::{Operator, Setup, setup};

const OPERATOR: &str = "sentry-tenants";
const PROVISIONER: &str = "sentry-tenants-provisioner";

/// One permission: (ServiceAccount, API group, resource[/subresource], verb).
type Grant = (String, String, String, String);

/// Grants no request shows in the audit log because an admission plugin checks them on another
/// request: creating a Job whose owner reference to its RunJob has `blockOwnerDeletion` needs
/// `update` on `runjobs/finalizers` under OwnerReferencesPermissionEnforcement (on in this cluster,
/// as in OpenShift). The test checks that the operator's Jobs do carry it.
const CHECKED_BY_ADMISSION: &[(&str, &str, &str, &str)] =
    &[(OPERATOR, "sentry.io", "runjobs/finalizers", "update")];

/// Grants used only when an Event repeats: kube's Recorder patches an Event that repeats within 6
/// minutes into a series instead of creating another. No event of this lifecycle repeats (a tenant's
/// events about a run name that run); a sharded install's `UnknownShard` warning repeats on every
/// reconcile of its tenant.
const USED_WHEN_AN_EVENT_REPEATS: &[(&str, &str, &str, &str)] =
    &[(OPERATOR, "events.k8s.io", "events", "patch")];

/// On the suite's long-lived runtime, as every test that serves the dashboard.
#[test]
fn the_roles_grant_exactly_what_a_whole_lifecycle_asks_for() {
    sentry_tenants_tests::block_on(lifecycle_then_compare());
}

async fn lifecycle_then_compare() {
    let s = setup("rbac").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
        .await;
    // The dashboard of a second replica, as the operator's ServiceAccount (the installed one leads).
    let dashboard = Operator::start_leading(&s, false).await;
    let page = async |path: &str| {
        let request = Request::get(path)
            .header(header::HOST, "127.0.0.1:8080")
            .body(Body::empty())
            .unwrap();
        let reply = dashboard.dashboard().oneshot(request).await.unwrap();
        assert_eq!(reply.status(), StatusCode::OK, "GET {path}");
    };

    dashboard
        .act("/actions/tenants", "name=acme&display_name=Acme")
        .await;
    dashboard.act("/actions/tenants/acme/provision", "").await;
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    // A run with no time to live: the operator records it in the tenant's history and deletes it.
    s.apply(&provision_run("acme-resync", "acme", 0));
    wait_gone(
        &Api::<RunJob>::namespaced(s.admin.clone(), &s.ns),
        "acme-resync",
    )
    .await;
    let acme = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns)
        .get("acme")
        .await
        .unwrap();
    assert!(
        acme.history().iter().any(|r| r.name == "acme-resync"),
        "{:#?}",
        acme.history()
    );
    // A deleted credentials Secret: its marker goes with it, and the operator, missing it in its
    // cache, asks the API for it before it reports the deletion.
    let (deleted, _, err) = s
        .plane
        .kubectl(&["delete", "secret", "acme-clickhouse", "-n", &s.ns], None);
    assert!(deleted, "{err}");
    secret_condition_is(&s, "SecretDeleted").await;
    // A person's Rotate from the dashboard makes it again (and the Retain below releases it).
    dashboard.act("/actions/tenants/acme/rotate", "").await;
    secret_condition_is(&s, "Present").await;
    s.set_suspended("acme", true);
    tenant_in_phase(&s, "acme", TenantPhase::Suspended).await;
    dashboard.act("/actions/tenants/acme/resume", "").await;
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    page("/").await;
    page("/tenants/acme").await;
    let provision = wait_until("the dashboard's Provision run", async || {
        let runs = Api::<RunJob>::namespaced(s.admin.clone(), &s.ns)
            .list(&ListParams::default().labels("sentry.io/action=provision"))
            .await
            .ok()?;
        runs.items.into_iter().next()
    })
    .await;
    page(&format!("/runs/{}", provision.name_any())).await;
    dashboard.stop().await;

    // A run whose name someone else's Job already has: the operator's create gets 409 and it reads
    // that Job (never adopting it), which is the `get` on jobs a restart's cache miss also makes.
    let foreign: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "acme-foreign"},
        "spec": {"suspend": true, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "registry.invalid/other:1"}],
        }}},
    }))
    .unwrap();
    Api::<Job>::namespaced(s.admin.clone(), &s.ns)
        .create(&Default::default(), &foreign)
        .await
        .unwrap();
    s.apply(&provision_run("acme-foreign", "acme", 300));
    wait_until("the operator to read the foreign Job", async || {
        asked_for(&s, OPERATOR, "get", "jobs", "acme-foreign").then_some(())
    })
    .await;
    let (deleted, _, err) = s
        .plane
        .kubectl(&["delete", "runjob", "acme-foreign", "-n", &s.ns], None);
    assert!(deleted, "{err}");
    // The leader renews its Lease every third of its duration.
    wait_until("a renewal of the leader Lease", async || {
        asked_for(&s, OPERATOR, "update", "leases", "sentry-tenants-leader").then_some(())
    })
    .await;

    // Deleting with each reclaim policy: Retain (acme, the default) releases the Secret from its
    // owner, Delete (globex) deletes it; both go only after their Deprovision runs.
    s.apply(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: globex\nspec:\n  reclaimPolicy: Delete\n",
    );
    tenant_in_phase(&s, "globex", TenantPhase::Active).await;
    // acme from the dashboard (the operator's delete on tenants), globex with kubectl.
    let dashboard = Operator::start_leading(&s, false).await;
    dashboard
        .act("/actions/tenants/acme/delete", "confirm_name=acme")
        .await;
    dashboard.stop().await;
    let (deleted, _, err) = s.plane.kubectl(
        &["delete", "tenant", "globex", "-n", &s.ns, "--wait=false"],
        None,
    );
    assert!(deleted, "{err}");
    let tenants = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns);
    wait_gone(&tenants, "acme").await;
    wait_gone(&tenants, "globex").await;

    let jobs = Api::<Job>::namespaced(s.admin.clone(), &s.ns)
        .list(&ListParams::default().labels("sentry.io/runjob"))
        .await
        .unwrap();
    assert!(!jobs.items.is_empty());
    for job in &jobs.items {
        let blocking = job
            .owner_references()
            .iter()
            .any(|o| o.kind == "RunJob" && o.block_owner_deletion == Some(true));
        assert!(
            blocking,
            "Job {} blocks its RunJob's deletion",
            job.name_any()
        );
    }

    let granted = granted(&s).await;
    let asked = asked(&s);
    let outside: Vec<_> = asked.difference(&granted).collect();
    assert!(outside.is_empty(), "requests no Role grants: {outside:#?}");
    let by_admission: BTreeSet<Grant> = CHECKED_BY_ADMISSION
        .iter()
        .chain(USED_WHEN_AN_EVENT_REPEATS)
        .map(|(a, g, r, v)| (a.to_string(), g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<_> = granted
        .difference(&asked)
        .filter(|g| !by_admission.contains(*g))
        .collect();
    assert!(unused.is_empty(), "grants nothing used: {unused:#?}");
    s.assert_no_forbidden();
}

/// Waits until acme's `CredentialsSecret` condition says `reason`.
async fn secret_condition_is(s: &Setup, reason: &str) {
    let tenants = Api::<Tenant>::namespaced(s.admin.clone(), &s.ns);
    wait_until(&format!("CredentialsSecret {reason}"), async || {
        let status = tenants.get("acme").await.ok()?.status?;
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "CredentialsSecret" && c.reason == reason)
            .then_some(())
    })
    .await;
}

/// Every (account, group, resource, verb) the bundle's Roles grant, as the apiserver stored them.
async fn granted(s: &Setup) -> BTreeSet<Grant> {
    let roles: Api<Role> = Api::namespaced(s.admin.clone(), &s.ns);
    let mut out = BTreeSet::new();
    for account in [OPERATOR, PROVISIONER] {
        let role = roles.get(account).await.unwrap();
        for rule in role.rules.unwrap_or_default() {
            for group in rule.api_groups.iter().flatten() {
                for resource in rule.resources.iter().flatten() {
                    for verb in &rule.verbs {
                        out.insert((
                            account.into(),
                            group.clone(),
                            resource.clone(),
                            verb.clone(),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Every (account, group, resource, verb) our accounts asked of the test's namespace. Requests outside
/// a namespace (discovery, SelfSubjectAccessReviews) are every authenticated user's by default.
fn asked(s: &Setup) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for event in s.plane.audit_events() {
        let Some(account) = ours(&event, &s.ns) else {
            continue;
        };
        let object = &event["objectRef"];
        if object["namespace"].as_str() != Some(s.ns.as_str()) {
            continue;
        }
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", text(&object["resource"])),
            None => text(&object["resource"]),
        };
        out.insert((
            account.to_owned(),
            text(&object["apiGroup"]),
            resource,
            text(&event["verb"]),
        ));
    }
    out
}

fn ours<'a>(event: &'a Value, ns: &str) -> Option<&'a str> {
    let user = event["user"]["username"].as_str()?;
    let account = user.strip_prefix(&format!("system:serviceaccount:{ns}:"))?;
    [OPERATOR, PROVISIONER].into_iter().find(|a| *a == account)
}

/// Whether `account` asked to `verb` the object `name` of `resource` in the test's namespace.
fn asked_for(s: &Setup, account: &str, verb: &str, resource: &str, name: &str) -> bool {
    s.plane.audit_events().iter().any(|e| {
        ours(e, &s.ns) == Some(account)
            && e["verb"] == verb
            && e["objectRef"]["resource"] == resource
            && e["objectRef"]["name"] == name
            && e["objectRef"]["subresource"].is_null()
    })
}
