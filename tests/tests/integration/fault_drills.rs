//! Fault drills: the reconcilers, the provisioner and the dashboard's actions under injected API faults
//! and an operator that restarts after every step. Each drill prints its figures in one summary line
//! and fails on any duplicate Job or RunJob, any tenant wrongly Active, any rotated credential.

use std::collections::BTreeMap;

use kube::ResourceExt;
use sentry_tenants::crd::{RunAction, RunPhase, Tenant, TenantPhase};
use sentry_tenants::provision::ChError;
use sentry_tenants_tests::fleet::{Fleet, clickhouse_user, tenant_names};
use sentry_tenants_tests::{Faults, ReplayOnFailure};

/// Not a restart (the real one is the cluster tier's `restart_drill`): the harness empties the caches
/// and refills them from the in-memory API before every pass, so each pass decides from a fresh list.
#[tokio::test]
async fn a_pass_from_freshly_listed_caches_after_every_step_completes_a_run_exactly_once() {
    let fleet = Fleet::new().await;
    let c = &fleet.cluster;
    fleet.create_tenants(&["acme".into()]).await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    let mut steps = 0;
    // Each step: a freshly started operator (empty caches) makes one pass; the world moves on.
    for _ in 0..20 {
        c.clear_stores();
        c.reconcile_all_once().await;
        steps += 1;
        if steps == 3 {
            fleet.run_pending_jobs().await;
        }
        if let Some(run) = c.run("acme-provision-1").await
            && run.phase() == Some(RunPhase::Succeeded)
            && c.tenant("acme").await.phase() == Some(TenantPhase::Active)
        {
            break;
        }
    }
    let job_creates = c.log.creates_of("jobs");
    sentry_tenants_tests::summary(&format!(
        "fresh-cache drill: steps={steps} job_creates={job_creates} duplicate_jobs={} runjobs={}",
        fleet.duplicate_jobs(),
        fleet.live_runs().await.len()
    ));
    assert_eq!(job_creates, 1, "exactly one Job");
    assert_eq!(fleet.duplicate_jobs(), 0);
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
    assert_eq!(
        c.log.creates_of("runjobs"),
        0,
        "no RunJob made by the operator for a provision"
    );
}

/// Tenants in the API-fault drill (`SENTRY_TENANTS_DRILL_TENANTS` overrides, e.g. for a quick local run).
fn drill_tenants() -> usize {
    sentry_tenants_tests::env_or("SENTRY_TENANTS_DRILL_TENANTS", 1000)
}

/// Seed of the API-fault drill (`SENTRY_TENANTS_DRILL_SEED` replays a failing one).
fn drill_seed() -> u64 {
    sentry_tenants_tests::env_or("SENTRY_TENANTS_DRILL_SEED", 0x5eed_2026)
}

/// Rounds the fleet may take to settle after a batch of clicks before the drill calls it a livelock.
const MAX_ROUNDS: usize = 40;
/// Times the drill's user clicks a button again after the dashboard reported an error or the tenant
/// did not get where the click should take it.
const MAX_USER_RETRIES: usize = 10;
/// Pending tenants from which a click cycle that gets none of them there ends the drill at once. With
/// 10 % of requests failing, a cycle gets about three in four of the pending tenants there (the green
/// drills need three or four cycles in all, the last ones for one or two tenants, which may well take
/// a cycle without progress): that not one of twelve or more gets there means something is broken,
/// not unlucky (about 0.3^12, 5e-7) — and a broken provisioner fails the drill after one cycle
/// instead of ten.
const STALL_FROM_PENDING: usize = 12;

