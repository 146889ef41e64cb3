//! The dashboard in real headless Chromium against the real router, its caches fed from the in-memory
//! cluster and a background loop playing the operator. Screenshots go to `target/screenshots/`.
//!
//! A test binary of its own: cargo runs test binaries one after another, so the heavy drills of the
//! integration binary never share the two cores with Chromium; inside it, the tests take turns.

mod a11y;
mod guards;
mod on_cluster;

use fantoccini::{Client, Locator};
use jiff::SignedDuration;
use sentry_tenants::crd::RunAction;
use sentry_tenants_tests::browser::{
    Driver, PATIENCE, Served, attr, eventually, one_browser_at_a_time, screenshot, text, wait_live,
};
use sentry_tenants_tests::{Cluster, block_on};

/// Clicks `css`, finding it again if a live update replaced it in between.
async fn click(client: &Client, css: &str) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < deadline {
        if let Ok(el) = client.find(Locator::Css(css)).await
            && el.click().await.is_ok()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("could not click {css}");
}

async fn fill(client: &Client, css: &str, value: &str) {
    let el = client.find(Locator::Css(css)).await.unwrap();
    el.clear().await.unwrap();
    el.send_keys(value).await.unwrap();
}

async fn exists(client: &Client, css: &str) -> bool {
    client
        .find_all(Locator::Css(css))
        .await
        .map(|v| !v.is_empty())
        .unwrap_or(false)
}

/// A value set in the page that only survives as long as the page is not reloaded.
async fn mark_page(client: &Client) {
    client
        .execute("window.__sameDocument = 'yes'", vec![])
        .await
        .unwrap();
}
async fn same_page(client: &Client) -> bool {
    client
        .execute("return window.__sameDocument || 'reloaded'", vec![])
        .await
        .unwrap()
        == "yes"
}

/// Picks Manual provisioning on the new-tenant form: nothing happens until Provision is clicked.
async fn choose_manual(b: &Client) {
    click(b, "input[name=provisioning][value=Manual]").await;
}

/// Submits the filled-in new-tenant form; returns on the tenant's page, live, showing it in one of
/// `phases`, with the page marked (see [`same_page`]).
async fn submit_new_tenant(b: &Client, name: &str, phases: &[&str]) {
    click(b, "form.stack button[type=submit]").await;
    let path = format!("/tenants/{name}");
    eventually("the new tenant's page", || async {
        b.current_url().await.unwrap().path() == path
    })
    .await;
    eventually(
        &format!("the tenant shown as one of {phases:?}"),
        || async { phases.contains(&attr(b, "h1 .badge", "data-phase").await.as_str()) },
    )
    .await;
    wait_live(b).await;
    mark_page(b).await;
}

/// Clicks Provision on the tenant's page; returns once the run it started is listed there.
async fn provision_from_the_page(b: &Client, name: &str) {
    click(
        b,
        &format!("form[action='/actions/tenants/{name}/provision'] button"),
    )
    .await;
    let row = format!("tr[data-run='{name}-provision-1']");
    eventually("the Provision run on the page", || async {
        exists(b, &row).await
    })
    .await;
}

/// Waits for the tenant's page to show it Active with its credentials Secret, updated live (no
/// reload since [`mark_page`]).
async fn shown_active_live(b: &Client, name: &str) {
    eventually("the tenant shown Active", || async {
        attr(b, "h1 .badge", "data-phase").await == "Active"
    })
    .await;
    let secret = format!("{name}-clickhouse");
    assert!(text(b, "dl.facts").await.contains(&secret));
    assert!(same_page(b).await, "updates arrived live, without a reload");
}

/// Suspend asks first: opens the confirmation (a screenshot of it if named) and confirms.
async fn suspend_confirmed(b: &Client, shot: Option<&str>) {
    click(b, ".actions a.btn").await;
    eventually("the confirmation", || async { exists(b, ".confirm").await }).await;
    if let Some(name) = shot {
        screenshot(b, name).await;
    }
    click(b, ".confirm button.danger").await;
}

