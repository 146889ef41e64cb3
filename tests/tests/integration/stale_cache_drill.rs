//! The stale-cache drill: both reconcilers deciding from caches that lag the API by up to
//! `SENTRY_TENANTS_STALE_LAG` steps (each cache on its own, as three watches would), every cached object
//! reconciled side by side, Jobs whose pods start one or more steps late, a user suspending and resuming
//! tenants at random meanwhile, and the clock
//! moved past every cleanup deadline after each step, so cleaned-up runs vanish from the API while old
//! caches still show the world before them.

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;
use kube::ResourceExt;
use sentry_tenants::crd::HISTORY_LIMIT;
use sentry_tenants::crd::{DEFAULT_TTL_SECONDS, TenantPhase};
use sentry_tenants_tests::fleet::{Fleet, Snapshot, clickhouse_user, tenant_names};
use sentry_tenants_tests::{ReplayOnFailure, XorShift};

const TENANTS: usize = 10;
const STEPS: usize = 120;
/// Tenants the user flips (suspends if running, resumes if suspended) each step.
const FLIPS_PER_STEP: usize = 2;
const MAX_ROUNDS: usize = 40;

/// How many steps a cache may lag (`SENTRY_TENANTS_STALE_LAG`; 0 is the fresh-cache control run).
fn max_lag() -> usize {
    sentry_tenants_tests::env_or("SENTRY_TENANTS_STALE_LAG", 3)
}

fn drill_seed() -> u64 {
    sentry_tenants_tests::env_or("SENTRY_TENANTS_DRILL_SEED", 0x57a1_e2026)
}

/// Each tenant's ClickHouse lock (`None`: no user).
fn locks(fleet: &Fleet, names: &[String]) -> BTreeMap<String, Option<bool>> {
    names
        .iter()
        .map(|n| (n.clone(), fleet.clickhouse.is_locked(&clickhouse_user(n))))
        .collect()
}

#[tokio::test]
async fn caches_lagging_the_api_neither_duplicate_nor_lose_nor_revert() {
    let (lag, seed) = (max_lag(), drill_seed());
    let _replay = ReplayOnFailure(format!(
        "SENTRY_TENANTS_DRILL_SEED={seed} SENTRY_TENANTS_STALE_LAG={lag} \
         cargo test -p sentry-tenants-tests --test integration stale_cache_drill"
    ));
    let mut rng = XorShift::new(seed);
    let fleet = Fleet::new().await;
    let c = &fleet.cluster;
    let names = tenant_names(TENANTS);
    fleet.create_tenants(&names).await;
    for name in &names {
        assert!(fleet.click(name, "provision").await);
    }
    fleet.converge(MAX_ROUNDS).await.expect("provisioned");
    let passwords = fleet.stored_passwords().await;

    let mut past: Vec<Snapshot> = vec![fleet.snapshot().await];
    let (mut flips, mut errors) = (0, 0);
    // Changes of `spec.suspended` the user made, by tenant.
    let mut changes: BTreeMap<String, usize> = BTreeMap::new();
    let mut reverts: Vec<String> = Vec::new();
    let mut lost: Vec<String> = Vec::new();
    // Every history record seen on each tenant, by run uid.
    let mut recorded: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for step in 0..STEPS {
        for _ in 0..FLIPS_PER_STEP {
            let name = &names[rng.below(TENANTS as u64) as usize];
            let action = if c.tenant(name).await.spec.suspended {
                "resume"
            } else {
                "suspend"
            };
            if fleet.click(name, action).await {
                flips += 1;
                *changes.entry(name.clone()).or_default() += 1;
            }
        }
        let mut lagging = || {
            let behind = rng.below(lag.min(past.len() - 1) as u64 + 1) as usize;
            past[past.len() - 1 - behind].clone()
        };
        let (tenants, runs, jobs) = (lagging(), lagging(), lagging());
        let round = fleet
            .lagging_pass(&tenants, &runs, &jobs, |f| rng.shuffle(f))
            .await;
        errors += round.errors;

        // Half of the pending Jobs' pods run (the others start a step or more later); whatever a pod
        // does to ClickHouse must move it towards the spec.
        let before = locks(&fleet, &names);
        fleet.run_pending_jobs_where(|_| rng.below(2) == 0).await;
        for (name, after) in locks(&fleet, &names) {
            let suspended = c.tenant(&name).await.spec.suspended;
            if after != before[&name] && after != Some(suspended) {
                reverts.push(format!(
                    "step {step}: {name} went {:?} → {after:?} while spec.suspended={suspended}",
                    before[&name]
                ));
            }
        }
        c.clock.advance(SignedDuration::from_secs(
            i64::from(DEFAULT_TTL_SECONDS) + 1,
        ));

        let now = fleet.snapshot().await;
        for t in &now.tenants {
            let history: BTreeSet<String> = t.history().iter().map(|h| h.uid.clone()).collect();
            let seen = recorded.entry(t.name_any()).or_default();
            if history.len() < HISTORY_LIMIT && !seen.is_subset(&history) {
                lost.push(format!(
                    "step {step}: {} dropped a history record",
                    t.name_any()
                ));
            }
            seen.extend(history);
        }
        past.push(now);
    }

    // The user stops; fresh caches settle everything.
    let rounds_to_quiet = fleet.converge(MAX_ROUNDS).await;
    let duplicate_jobs = fleet.duplicate_jobs();
    let duplicate_runjobs = fleet.duplicate_runjobs(&changes).await;
    let lock_mismatches = fleet.lock_mismatches().await;
    let claims_wrong = fleet.lock_claims_wrong().await;
    let not_active = fleet
        .tenants()
        .await
        .iter()
        .filter(|t| !t.spec.suspended && t.phase() != Some(TenantPhase::Active))
        .map(|t| t.name_any())
        .collect::<Vec<_>>();
    let rotated = fleet.stored_passwords().await != passwords;
    sentry_tenants_tests::summary(&format!(
        "stale-cache drill: seed={seed} max_lag={lag} tenants={TENANTS} steps={STEPS} flips={flips} \
         reconcile_errors={errors} runs={} duplicate_jobs={duplicate_jobs} duplicate_runjobs={duplicate_runjobs} \
         reverts={} lost_history={} lock_mismatches={} claims_wrong={} rotated={rotated} \
         (replay: SENTRY_TENANTS_DRILL_SEED={seed} SENTRY_TENANTS_STALE_LAG={lag})",
        fleet.runs_finished().await,
        reverts.len(),
        lost.len(),
        lock_mismatches.len(),
        claims_wrong.len(),
    ));
    assert!(
        rounds_to_quiet.is_ok(),
        "no quiet round: {rounds_to_quiet:?}"
    );
    assert_eq!(duplicate_jobs, 0, "a Job was created twice");
    assert_eq!(
        duplicate_runjobs, 0,
        "a RunJob was created twice under one name, or more lock runs succeeded than the user made changes"
    );
    assert!(
        reverts.is_empty(),
        "ClickHouse moved away from the spec: {reverts:#?}"
    );
    assert!(lost.is_empty(), "history lost: {lost:#?}");
    assert!(
        lock_mismatches.is_empty(),
        "lock ≠ spec: {lock_mismatches:?}"
    );
    assert!(claims_wrong.is_empty(), "{claims_wrong:?}");
    assert!(not_active.is_empty(), "not Active: {not_active:?}");
    assert!(!rotated, "credentials changed");
    assert_eq!(fleet.clickhouse.password_changes(), 0);
}