/// Clicks `action` on every tenant in `names` until each is where `done` says it should be, letting the
/// fleet settle between batches, as a user with a list of tenants and a flaky cluster would. Returns the
/// clicks made, checking after every round that no tenant is wrongly Active and that no tenant's
/// `AccessLocked` condition says something ClickHouse does not enforce.
async fn click_until(
    fleet: &Fleet,
    names: &[String],
    action: &str,
    done: impl Fn(&Tenant) -> bool,
    wrong: &mut Wrong,
) -> usize {
    let mut clicks = 0;
    let mut pending: Vec<String> = names.to_vec();
    let mut stalled = false;
    let mut cycles = 0;
    let mut last_seen = String::new();
    while cycles < MAX_USER_RETRIES && !stalled {
        cycles += 1;
        let before = pending.len();
        for name in &pending {
            clicks += 1;
            fleet.click(name, action).await;
        }
        for _ in 0..MAX_ROUNDS {
            let round = fleet.round().await;
            wrong.check(fleet, action).await;
            if round.quiet() {
                break;
            }
        }
        let tenants: BTreeMap<String, Tenant> = fleet
            .tenants()
            .await
            .into_iter()
            .map(|t| (t.name_any(), t))
            .collect();
        pending.retain(|n| !done(&tenants[n]));
        if pending.is_empty() {
            break;
        }
        stalled = pending.len() == before && before >= STALL_FROM_PENDING;
        last_seen = where_it_is(&tenants[&pending[0]]);
        sentry_tenants_tests::summary(&format!(
            "{action}: {} of {} tenants pending after click cycle {cycles}",
            pending.len(),
            names.len()
        ));
    }
    assert!(
        pending.is_empty(),
        "{action}: {} of {} tenants never got there in {cycles} click cycles (the last without \
         progress: {stalled}); the first of them is {last_seen}; pending: {:?}",
        pending.len(),
        names.len(),
        &pending[..pending.len().min(10)]
    );
    clicks
}

/// A tenant's phase and its last run's outcome, for a drill that stops waiting for it.
fn where_it_is(t: &Tenant) -> String {
    let last = t
        .history()
        .last()
        .map(|h| format!("{:?}: {}", h.phase, h.message));
    format!(
        "{} in phase {:?}, last run {last:?}",
        t.name_any(),
        t.phase()
    )
}

/// What the drill saw wrong after its rounds, counted over all of them.
#[derive(Default)]
struct Wrong {
    active: usize,
    lock_claims: usize,
}

impl Wrong {
    async fn check(&mut self, fleet: &Fleet, action: &str) {
        let active = fleet.wrongly_active().await;
        if !active.is_empty() {
            eprintln!("wrongly Active after a {action} round: {active:?}");
        }
        let claims = fleet.lock_claims_wrong().await;
        if !claims.is_empty() {
            eprintln!("AccessLocked wrong after a {action} round: {claims:?}");
        }
        self.active += active.len();
        self.lock_claims += claims.len();
    }
}

/// What one API-fault drill did and left behind.
struct Drill {
    fleet: Fleet,
    faults: std::sync::Arc<Faults>,
    clicks: usize,
    wrong: Wrong,
    rotated: usize,
    rounds_to_quiet: Result<usize, sentry_tenants_tests::fleet::Round>,
    /// Changes of `spec.suspended` the drill made, by tenant.
    lock_changes: BTreeMap<String, usize>,
    /// Tenants whose ClickHouse lock went through other states than the ones the drill asked for, in
    /// order (read from the statements).
    lock_histories_wrong: Vec<String>,
}

/// Provisions `n` tenants, then suspends and resumes every other one, all through the dashboard's
/// action routes, with 10 % of the operator's and provisioner's API calls failing as `seed` decides.
async fn api_fault_drill(n: usize, seed: u64) -> Drill {
    let fleet = Fleet::new().await;
    let names = tenant_names(n);
    fleet.create_tenants(&names).await;
    let faults = Faults::new(seed, 100);
    faults.install(&fleet.cluster);
    let mut wrong = Wrong::default();

    let active = |t: &Tenant| t.phase() == Some(TenantPhase::Active);
    let mut clicks = click_until(&fleet, &names, "provision", active, &mut wrong).await;
    let passwords = fleet.stored_passwords().await;
    assert_eq!(passwords.len(), n, "one credentials Secret per tenant");

    let half: Vec<String> = names.iter().step_by(2).cloned().collect();
    let locked = |t: &Tenant| t.spec.suspended && t.access_locked();
    clicks += click_until(&fleet, &half, "suspend", locked, &mut wrong).await;
    let unlocked = |t: &Tenant| !t.spec.suspended && !t.access_locked() && active(t);
    clicks += click_until(&fleet, &half, "resume", unlocked, &mut wrong).await;
    let rounds_to_quiet = fleet.converge(MAX_ROUNDS).await;
    let rotated = passwords_changed(&passwords, &fleet.stored_passwords().await)
        + fleet.clickhouse.password_changes();
    let lock_changes: BTreeMap<String, usize> = half.iter().map(|n| (n.clone(), 2)).collect();
    let lock_histories_wrong = names
        .iter()
        .filter_map(|name| {
            let asked = if lock_changes.contains_key(name) {
                vec![false, true, false]
            } else {
                vec![false]
            };
            let states = fleet.lock_states(name);
            (states != asked)
                .then(|| format!("{name}: asked {asked:?}, ClickHouse went {states:?}"))
        })
        .collect();
    Drill {
        fleet,
        faults,
        clicks,
        wrong,
        rotated,
        rounds_to_quiet,
        lock_changes,
        lock_histories_wrong,
    }
}