#[test]
fn create_provision_watch_it_go_live_then_suspend_and_resume() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let served = Served::start(Cluster::new().await, false).await;
        let c = &served.cluster;
        let b = driver.session(true).await;

        b.goto(&served.at("/tenants")).await.unwrap();
        wait_live(&b).await;
        assert!(text(&b, ".empty h3").await.contains("No tenants yet"));
        screenshot(&b, "tenants-empty").await;

        b.goto(&served.at("/tenants/new")).await.unwrap();
        wait_live(&b).await;
        fill(&b, "#name", "Acme").await;
        eventually("inline validation of the name", || async {
            text(&b, ".field-error").await.contains("is invalid")
        })
        .await;
        fill(&b, "#name", "acme").await;
        fill(&b, "#display_name", "Acme Corp").await;
        fill(&b, "#max_memory_per_query", "2Gi").await;
        fill(&b, "#queries_per_hour", "500").await;
        screenshot(&b, "tenant-new").await;
        choose_manual(&b).await;
        submit_new_tenant(&b, "acme", &["Pending"]).await;
        provision_from_the_page(&b, "acme").await;
        eventually("Provisioning", || async {
            attr(&b, "h1 .badge", "data-phase").await == "Provisioning"
        })
        .await;
        assert!(
            !exists(&b, "form[action='/actions/tenants/acme/provision']").await,
            "no second Provision while one runs"
        );

        served.job_made("acme-provision-1").await;
        c.job_running("acme-provision-1").await;
        eventually("the run shown Running", || async {
            attr(&b, "tr[data-run='acme-provision-1']", "data-phase").await == "Running"
        })
        .await;
        c.job_succeeded("acme-provision-1").await;
        c.report_provisioned("acme").await;
        shown_active_live(&b, "acme").await;
        let facts = text(&b, "dl.facts").await;
        assert!(
            facts.contains("2Gi memory per query, 500 queries per hour"),
            "the limits typed into the create form, in: {facts:?}"
        );
        screenshot(&b, "tenant-detail").await;

        // Change limits on the page: the form submits in place, the reconciler makes the SetLimits run.
        click(&b, "a[href='/tenants/acme?edit=limits']").await;
        eventually("the limits form", || async {
            exists(&b, ".edit-limits #queries_per_hour").await
        })
        .await;
        assert_eq!(
            attr(&b, ".edit-limits #queries_per_hour", "value").await,
            "500"
        );
        fill(&b, ".edit-limits #queries_per_hour", "100").await;
        fill(&b, ".edit-limits #max_execution_seconds", "30").await;
        screenshot(&b, "tenant-limits").await;
        click(&b, ".edit-limits button[type=submit]").await;
        eventually("the new limits shown", || async {
            text(&b, "dl.facts")
                .await
                .contains("2Gi memory per query, 30 s per query, 100 queries per hour")
        })
        .await;
        assert!(same_page(&b).await, "saved without a reload");
        let limits = c.tenant("acme").await.spec.limits.unwrap();
        assert_eq!(
            (limits.queries_per_hour, limits.max_execution_seconds),
            (Some(100), Some(30))
        );
        eventually("a SetLimits run made by the reconciler", || async {
            let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
            runs.iter().any(|r| r.spec.action == RunAction::SetLimits)
        })
        .await;

        suspend_confirmed(&b, Some("tenant-confirm-suspend")).await;
        eventually("Suspended", || async {
            attr(&b, "h1 .badge", "data-phase").await == "Suspended"
        })
        .await;
        click(&b, "form[action='/actions/tenants/acme/resume'] button").await;
        eventually("Active again", || async {
            attr(&b, "h1 .badge", "data-phase").await == "Active"
        })
        .await;
        // The dashboard only flips spec.suspended; the reconciler made the Suspend run.
        let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
        assert!(runs.iter().any(|r| r.spec.action == RunAction::Suspend));
        assert!(!c.tenant("acme").await.spec.suspended);

        b.goto(&served.at("/tenants")).await.unwrap();
        wait_live(&b).await;
        screenshot(&b, "tenants").await;
        b.goto(&served.at("/")).await.unwrap();
        wait_live(&b).await;
        screenshot(&b, "overview").await;
        b.goto(&served.at("/runs")).await.unwrap();
        wait_live(&b).await;
        screenshot(&b, "runs").await;
        b.close().await.unwrap();
    })
}

