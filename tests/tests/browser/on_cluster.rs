//! The dashboard in Chromium on a real cluster, reached the way a user reaches it: `sentry-tenants
//! dashboard` port-forwards through the apiserver and the node's kubelet to the installed operator's
//! pod, which serves the page, reconciles, and provisions against the ClickHouse stand-in in real
//! containers. Every change the page shows arrived through the pod's watches.

use kube::api::Api;
use sentry_tenants::crd::{RunAction, RunJob, Tenant, TenantPhase};
use sentry_tenants_tests::browser::{
    Driver, eventually, one_browser_at_a_time, screenshot, text, wait_live,
};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::cluster_tier::{Setup, provision_run, setup};
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};
use sentry_tenants_tests::processes::Owned;

use super::{
    attr, click, exists, fill, same_page, shown_active_live, submit_new_tenant, suspend_confirmed,
};

/// `sentry-tenants dashboard --no-browser` as the admin: a port-forward to the operator's pod on a
/// local port; returns the process and the dashboard's base URL once the page answers through it.
async fn port_forwarded_dashboard(s: &Setup) -> (Owned, String) {
    let port = sentry_tenants_tests::free_port();
    let process = Owned::spawn(
        std::process::Command::new(s.plane.project_binary())
            .args(["dashboard", "-n", &s.ns, "--no-browser"])
            .args(["--port", &port.to_string()])
            .env("KUBECONFIG", &s.plane.kubeconfig)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit()),
    )
    .expect("start sentry-tenants dashboard");
    let url = format!("http://127.0.0.1:{port}");
    let addr = format!("127.0.0.1:{port}");
    wait_until("the dashboard through the port-forward", async || {
        sentry_tenants_tests::http_get(&addr, "/").await.ok()
    })
    .await;
    (process, url)
}

/// The value beside `term` in the tenant page's facts list, or "" while there is none.
async fn fact(b: &fantoccini::Client, term: &str) -> String {
    let script = "return [...document.querySelectorAll('dl.facts dt')]
        .find(d => d.textContent.trim() === arguments[0])?.nextElementSibling?.textContent.trim() ?? ''";
    b.execute(script, vec![serde_json::json!(term)])
        .await
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[test]
fn on_a_real_cluster_a_created_tenant_provisions_itself_then_suspend_resume_and_a_run_counted_down_to_cleanup()
 {
    let _turn = one_browser_at_a_time();
    sentry_tenants_tests::block_on(async {
        let s = setup("browser").await;
        let ch = ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password")
            .await;
        s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
            .await;
        let (forward, url) = port_forwarded_dashboard(&s).await;
        let at = |path: &str| format!("{url}{path}");
        let driver = Driver::start();
        let b = driver.session(true).await;

        b.goto(&at("/tenants/new")).await.unwrap();
        wait_live(&b).await;
        fill(&b, "#name", "acme").await;
        fill(&b, "#display_name", "Acme Corp").await;
        // Automatic, the form's default: the operator provisions it, no click.
        submit_new_tenant(&b, "acme", &["Pending", "Provisioning", "Active"]).await;
        shown_active_live(&b, "acme").await;
        sentry_tenants_tests::rehearsal::fail_here("browser");
        assert_eq!(fact(&b, "Provisioning").await, "Automatic");
        assert!(
            !exists(&b, "form[action='/actions/tenants/acme/provision']").await,
            "no Provision button on an Active tenant"
        );

        suspend_confirmed(&b, None).await;
        eventually("Suspended", || async {
            attr(&b, "h1 .badge", "data-phase").await == "Suspended"
        })
        .await;
        // The phase follows spec.suspended at once; the logins line follows what ClickHouse enforces,
        // once the Suspend run the reconciler made has locked them.
        eventually("the logins shown locked", || async {
            fact(&b, "Logins").await == "locked"
        })
        .await;
        assert_eq!(ch.is_locked(&s.ch_user("acme")), Some(true));
        click(&b, "form[action='/actions/tenants/acme/resume'] button").await;
        eventually("Active again", || async {
            attr(&b, "h1 .badge", "data-phase").await == "Active"
        })
        .await;
        eventually("the logins shown allowed", || async {
            fact(&b, "Logins").await == "allowed"
        })
        .await;
        assert_eq!(ch.is_locked(&s.ch_user("acme")), Some(false));
        let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
        assert!(same_page(&b).await, "all of it live, without a reload");
        let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
        let made: Vec<RunAction> = runs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|r| r.spec.action)
            .collect();
        assert!(
            made.contains(&RunAction::Suspend) && made.contains(&RunAction::Resume),
            "the reconciler made the lock runs: {made:?}"
        );

        // A run with a short TTL, applied from a terminal: the runs page counts it down to its cleanup
        // and drops the row when the RunJob reconciler deletes it.
        s.apply(&provision_run("acme-provision-2", "acme", 20));
        b.goto(&at("/runs")).await.unwrap();
        wait_live(&b).await;
        let row = "tr[data-run='acme-provision-2']";
        eventually("the run's countdown", || async {
            text(&b, &format!("{row} .countdown"))
                .await
                .starts_with("in ")
        })
        .await;
        let mut saw: Vec<String> = Vec::new();
        wait_until("the row gone from the page", async || {
            if !exists(&b, row).await {
                return Some(());
            }
            let t = text(&b, &format!("{row} .countdown")).await;
            if !t.is_empty() && saw.last() != Some(&t) {
                saw.push(t);
            }
            None
        })
        .await;
        assert!(saw.len() >= 2, "the countdown ticked: {saw:?}");
        wait_gone(&runs, "acme-provision-2").await;
        let acme = tenants.get("acme").await.unwrap();
        assert_eq!(acme.phase(), Some(TenantPhase::Active));
        assert!(
            acme.history().iter().any(|h| h.name == "acme-provision-2"),
            "the cleaned-up run kept in the tenant's history"
        );

        // Delete: the confirmation names the reclaim policy and wants the name typed; the tenant goes
        // once its Deprovision run locked the logins (Retain), and leaves the list live.
        b.goto(&at("/tenants/acme?confirm=delete")).await.unwrap();
        wait_live(&b).await;
        assert!(text(&b, ".confirm").await.contains("reclaimPolicy Retain"));
        fill(&b, "#confirm_name", "acme").await;
        screenshot(&b, "tenant-confirm-delete").await;
        click(&b, ".confirm button.danger").await;
        eventually("back on the tenants list", || async {
            b.current_url().await.unwrap().path() == "/tenants"
        })
        .await;
        wait_gone(&tenants, "acme").await;
        eventually("the row gone from the list", || async {
            !exists(&b, "tr[data-tenant='acme']").await
        })
        .await;
        assert_eq!(
            ch.is_locked(&s.ch_user("acme")),
            Some(true),
            "Retain locked it"
        );
        b.close().await.unwrap();
        drop(forward);
        s.assert_no_forbidden();
    })
}