/// Every request the drill's code made, in order, with the answer it got. An Event's name is left out:
/// kube's recorder makes it from the wall clock, and it decides nothing.
fn requests_made(fleet: &Fleet) -> Vec<String> {
    fleet
        .cluster
        .log
        .all()
        .iter()
        .map(|r| {
            let path = match r.path.split_once("/events/") {
                Some((before, _)) => format!("{before}/events/<name>"),
                // A Secret's marker is named by the Secret's uid, which the in-memory API draws at
                // random: the same Secret's marker, another name.
                None => match r.path.split_once("/configmaps/") {
                    Some((before, name)) => match name.split_once('.') {
                        Some((secret, _uid)) => format!("{before}/configmaps/{secret}.<uid>"),
                        None => r.path.clone(),
                    },
                    None => r.path.clone(),
                },
            };
            format!("{} {path}?{} {}", r.method, r.query, r.status)
        })
        .collect()
}

#[tokio::test]
async fn under_ten_percent_api_faults_a_thousand_tenants_converge_without_duplicates() {
    let n = drill_tenants();
    let seed = drill_seed();
    let _replay = ReplayOnFailure(format!(
        "SENTRY_TENANTS_DRILL_SEED={seed} SENTRY_TENANTS_DRILL_TENANTS={n} \
         cargo test -p sentry-tenants-tests --test integration fault_drills::under_ten_percent"
    ));
    let Drill {
        fleet,
        faults,
        clicks,
        wrong,
        rotated,
        rounds_to_quiet,
        lock_changes,
        lock_histories_wrong,
    } = api_fault_drill(n, seed).await;
    let duplicate_jobs = fleet.duplicate_jobs();
    let duplicate_runs = fleet.duplicate_runjobs(&lock_changes).await;
    let lock_mismatches = fleet.lock_mismatches().await;
    let live_runs = fleet.live_runs().await;
    sentry_tenants_tests::summary(&format!(
        "api-fault drill: seed={seed} tenants={n} requests={} faults_injected={} clicks={clicks} \
         runs={} duplicate_jobs={duplicate_jobs} duplicate_runjobs={duplicate_runs} \
         wrongly_active={} lock_claims_wrong={} lock_histories_wrong={} rotated={rotated} \
         lock_mismatches={} runs_left={} (replay: SENTRY_TENANTS_DRILL_SEED={seed})",
        fleet.cluster.log.len(),
        faults.injected(),
        fleet.runs_finished().await,
        wrong.active,
        wrong.lock_claims,
        lock_histories_wrong.len(),
        lock_mismatches.len(),
        live_runs.len(),
    ));
    assert!(faults.injected() > 0, "the drill injected no faults");
    assert_eq!(duplicate_jobs, 0, "a Job was created twice");
    assert_eq!(duplicate_runs, 0, "a run was created or succeeded twice");
    assert_eq!(
        wrong.active, 0,
        "a tenant was Active without working, unlocked credentials"
    );
    assert_eq!(
        wrong.lock_claims, 0,
        "a tenant said its logins were locked (or allowed) while ClickHouse had them otherwise"
    );
    assert!(
        lock_histories_wrong.is_empty(),
        "ClickHouse locked or unlocked a tenant the drill did not ask for: {:?}",
        &lock_histories_wrong[..lock_histories_wrong.len().min(10)]
    );
    assert_eq!(rotated, 0, "credentials changed");
    assert!(
        lock_mismatches.is_empty(),
        "ClickHouse lock disagrees with spec: {lock_mismatches:?}"
    );
    assert!(
        rounds_to_quiet.is_ok(),
        "no quiet round at the end: {rounds_to_quiet:?}"
    );
    assert!(
        live_runs.is_empty(),
        "finished runs not cleaned up: {live_runs:?}"
    );
}