/// The tenants list's rows carry no time of their own (they are kept between renders); their ages
/// count on from the table's `data-now`.
#[test]
fn the_tenants_lists_ages_tick_from_the_tables_time() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let cluster = Cluster::new().await;
        cluster.create_tenant("acme").await;
        cluster.settle().await;
        let served = Served::start(cluster, false).await;
        let b = driver.session(true).await;
        b.goto(&served.at("/tenants")).await.unwrap();
        wait_live(&b).await;
        let age = "tr[data-tenant='acme'] [data-clock='age']";
        assert!(
            !exists(&b, "tr[data-tenant='acme'] [data-now]").await,
            "the row carries no time of its own"
        );
        let first = text(&b, age).await;
        assert!(first.ends_with('s'), "{first:?}");
        // The server's clock stands still (a test clock): only the browser's counting moves the age.
        eventually("the age ticked", || async {
            let now = text(&b, age).await;
            now.ends_with('s') && now != first
        })
        .await;
        b.close().await.unwrap();
    })
}

#[test]
fn a_finished_runs_countdown_reaches_zero_and_the_row_disappears() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let cluster = Cluster::new().await;
        cluster.with_a_failed_provision_run().await;
        let served = Served::start(cluster, false).await;
        let c = &served.cluster;
        let b = driver.session(true).await;
        b.goto(&served.at("/runs")).await.unwrap();
        wait_live(&b).await;
        let row = "tr[data-run='acme-provision-1']";
        eventually("a countdown", || async {
            text(&b, &format!("{row} .countdown"))
                .await
                .starts_with("in ")
        })
        .await;
        b.goto(&served.at("/runs/acme-provision-1")).await.unwrap();
        wait_live(&b).await;
        screenshot(&b, "run-detail").await;
        b.goto(&served.at("/runs")).await.unwrap();
        wait_live(&b).await;
        // Jump to twenty seconds before the cleanup (room for a slow browser to read the last seconds);
        // the page learns the new time at its next refresh.
        let due = c
            .run("acme-provision-1")
            .await
            .unwrap()
            .status
            .unwrap()
            .cleanup_at
            .unwrap()
            .0;
        c.clock
            .advance(due.duration_since(c.clock.now()) - SignedDuration::from_secs(20));
        c.ctx.stores.changes.notify();
        eventually("the last seconds", || async {
            text(&b, &format!("{row} .countdown")).await.ends_with('s')
                && !text(&b, &format!("{row} .countdown")).await.contains('m')
        })
        .await;
        screenshot(&b, "runs-countdown").await;
        let mut saw: Vec<String> = Vec::new();
        let deadline = std::time::Instant::now() + PATIENCE;
        while exists(&b, row).await {
            assert!(
                std::time::Instant::now() < deadline,
                "the row is still there after {PATIENCE:?}; countdown showed {saw:?}"
            );
            let t = text(&b, &format!("{row} .countdown")).await;
            if !t.is_empty() && saw.last() != Some(&t) {
                saw.push(t);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(saw.len() >= 2, "the countdown ticked: {saw:?}");
        assert!(
            c.run("acme-provision-1").await.is_none(),
            "cleaned up in the cluster too"
        );
        assert!(
            c.tenant("acme").await.history()[0].name == "acme-provision-1",
            "and kept in the tenant's history"
        );
        b.close().await.unwrap();
    })
}

