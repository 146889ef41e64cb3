//! Many tenants at once on the real control plane, with the installed operator reconciling: provisioned
//! together, suspended together, half resumed while their Suspend runs are still in flight, the rest
//! resumed after. Provisioning pods write the tenants' status, the RunJob reconciler records history and
//! cleans runs up (a short TTL), and the Tenant controller reconciles from whatever its caches hold, all
//! at the same time. What must hold is read from the apiserver's own record (every version of every
//! Tenant, through a watch; the audit log) and from what ClickHouse was told.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use sentry_tenants::crd::{RunAction, RunJob, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::wait_until;

use sentry_tenants_tests::cluster_tier::tenants_with_provision_runs;

use crate::provision::password;
use crate::{Setup, setup};

const TENANTS: usize = 24;
/// Short, so cleanups (a history write, then a delete) overlap the other runs' status writes.
const RUN_TTL_SECONDS: u32 = 3;

/// One version of a Tenant as the apiserver sent it to a watch.
#[derive(Debug, Clone)]
struct Seen {
    access_locked: Option<bool>,
    history: Vec<String>,
}

/// Every version of every Tenant in the namespace, in the order the apiserver committed them.
struct Versions {
    seen: Arc<Mutex<BTreeMap<String, Vec<Seen>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Versions {
    fn watch(api: Api<Tenant>) -> Self {
        let seen = Arc::new(Mutex::new(BTreeMap::<String, Vec<Seen>>::new()));
        let into = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                let (watcher::Event::Apply(t) | watcher::Event::InitApply(t)) = (match event {
                    Ok(e) => e,
                    Err(_) => continue, // the watcher retries by itself
                }) else {
                    continue;
                };
                let version = Seen {
                    access_locked: t.status.as_ref().and_then(|s| s.access_locked),
                    history: t.history().iter().map(|h| h.name.clone()).collect(),
                };
                into.lock()
                    .unwrap()
                    .entry(t.name_any())
                    .or_default()
                    .push(version);
            }
        });
        Self { seen, task }
    }

    fn of(&self, tenant: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .get(tenant)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Versions {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn names() -> Vec<String> {
    (0..TENANTS).map(|i| format!("t{i:02}")).collect()
}

/// The lock states ClickHouse went through for `tenant`'s user, from the statements it was sent: the
/// user created open or locked, then each `ALTER USER … HOST`.
fn lock_states_told(ch: &ClickHouseStandIn, s: &Setup, tenant: &str) -> Vec<bool> {
    let quoted = format!("`{}`", s.ch_user(tenant));
    ch.statements()
        .iter()
        .filter(|s| s.contains(&quoted))
        .filter(|s| s.starts_with("CREATE USER ") || s.starts_with("ALTER USER "))
        .filter(|s| s.contains(" HOST "))
        .map(|s| s.contains(" HOST NONE"))
        .collect()
}

fn without_repeats(states: impl IntoIterator<Item = bool>) -> Vec<bool> {
    let mut out: Vec<bool> = Vec::new();
    for s in states {
        if out.last() != Some(&s) {
            out.push(s);
        }
    }
    out
}

async fn patch_suspended(tenants: &Api<Tenant>, name: &str, suspended: bool) {
    let patch = serde_json::json!({"spec": {"suspended": suspended}});
    tenants
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

/// Every tenant Active and open, reconciled at its latest generation, and every Provision run (a short
/// TTL) cleaned up. The lock runs the reconciler made keep the default TTL and may still be there.
async fn settled(s: &Setup, tenants: &Api<Tenant>) {
    let runs: Api<RunJob> = Api::namespaced(s.admin.clone(), &s.ns);
    wait_until(
        &format!("all {TENANTS} tenants Active and open"),
        async || {
            let list = tenants.list(&ListParams::default()).await.ok()?;
            let done = list.items.len() == TENANTS
                && list.items.iter().all(|t| {
                    let status = t.status.as_ref();
                    t.phase() == Some(TenantPhase::Active)
                        && status.and_then(|s| s.access_locked) == Some(false)
                        && status.and_then(|s| s.observed_generation) == t.metadata.generation
                });
            done.then_some(())
        },
    )
    .await;
    wait_until("every Provision run cleaned up", async || {
        let left = runs.list(&ListParams::default()).await.ok()?.items;
        (!left.iter().any(|r| r.spec.action == RunAction::Provision)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tenants_at_once_lose_no_history_revert_no_lock_and_run_each_job_once() {
    let started = Instant::now();
    let s = setup("drill").await;
    let ch =
        ClickHouseStandIn::start(&s.plane.host_address(), "ch-admin", "ch-admin-password").await;
    s.install_with_clickhouse(&ch.url, ("ch-admin", "ch-admin-password"))
        .await;
    let tenants: Api<Tenant> = Api::namespaced(s.admin.clone(), &s.ns);
    let versions = Versions::watch(tenants.clone());
    let names = names();

    s.apply(&tenants_with_provision_runs(&names, RUN_TTL_SECONDS));

    // Each tenant is suspended the moment it is seen Active, so its Suspend run overlaps the Provision
    // run's cleanup (a history write three seconds after it finished); every other tenant is resumed
    // at once, while its Suspend run (if the reconciler made one before it saw the change) is in
    // flight; the rest once they are locked.
    let early = |n: &str| {
        n.trim_start_matches('t')
            .parse::<usize>()
            .is_ok_and(|i| i % 2 == 0)
    };
    let mut suspended: BTreeSet<String> = BTreeSet::new();
    while suspended.len() < TENANTS {
        let list = tenants.list(&ListParams::default()).await.unwrap().items;
        for t in list
            .iter()
            .filter(|t| t.phase() == Some(TenantPhase::Active))
        {
            let n = t.name_any();
            if suspended.insert(n.clone()) {
                patch_suspended(&tenants, &n, true).await;
                if early(&n) {
                    patch_suspended(&tenants, &n, false).await;
                }
            }
        }
        assert!(
            started.elapsed() < sentry_tenants_tests::PATIENCE * 3,
            "tenants never Active: {:?}",
            names
                .iter()
                .filter(|n| !suspended.contains(*n))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let late: Vec<&String> = names.iter().filter(|n| !early(n)).collect();
    wait_until("the late half locked", async || {
        let list = tenants.list(&ListParams::default()).await.ok()?;
        late.iter()
            .all(|n| {
                list.items
                    .iter()
                    .any(|t| t.name_any() == **n && t.access_locked())
            })
            .then_some(())
    })
    .await;
    for n in &late {
        patch_suspended(&tenants, n, false).await;
    }
    settled(&s, &tenants).await;

    let audit = s.plane.audit_events();
    let created = |resource: &str| -> BTreeMap<String, usize> {
        let mut by_name = BTreeMap::new();
        for e in audit.iter().filter(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["namespace"] == s.ns.as_str()
                && e["responseStatus"]["code"] == 201
        }) {
            let name = e["objectRef"]["name"].as_str().unwrap_or_default();
            *by_name.entry(name.to_owned()).or_insert(0) += 1;
        }
        by_name
    };
    let jobs = created("jobs");
    let runs = created("runjobs");
    let twice: Vec<_> = jobs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "Jobs created more than once: {twice:?}");
    assert_eq!(
        jobs.keys().collect::<Vec<_>>(),
        runs.keys().collect::<Vec<_>>(),
        "one Job for each run, none for anything else"
    );

    let final_list = tenants.list(&ListParams::default()).await.unwrap().items;
    let live_names = s.run_names().await;
    let live: BTreeSet<&str> = live_names.iter().map(String::as_str).collect();
    let mut lock_runs = 0;
    for n in &names {
        let seen = versions.of(n);
        // A lock state in the status that ClickHouse was never told is a revert by a stale writer.
        let in_status = without_repeats(seen.iter().filter_map(|v| v.access_locked));
        let told = without_repeats(lock_states_told(&ch, &s, n));
        assert_eq!(
            in_status, told,
            "{n}: accessLocked went through states ClickHouse was not put in"
        );
        assert!(
            told.len() <= 3 && told.first() == Some(&false) && told.last() == Some(&false),
            "{n}: opened, at most one lock and one unlock: {told:?}"
        );
        lock_runs += told.len() - 1;
        // History only grows: a record, once written, is in every later version.
        let mut recorded = BTreeSet::new();
        for v in &seen {
            let now: BTreeSet<&String> = v.history.iter().collect();
            let lost: Vec<_> = recorded.difference(&now).collect();
            assert!(lost.is_empty(), "{n}: history lost {lost:?}");
            recorded = now;
        }
        // Every run made for it is either still there or, cleaned up, kept in its history.
        let t = final_list.iter().find(|t| t.name_any() == *n).unwrap();
        let kept: BTreeSet<&str> = t.history().iter().map(|h| h.name.as_str()).collect();
        let ran: BTreeSet<&str> = runs
            .keys()
            .map(String::as_str)
            .filter(|r| r.starts_with(&format!("{n}-")))
            .collect();
        let gone: BTreeSet<&str> = ran.difference(&live).copied().collect();
        assert!(
            kept.is_superset(&gone) && kept.is_subset(&ran),
            "{n}: cleaned-up runs {gone:?}, history {kept:?}"
        );
        assert!(
            kept.contains(format!("{n}-provision-1").as_str()),
            "{n}: its Provision run, cleaned up, is in its history: {kept:?}"
        );
        assert!(
            ch.may_log_in(&s.ch_user(n), &password(&s, n).await),
            "{n}: resumed, its Secret's password logs in"
        );
    }
    assert!(ch.refused().is_empty(), "{:?}", ch.refused());
    s.assert_no_forbidden();
    sentry_tenants_tests::summary(&format!(
        "cluster drill: {TENANTS} tenants, {} runs, {} Jobs (none twice), {lock_runs} lock changes, \
         {} tenant versions watched, no lock reverted, no history lost, {:.0} s",
        runs.len(),
        jobs.len(),
        versions
            .seen
            .lock()
            .unwrap()
            .values()
            .map(Vec::len)
            .sum::<usize>(),
        started.elapsed().as_secs_f64()
    ));
}