/// A seed is a replay: the same seed makes the same requests in the same order and injects the same
/// faults at the same places, and another seed does not.
#[tokio::test]
async fn one_seed_gives_one_drill() {
    let first = api_fault_drill(24, 7).await;
    let again = api_fault_drill(24, 7).await;
    let other = api_fault_drill(24, 8).await;
    let (a, b, c) = (
        requests_made(&first.fleet),
        requests_made(&again.fleet),
        requests_made(&other.fleet),
    );
    assert!(first.faults.injected() > 0);
    assert_eq!(first.faults.injected(), again.faults.injected());
    let diverged = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        a.len() == b.len() && diverged.is_none(),
        "seed 7 twice: {} and {} requests, first difference at {diverged:?}: {:?} / {:?}",
        a.len(),
        b.len(),
        diverged.map(|i| &a[i]),
        diverged.map(|i| &b[i])
    );
    assert_ne!(a, c, "another seed, another drill");
}

/// Tenants whose stored password is not the one first stored.
fn passwords_changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> usize {
    before
        .iter()
        .filter(|(t, p)| after.get(*t) != Some(p))
        .count()
}

/// The tenant's last finished Provision run, from its history: (phase, message).
fn last_provision(t: &Tenant) -> Option<(RunPhase, String)> {
    t.history()
        .iter()
        .filter(|h| h.action == RunAction::Provision)
        .max_by_key(|h| h.finished_at.0)
        .map(|h| (h.phase, h.message.clone()))
}

#[tokio::test]
async fn clickhouse_lost_mid_provision_fails_classified_and_a_retry_keeps_the_credentials() {
    let fleet = Fleet::new().await;
    // How many ClickHouse queries a clean provision makes: the failure is injected before each of them.
    fleet.create_tenants(&["probe".into()]).await;
    fleet.click("probe", "provision").await;
    fleet.converge(MAX_ROUNDS).await.unwrap();
    let queries = fleet.clickhouse.statements().len() + 1; // + the tenant's own login check
    let kinds = [
        (
            ChError::Unreachable("connection refused".into()),
            "ClickHouse at http://clickhouse:8123 is unreachable: connection refused (check --clickhouse-url and that the server is running)",
        ),
        (
            ChError::Server {
                status: 401,
                code: Some(516),
                message: "Code: 516. admin: Authentication failed".into(),
            },
            "ClickHouse rejected the admin credentials (Code: 516. admin: Authentication failed): check the username and password in the admin Secret",
        ),
    ];
    let (mut cases, mut failed_as_classified, mut recovered, mut rotated) = (0, 0, 0, 0);
    for (kind, (error, classified)) in kinds.iter().enumerate() {
        for after in 0..queries {
            let name = format!("t-{kind}-{after}");
            fleet.create_tenants(std::slice::from_ref(&name)).await;
            fleet.clickhouse.fail_after(after, error.clone());
            assert!(fleet.click(&name, "provision").await);
            fleet.converge(MAX_ROUNDS).await.unwrap();
            let t = fleet.cluster.tenant(&name).await;
            if after == queries - 1 && matches!(error, ChError::Server { .. }) {
                // The admin's last query is done before the tenant's login check: nothing left to fail.
                assert_eq!(t.phase(), Some(TenantPhase::Active));
                fleet.clickhouse.recover();
                continue;
            }
            cases += 1;
            assert_eq!(
                last_provision(&t),
                Some((RunPhase::Failed, classified.to_string())),
                "{name}: the run ends Failed with the classified message"
            );
            assert_eq!(t.phase(), Some(TenantPhase::Failed), "{name}: not Active");
            failed_as_classified += 1;
            let stored = fleet.stored_passwords().await.get(&name).cloned();

            fleet.clickhouse.recover();
            assert!(fleet.click(&name, "provision").await);
            fleet.converge(MAX_ROUNDS).await.unwrap();
            let t = fleet.cluster.tenant(&name).await;
            assert_eq!(
                t.phase(),
                Some(TenantPhase::Active),
                "{name}: retry succeeds"
            );
            assert_eq!(
                last_provision(&t).map(|(p, _)| p),
                Some(RunPhase::Succeeded)
            );
            recovered += 1;
            let password = fleet.stored_passwords().await[&name].clone();
            if stored.is_some_and(|s| s != password) {
                rotated += 1;
            }
            assert!(
                fleet
                    .clickhouse
                    .may_log_in(&clickhouse_user(&name), &password),
                "{name}: the Secret's password logs in"
            );
        }
    }
    sentry_tenants_tests::summary(&format!(
        "clickhouse drill: cases={cases} failed_classified={failed_as_classified} recovered={recovered} rotated={rotated} duplicate_jobs={}",
        fleet.duplicate_jobs()
    ));
    assert_eq!(
        rotated, 0,
        "a retry changed the credentials stored by the failed run"
    );
    assert_eq!(fleet.duplicate_jobs(), 0);
}