#[test]
fn everything_works_with_javascript_off() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let served = Served::start(Cluster::new().await, false).await;
        let b = driver.session(false).await;
        b.goto(&served.at("/tenants/new")).await.unwrap();
        assert_eq!(text(&b, ".live").await, "○ Static", "no script ran");
        fill(&b, "#name", "Bad_Name").await;
        fill(&b, "#display_name", "Globex").await;
        click(&b, "form.stack button[type=submit]").await;
        eventually("the error from the server", || async {
            text(&b, ".flash.bad").await.contains("is invalid")
        })
        .await;
        assert_eq!(
            attr(&b, "#display_name", "value").await,
            "Globex",
            "what was typed is kept"
        );
        fill(&b, "#name", "globex").await;
        choose_manual(&b).await;
        click(&b, "form.stack button[type=submit]").await;
        eventually("the tenant page", || async {
            b.current_url().await.unwrap().path() == "/tenants/globex"
        })
        .await;
        assert!(
            text(&b, ".flash.ok")
                .await
                .contains("Tenant globex created")
        );
        click(
            &b,
            "form[action='/actions/tenants/globex/provision'] button",
        )
        .await;
        eventually("the provision notice", || async {
            text(&b, ".flash.ok")
                .await
                .contains("globex-provision-1 started")
        })
        .await;
        eventually("the run listed after a reload", || async {
            b.refresh().await.unwrap();
            exists(&b, "tr[data-run='globex-provision-1']").await
        })
        .await;
        screenshot(&b, "no-js-tenant").await;
        click(&b, ".actions a.btn").await;
        click(&b, ".confirm button.danger").await;
        eventually("suspended", || async {
            text(&b, ".flash.ok").await.contains("globex suspended")
        })
        .await;
        assert!(served.cluster.tenant("globex").await.spec.suspended);
        // The phase follows once the operator has reconciled; without JavaScript, a reload shows it.
        eventually("globex under the Suspended filter", || async {
            b.goto(&served.at("/tenants?phase=Suspended"))
                .await
                .unwrap();
            exists(&b, "tr[data-tenant='globex']").await
        })
        .await;
        b.close().await.unwrap();
    })
}

/// An empty cluster, served, the new-tenant form open in a new session and live.
async fn new_tenant_form(driver: &Driver) -> (Served, Client) {
    let served = Served::start(Cluster::new().await, false).await;
    let b = driver.session(true).await;
    b.goto(&served.at("/tenants/new")).await.unwrap();
    wait_live(&b).await;
    (served, b)
}

#[test]
fn a_display_name_with_a_script_tag_is_shown_as_text() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let (served, b) = new_tenant_form(&driver).await;
        fill(&b, "#name", "xss").await;
        fill(&b, "#display_name", "<script>alert(1)</script>").await;
        click(&b, "form.stack button[type=submit]").await;
        eventually("the tenant page", || async {
            b.current_url().await.unwrap().path() == "/tenants/xss"
        })
        .await;
        b.goto(&served.at("/tenants")).await.unwrap();
        wait_live(&b).await;
        assert_eq!(
            text(&b, "tr[data-tenant='xss'] .sub").await,
            "<script>alert(1)</script>"
        );
        assert!(b.get_alert_text().await.is_err(), "no alert ran");
        // The text reaches the page only as text and as escaped data for hydration, never as a script.
        let injected = b
            .execute(
                "return [...document.scripts].some(s => s.textContent.trim() === 'alert(1)')",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(injected, false);
        screenshot(&b, "tenants-xss").await;
        b.close().await.unwrap();
    })
}

