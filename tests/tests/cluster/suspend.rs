//! Suspend and Resume on the real control plane, with the installed operator (its pod run on the
//! node) doing the reconciling: by `kubectl patch` and by the dashboard's form post.
//! What counts is what ClickHouse was told (the stand-in's statements) and what a login can do.

use kube::api::Api;
use sentry_tenants::crd::{Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

use crate::provision::{finished, password, provision_run, tenant, tenant_in_phase};
use crate::{Operator, setup};

fn host_statements(ch: &ClickHouseStandIn, user: &str, host: &str) -> usize {
    let wanted = format!("ALTER USER `{user}` HOST {host}");
    ch.statements().iter().filter(|s| **s == wanted).count()
}

async fn access_locked(tenants: &Api<Tenant>, locked: bool) -> Tenant {
    wait_until(
        &format!("accessLocked {locked} with its condition"),
        async || {
            let t = tenants.get("acme").await.ok()?;
            let status = t.status.as_ref()?;
            let condition = status
                .conditions
                .iter()
                .find(|c| c.type_ == "AccessLocked")?;
            let want = if locked { "True" } else { "False" };
            (status.access_locked == Some(locked) && condition.status.as_str() == want)
                .then_some(t.clone())
        },
    )
    .await
}

/// On the suite's one long-lived multi-thread runtime, as every test that serves the dashboard: Leptos
/// keeps process-wide executor state, and a render on a per-test runtime could wait forever.
#[test]
fn suspend_by_kubectl_and_resume_by_the_dashboard_lock_and_unlock_the_login_once_each() {
    sentry_tenants_tests::block_on(suspend_then_resume());
}

async fn suspend_then_resume() {
    let s = setup("suspend").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
        .await;
    s.apply(&tenant("acme", false));
    s.apply(&provision_run("acme-provision-1", "acme", 300));
    finished(&s, "acme-provision-1").await;
    tenant_in_phase(&s, "acme", TenantPhase::Active).await;
    let pw = password(&s, "acme").await;
    let user = s.ch_user("acme");
    assert!(ch.may_log_in(&user, &pw));
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);

    // Suspend, as a platform engineer would from a terminal.
    s.set_suspended("acme", true);
    let t = access_locked(&tenants, true).await;
    assert_eq!(t.phase(), Some(TenantPhase::Suspended));
    assert!(
        !ch.may_log_in(&user, &pw),
        "a suspended tenant cannot log in"
    );
    assert_eq!(
        host_statements(&ch, &user, "NONE"),
        1,
        "{:#?}",
        ch.statements()
    );
    // The queries already running are ended after the lock, so none starts in between.
    let statements = ch.statements();
    let lock = statements.iter().position(|q| q.ends_with("HOST NONE"));
    let kill = statements
        .iter()
        .position(|q| *q == format!("KILL QUERY WHERE user = '{user}' ASYNC"));
    assert!(
        lock.is_some() && kill > lock,
        "the lock, then its queries ended: {statements:#?}"
    );

    // Resume from the dashboard: its form post, through the router `run` serves, as the operator's
    // ServiceAccount (this replica only serves; the installed operator reconciles).
    let dashboard = Operator::start_leading(&s, false).await;
    dashboard
        .act(
            "/actions/tenants/acme/resume",
            "return_to=%2Ftenants%2Facme",
        )
        .await;
    let t = access_locked(&tenants, false).await;
    assert_eq!(t.phase(), Some(TenantPhase::Active));
    assert!(
        ch.may_log_in(&user, &pw),
        "resumed: the same password logs in again"
    );
    assert_eq!(
        host_statements(&ch, &user, "ANY"),
        1,
        "{:#?}",
        ch.statements()
    );
    assert_eq!(
        host_statements(&ch, &user, "NONE"),
        1,
        "no second lock: {:#?}",
        ch.statements()
    );
    assert!(ch.refused().is_empty(), "{:?}", ch.refused());
    dashboard.stop().await;
    s.assert_no_forbidden();
}
