//! Outlasting outages and bursts on the real control plane and node, with the installed operator:
//! a burst of Tenants never has more runs in flight than `--max-concurrent-runs` (counted from a watch
//! on the Jobs, which sees every change in the apiserver's order), and a five-minute ClickHouse outage
//! during Provision, Suspend and Deprovision of twenty tenants ends with every one of them converged
//! and no click.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use sentry_tenants::controller::job;
use sentry_tenants::crd::{Tenant, TenantPhase};
use sentry_tenants::install::Values;
use sentry_tenants_tests::PATIENCE;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_until, wait_until_within};

use crate::provision::tenant_in_phase;
use crate::{Setup, setup};

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

fn tenants_yaml(names: &[String], reclaim: &str) -> String {
    names
        .iter()
        .map(|name| {
            format!(
                "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\nspec:\n  reclaimPolicy: {reclaim}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// The most Jobs of the namespace unfinished at once, from a watch started before any exists.
fn watch_jobs_in_flight(s: &Setup) -> (Arc<Mutex<usize>>, tokio::task::JoinHandle<()>) {
    let most = Arc::new(Mutex::new(0));
    let into = Arc::clone(&most);
    let jobs: Api<Job> = Api::namespaced(s.admin.clone(), &s.ns);
    let task = tokio::spawn(async move {
        let mut unfinished = BTreeMap::new();
        let mut events = watcher(jobs, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) => {
                    unfinished.insert(job.name_any(), !job::finished(&job));
                }
                Ok(watcher::Event::Delete(job)) => {
                    unfinished.remove(&job.name_any());
                }
                _ => continue,
            }
            let now = unfinished.values().filter(|u| **u).count();
            let mut most = into.lock().unwrap();
            *most = (*most).max(now);
        }
    });
    (most, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_tenants_never_has_more_runs_in_flight_than_the_cap() {
    let s = setup("run-cap").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    let values = Values {
        clickhouse_url: ch.url.clone(),
        max_concurrent_runs: 3,
        ..s.values()
    };
    s.install_with(ADMIN, values).await;
    let (most, watch) = watch_jobs_in_flight(&s);
    let burst = names("burst", 12);
    s.apply(&tenants_yaml(&burst, "Delete"));
    for name in &burst {
        tenant_in_phase(&s, name, TenantPhase::Active).await;
    }
    watch.abort();
    let most = *most.lock().unwrap();
    assert!(
        most <= 3,
        "{most} Jobs were in flight at once; the cap is 3"
    );
    assert!(
        most >= 2,
        "the burst ran side by side at all ({most} at most)"
    );
    s.assert_no_forbidden();
}

/// The tenants' wanted states are what ClickHouse has: `provisioned` Active with a login that works,
/// `suspended` with locked logins, `deleted` gone with their user and database.
async fn converged(
    s: &Setup,
    ch: &ClickHouseStandIn,
    provisioned: &[String],
    suspended: &[String],
    deleted: &[String],
) -> Option<()> {
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    for name in provisioned {
        let t = tenants.get(name).await.ok()?;
        (t.phase() == Some(TenantPhase::Active)).then_some(())?;
    }
    for name in suspended {
        let t = tenants.get(name).await.ok()?;
        let settled = t
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "AccessLocked" && c.reason == "LoginsLocked");
        (settled && ch.is_locked(&s.ch_user(name)) == Some(true)).then_some(())?;
    }
    for name in deleted {
        tenants.get_opt(name).await.ok()?.is_none().then_some(())?;
        let user_gone = !ch.has_user(&s.ch_user(name));
        (user_gone && !ch.has_database(&s.ch_database(name))).then_some(())?;
    }
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_minute_clickhouse_outage_ends_with_every_tenant_converged_and_no_click() {
    let s = setup("outage").await;
    let ch = ClickHouseStandIn::start(&s.plane.host_address(), ADMIN.0, ADMIN.1).await;
    s.install_with_clickhouse(&ch.url, ADMIN).await;
    let before = names("before", 10);
    s.apply(&tenants_yaml(&before, "Delete"));
    for name in &before {
        tenant_in_phase(&s, name, TenantPhase::Active).await;
    }
    let (to_suspend, to_delete) = before.split_at(5);

    // ClickHouse goes away; meanwhile ten tenants are created, five suspended and five deleted.
    ch.go_down().await;
    let outage_began = tokio::time::Instant::now();
    let during = names("during", 10);
    s.apply(&tenants_yaml(&during, "Delete"));
    for name in to_suspend {
        s.set_suspended(name, true);
    }
    for name in to_delete {
        let (ok, _, err) = s.plane.kubectl(
            &["delete", "tenant", name, "-n", &s.ns, "--wait=false"],
            None,
        );
        assert!(ok, "{err}");
    }
    // Every kind of run fails and says it will be retried, on the tenant's condition.
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let retrying = |name: String, condition: &'static str, reason: &'static str| {
        let tenants = tenants.clone();
        async move {
            wait_until(
                &format!("{name}'s {condition} to say {reason}"),
                async || {
                    let t = tenants.get(&name).await.ok()?;
                    let c = t
                        .status?
                        .conditions
                        .into_iter()
                        .find(|c| c.type_ == condition && c.reason == reason)?;
                    c.message
                        .contains("retried until it succeeds")
                        .then_some(())
                },
            )
            .await
        }
    };
    retrying(during[0].clone(), "Provisioned", "ProvisionRetrying").await;
    retrying(to_suspend[0].clone(), "AccessLocked", "LockFailed").await;
    retrying(to_delete[0].clone(), "Reclaimed", "DeprovisionRetrying").await;
    // The outage lasts five minutes from its start: a scenario's length, not a deadline.
    tokio::time::sleep_until(outage_began + Duration::from_secs(300)).await;
    ch.come_back().await;

    // No click: each tenant's next attempt (at most 5 minutes away) succeeds.
    wait_until_within(
        "every tenant converged after the outage",
        Duration::from_secs(300) + PATIENCE,
        async || converged(&s, &ch, &during, to_suspend, to_delete).await,
    )
    .await;
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    s.assert_no_forbidden();
}