#[test]
fn live_updates_resume_after_a_dropped_connection_without_duplicate_rows() {
    use sentry_tenants_tests::browser::Relay;
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let cluster = Cluster::new().await;
        cluster.create_tenant("acme").await;
        let served = Served::start(cluster, false).await;
        let relay = Relay::start(&served.url).await;
        let b = driver.session(true).await;
        b.goto(&relay.at("/tenants")).await.unwrap();
        wait_live(&b).await;
        mark_page(&b).await;

        relay.cut();
        eventually("the page to notice the drop", || async {
            text(&b, ".live").await == "○ Static"
        })
        .await;
        served.cluster.create_tenant("beta").await;
        // Evidence, not a pause: the page tried to reconnect after beta existed, and was refused.
        let refused = relay.refused();
        eventually("the page to try again while cut off", || async {
            relay.refused() > refused
        })
        .await;
        assert!(
            !exists(&b, "tr[data-tenant='beta']").await,
            "nothing can arrive while disconnected"
        );
        relay.restore();

        wait_live(&b).await;
        eventually("the change made during the drop", || async {
            exists(&b, "tr[data-tenant='beta']").await
        })
        .await;
        for name in ["acme", "beta"] {
            let rows = b
                .find_all(Locator::Css(&format!("tr[data-tenant='{name}']")))
                .await
                .unwrap();
            assert_eq!(rows.len(), 1, "{name} shown once");
        }
        assert!(same_page(&b).await, "resumed without a reload");
        b.close().await.unwrap();
    })
}

/// How far the window is scrolled, in CSS pixels.
async fn scrolled(b: &Client) -> i64 {
    b.execute("return Math.round(window.scrollY)", vec![])
        .await
        .unwrap()
        .as_i64()
        .unwrap()
}

#[test]
fn back_and_reload_come_back_to_where_the_page_was_scrolled() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let cluster = Cluster::new().await;
        for i in 0..40 {
            cluster.create_tenant(&format!("t{i:02}")).await;
        }
        let served = Served::start(cluster, false).await;
        let b = driver.session(true).await;
        b.goto(&served.at("/tenants")).await.unwrap();
        wait_live(&b).await;
        b.execute(
            "document.querySelector(\"tr[data-tenant='t35']\").scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
        let far_down = scrolled(&b).await;
        assert!(
            far_down > 500,
            "the list is long enough to scroll: {far_down}"
        );
        mark_page(&b).await;

        click(&b, "tr[data-tenant='t35'] a[href='/tenants/t35']").await;
        eventually("the tenant's page", || async {
            b.current_url().await.unwrap().path() == "/tenants/t35"
        })
        .await;
        assert_eq!(scrolled(&b).await, 0, "a new page starts at the top");

        b.back().await.unwrap();
        eventually("back on the list, where it was scrolled to", || async {
            b.current_url().await.unwrap().path() == "/tenants"
                && exists(&b, "tr[data-tenant='t35']").await
                && scrolled(&b).await == far_down
        })
        .await;
        assert!(same_page(&b).await, "Back loaded no page");

        b.refresh().await.unwrap();
        wait_live(&b).await;
        assert!(!same_page(&b).await, "a reload is a page load");
        eventually("reloaded where it was scrolled to", || async {
            scrolled(&b).await == far_down
        })
        .await;
        b.close().await.unwrap();
    })
}

/// A browser keeps recent pages for Back (the back/forward cache); a kept page must not keep its event
/// stream, or after six full page loads every connection the browser allows to one host (HTTP/1.1) is
/// held by a stream and the seventh load stalls until one times out. It did: the accessibility test's
/// seventh page took a minute.
#[test]
fn pages_left_behind_close_their_event_streams() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let served = Served::start(Cluster::new().await, false).await;
        let b = driver.session(true).await;
        let pages = ["/", "/tenants", "/runs", "/tenants/new"];
        for page in pages.iter().cycle().take(9) {
            b.goto(&served.at(page)).await.unwrap();
            wait_live(&b).await;
        }
        // The page left behind closes its stream as the next one opens its own: never more than two
        // at once (kept streams would pile up to six, and the seventh load would stall).
        assert!(
            served.streams.peak() <= 2,
            "{} event streams were open at once",
            served.streams.peak()
        );
        eventually("one event stream open: the current page's", || async {
            served.streams.open() == 1
        })
        .await;
        // Back to a kept page: it opens its stream again and is live.
        b.back().await.unwrap();
        wait_live(&b).await;
        eventually("the page brought back is live on one stream", || async {
            served.streams.open() == 1
        })
        .await;
        b.close().await.unwrap();
    })
}

