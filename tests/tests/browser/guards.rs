//! Nothing a test starts outlives it: a test that starts an operator process on the real control plane
//! and a Chromium session through the harness, then panics (a failing assertion, the normal way a test
//! ends early), leaves none of their processes running.

use std::collections::BTreeSet;
use std::time::Duration;

use sentry_tenants_tests::browser::{Driver, one_browser_at_a_time};
use sentry_tenants_tests::cluster_tier::setup;
use sentry_tenants_tests::control_plane::wait_until;
use sentry_tenants_tests::processes::wait_gone;

/// Each process's command line, for a failure message.
fn described(pids: &BTreeSet<u32>) -> Vec<String> {
    pids.iter()
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            format!("{pid}: {}", cmd.chars().take(120).collect::<String>())
        })
        .collect()
}

fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn an_operator_process_and_a_browser_a_test_started_are_gone_when_it_panics() {
    let _turn = one_browser_at_a_time();
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        sentry_tenants_tests::block_on(async {
            let s = setup("guards").await;
            s.install_idle().await;
            let (_, kubeconfig) = s.as_account("sentry-tenants").await;
            let operator = s.operator_process(&kubeconfig, "http://127.0.0.1:9", "guards");
            wait_until("the operator process to lead", async || {
                (s.lease_holder().await.as_deref() == Some("guards")).then_some(())
            })
            .await;
            let driver = Driver::start();
            let browser = driver.session(true).await;
            browser.goto("about:blank").await.expect("a page");
            let mut started = operator.processes();
            started.extend(driver.processes());
            // Named now: once the guards have run there is nothing left to read the names from.
            let named: Vec<(u32, String)> = started.iter().map(|&p| (p, command_name(p))).collect();
            started_tx.send(named).unwrap();
            panic!("a failure on purpose, with an operator process and a browser running");
        })
    });
    assert!(test.join().is_err(), "the test thread panicked");
    let named = started_rx.recv().expect("the processes the test started");
    let started: BTreeSet<u32> = named.iter().map(|(pid, _)| *pid).collect();
    let names: BTreeSet<&str> = named.iter().map(|(_, name)| name.as_str()).collect();
    for expected in [
        "sentry-tenants",
        "chromedriver",
        "chromium",
        // Chromium's crash handler leaves the process tree (its parent is pid 1, in a session of
        // its own): only the guard's mark finds it.
        "chrome_crashpad",
    ] {
        assert!(
            names.contains(expected),
            "{expected} among the processes the test started: {named:?}"
        );
    }
    let left = wait_gone(&started, Duration::from_secs(30));
    assert!(
        left.is_empty(),
        "still running after the test panicked: {:?}",
        described(&left)
    );
}
