//! Accessibility: axe-core (npm) inside Chromium on every page of the dashboard in each state it can
//! be in — lists empty and full, filtered, a tenant Pending, Active, Suspended, Failed and Terminating
//! with history, each confirmation and form open, a refused form, a run, a page that does not exist —
//! hydrated and live, in the light and the dark theme: zero violations of WCAG 2.1 A and AA. A page without JavaScript is the same
//! server-rendered markup before hydration; axe-core itself cannot run there (Chromium with scripts
//! off runs none, a WebDriver script's timers included).

use jiff::SignedDuration;
use sentry_tenants::crd::RunAction;
use sentry_tenants_tests::browser::{
    Driver, Served, axe_violations, one_browser_at_a_time, screenshot, wait_live,
};
use sentry_tenants_tests::{Cluster, block_on};

/// Tenants in every phase, runs finished both ways, a history: what the pages show at their fullest.
async fn cluster_in_every_state() -> Cluster {
    let c = Cluster::new().await;
    for name in ["active", "failed", "pending", "suspended", "leaving"] {
        c.create_tenant(name).await;
    }
    for name in ["active", "suspended", "leaving"] {
        c.report_provisioned(name).await;
    }
    c.create_run("failed", RunAction::Provision, "failed-provision-1")
        .await;
    c.create_run("active", RunAction::Rotate, "active-rotate-1")
        .await;
    c.settle().await;
    c.job_running("failed-provision-1").await;
    c.job_running("active-rotate-1").await;
    c.clock.advance(SignedDuration::from_secs(40));
    c.job_failed(
        "failed-provision-1",
        "BackoffLimitExceeded",
        "clickhouse unreachable",
    )
    .await;
    c.job_succeeded("active-rotate-1").await;
    c.settle().await;
    c.set_suspended("suspended", true).await;
    c.patch_spec(
        "active",
        serde_json::json!({"limits": {"maxMemoryPerQuery": "4Gi", "queriesPerHour": 100}}),
    )
    .await;
    c.tenants()
        .delete("leaving", &Default::default())
        .await
        .unwrap();
    c.settle().await;
    c
}

const PAGES: [&str; 17] = [
    "/",
    "/tenants",
    "/tenants?phase=Failed",
    "/tenants?q=nothing-matches",
    "/tenants/new",
    "/tenants/new?error=tenant%20name%20%22Bad%22%20is%20invalid&name=Bad",
    "/tenants/active",
    "/tenants/active?confirm=delete",
    "/tenants/active?confirm=suspend&tenant=active",
    "/tenants/active?confirm=revoke&tenant=active",
    "/tenants/active?edit=limits",
    "/tenants/failed",
    "/tenants/suspended",
    "/tenants/leaving",
    "/runs",
    "/runs/failed-provision-1",
    "/tenants/no-such-tenant",
];

#[test]
fn every_page_in_every_state_has_no_wcag_2_1_aa_violation() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let served = Served::start(cluster_in_every_state().await, false).await;
        let mut found = Vec::new();
        for dark in [false, true] {
            let b = driver.session_with(true, dark).await;
            let theme = if dark { "dark" } else { "light" };
            for page in PAGES {
                b.goto(&served.at(page)).await.unwrap();
                wait_live(&b).await;
                let scheme = b
                    .execute(
                        "return matchMedia('(prefers-color-scheme: dark)').matches",
                        vec![],
                    )
                    .await
                    .unwrap();
                assert_eq!(
                    scheme, dark,
                    "{page}: the browser's colour scheme is {theme}"
                );
                for v in axe_violations(&b).await {
                    found.push(format!("{page} ({theme}): {v}"));
                }
            }
            if dark {
                b.goto(&served.at("/tenants/active")).await.unwrap();
                wait_live(&b).await;
                screenshot(&b, "tenant-detail-dark").await;
                b.goto(&served.at("/")).await.unwrap();
                wait_live(&b).await;
                screenshot(&b, "overview-dark").await;
            }
            b.close().await.unwrap();
        }
        // An empty dashboard too: the lists' empty states.
        let empty = Served::start(Cluster::new().await, false).await;
        let b = driver.session(true).await;
        for page in ["/", "/tenants", "/runs"] {
            b.goto(&empty.at(page)).await.unwrap();
            wait_live(&b).await;
            for v in axe_violations(&b).await {
                found.push(format!("{page} (empty): {v}"));
            }
        }
        b.close().await.unwrap();
        assert!(found.is_empty(), "axe-core found:\n{}", found.join("\n"));
    })
}