/// Whether the keyboard focus is on an element matching `css`.
async fn focused(b: &Client, css: &str) -> bool {
    b.execute(
        "return !!document.activeElement && document.activeElement.matches(arguments[0])",
        vec![serde_json::json!(css)],
    )
    .await
    .unwrap()
        == true
}

/// A provisioned tenant `acme`, served, its page open in a new session, live and marked.
async fn provisioned_acme_page(driver: &Driver) -> (Served, Client) {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.report_provisioned("acme").await;
    c.settle().await;
    let served = Served::start(c, false).await;
    let b = driver.session(true).await;
    b.goto(&served.at("/tenants/acme")).await.unwrap();
    wait_live(&b).await;
    mark_page(&b).await;
    (served, b)
}

/// A confirmation opened within the page (a client-side navigation, where `autofocus` does nothing)
/// takes the keyboard focus: Suspend's on its button, Delete's on the field for the tenant's name.
#[test]
fn a_confirmation_takes_the_keyboard_focus_when_it_opens() {
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let (_served, b) = provisioned_acme_page(&driver).await;
        click(&b, ".actions a[href*='confirm=suspend']").await;
        eventually("the focus on the Suspend confirmation's button", || async {
            focused(&b, ".confirm #confirm_suspend").await
        })
        .await;
        click(&b, ".confirm a.btn").await; // Cancel
        click(&b, ".actions a[href$='?confirm=delete']").await;
        eventually("the focus on the name to type", || async {
            focused(&b, ".confirm #confirm_name").await
        })
        .await;
        assert!(same_page(&b).await, "both opened without a page load");
        b.close().await.unwrap();
    })
}

/// Presses `key` on whatever has the keyboard focus, as the keyboard does (no element reference that a
/// live refresh could make stale).
async fn press(b: &Client, key: fantoccini::key::Key) {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    let value: char = key.into();
    let keys = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value })
        .then(KeyAction::Up { value });
    b.perform_actions(keys).await.expect("the key is pressed");
}

/// Waits until the page has not changed for a second: the live refreshes a change to the tenant set off
/// (the rename, then the status the reconciler writes for it) are over.
async fn quiet(b: &Client) {
    b.execute(
        "if (!window.__changed) { window.__changed = Date.now(); new MutationObserver(() => { window.__changed = Date.now(); }).observe(document.body, {childList: true, subtree: true}); }",
        vec![],
    )
    .await
    .unwrap();
    eventually("the page to hold still for a second", || async {
        b.execute("return Date.now() - window.__changed > 1000", vec![])
            .await
            .unwrap()
            == true
    })
    .await;
}

/// Presses Tab until the focus is on `css` (a keyboard user's way there), at most `limit` times.
async fn tab_to(b: &Client, css: &str, limit: usize) {
    for _ in 0..limit {
        if focused(b, css).await {
            return;
        }
        press(b, fantoccini::key::Key::Tab).await;
    }
    let at: serde_json::Value = b
        .execute(
            "let e = document.activeElement; return e ? e.outerHTML.slice(0, 200) : 'none'",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        focused(b, css).await,
        "Tab never reached {css}; the focus is on {at}"
    );
}

/// Suspend and Resume by keyboard alone: Tab to the action, Enter, the focus lands in the confirmation,
/// Cancel hands it back to the action that opened it, and a live refresh of the page in between (the
/// tenant changed meanwhile) keeps it where it is — a refresh re-renders the page's part, and the
/// focused element used to go with it, leaving the focus on the page and the person at the top.
#[test]
fn suspend_and_resume_by_keyboard_alone_with_the_page_refreshing_live() {
    use fantoccini::key::Key;
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let (served, b) = provisioned_acme_page(&driver).await;
        let suspend = ".actions a[href*='confirm=suspend']";
        tab_to(&b, suspend, 40).await;

        served
            .cluster
            .patch_spec("acme", serde_json::json!({"displayName": "Acme Renamed"}))
            .await;
        eventually("the live refresh to show the new display name", || async {
            text(&b, "p.sub").await == "Acme Renamed"
        })
        .await;
        assert!(
            focused(&b, suspend).await,
            "the focus stayed on Suspend through the refresh"
        );
        quiet(&b).await;
        assert!(focused(&b, suspend).await, "and through the ones after it");

        press(&b, Key::Enter).await;
        eventually("the focus in the confirmation", || async {
            focused(&b, ".confirm #confirm_suspend").await
        })
        .await;
        press(&b, Key::Tab).await;
        assert!(focused(&b, ".confirm a.btn").await, "Tab reaches Cancel");
        press(&b, Key::Enter).await;
        eventually(
            "the focus back on Suspend once the confirmation closed",
            || async { !exists(&b, ".confirm").await && focused(&b, suspend).await },
        )
        .await;

        press(&b, Key::Enter).await;
        eventually("the confirmation again", || async {
            focused(&b, ".confirm #confirm_suspend").await
        })
        .await;
        press(&b, Key::Enter).await;
        eventually("acme suspended", || async {
            served.cluster.tenant("acme").await.spec.suspended
        })
        .await;
        // As a plain post would: back out of the confirmation, with the answer, which the live
        // reloads the suspension sets off keep.
        eventually("the confirmation closed and the answer shown", || async {
            !exists(&b, ".confirm").await
                && text(&b, "#answer .flash.ok")
                    .await
                    .contains("acme suspended")
        })
        .await;
        let resume = "form[action='/actions/tenants/acme/resume'] button";
        eventually("Resume offered", || async { exists(&b, resume).await }).await;
        tab_to(&b, resume, 40).await;
        press(&b, Key::Enter).await;
        eventually("acme resumed", || async {
            !served.cluster.tenant("acme").await.spec.suspended
        })
        .await;
        assert!(same_page(&b).await, "all of it without a page load");
        b.close().await.unwrap();
    })
}

/// Types `text` on whatever has the keyboard focus, key by key.
async fn type_keys(b: &Client, text: &str) {
    use fantoccini::actions::{InputSource, KeyAction, KeyActions};
    let mut keys = KeyActions::new("keyboard".into());
    for value in text.chars() {
        keys = keys
            .then(KeyAction::Down { value })
            .then(KeyAction::Up { value });
    }
    b.perform_actions(keys).await.expect("the keys are pressed");
}

/// Create and Delete by keyboard alone: Tab to the fields and the buttons, type, Enter; Delete's
/// confirmation takes the focus on the field for the tenant's name.
#[test]
fn create_and_delete_by_keyboard_alone() {
    use fantoccini::key::Key;
    let _turn = one_browser_at_a_time();
    block_on(async {
        let driver = Driver::start();
        let (served, b) = new_tenant_form(&driver).await;
        tab_to(&b, "#name", 40).await;
        type_keys(&b, "kbd").await;
        tab_to(&b, "form.stack button[type=submit]", 40).await;
        press(&b, Key::Enter).await;
        eventually("the new tenant's page", || async {
            b.current_url().await.unwrap().path() == "/tenants/kbd"
        })
        .await;
        wait_live(&b).await;
        let delete = ".actions a[href$='?confirm=delete']";
        eventually("Delete offered", || async { exists(&b, delete).await }).await;
        tab_to(&b, delete, 40).await;
        press(&b, Key::Enter).await;
        eventually("the focus on the name to type", || async {
            focused(&b, ".confirm #confirm_name").await
        })
        .await;
        type_keys(&b, "kbd").await;
        press(&b, Key::Enter).await;
        eventually("kbd being deleted", || async {
            served
                .cluster
                .tenants()
                .get_opt("kbd")
                .await
                .unwrap()
                .is_none_or(|t| t.metadata.deletion_timestamp.is_some())
        })
        .await;
        b.close().await.unwrap();
    })
}
