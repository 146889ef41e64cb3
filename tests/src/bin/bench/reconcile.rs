//! Reconcile cost: N tenants and N Provision runs in the in-memory API, both reconcilers driven to a
//! fixpoint over the shared caches. Writes are counted by the recording client; timings cover the
//! reconcile calls only (not the harness refilling the caches).

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use sentry_tenants::controller::{runjob, tenant};
use sentry_tenants_tests::fleet::{Fleet, is_counted_write};
use sentry_tenants_tests::{Cluster, NS};

use crate::report::{Figure, Goal};
use crate::{Timings, figure, timings};

/// Timed repetitions of the no-op pass and of its baseline; the best of each is kept.
const RUNS: usize = 5;
/// The baseline's cache reads are ~10× faster than the reconciles: each timed repetition reads them
/// this many times over, so that one lasts about as long as a no-op pass and a scheduler hiccup is a
/// small part of it instead of most of it.
const BASELINE_ROUNDS: usize = 10;

pub async fn measure(n: usize) -> (Vec<Figure>, Fleet) {
    let fleet = Fleet::with_provision_runs(n).await;
    let c = &fleet.cluster;
    let objects = (2 * n) as f64;

    // New objects to the fixpoint (the Jobs have not started, so nothing else moves).
    c.log.clear();
    let started = std::time::Instant::now();
    let passes = to_fixpoint(&fleet).await;
    let converge_secs = started.elapsed().as_secs_f64();
    let status_writes = c
        .log
        .count(|r| is_counted_write(r) && r.path.ends_with("/status"));
    let all_writes = c.log.count(is_counted_write);
    let job_creates = c.log.creates_of("jobs");

    // The same objects again: every reconcile must find nothing to do.
    c.sync_stores().await;
    c.log.clear();
    let stores = c.ctx.stores.clone();
    let runs = stores.runjobs.state();
    let tenants = stores.tenants.state();
    let (reconciles, noop) = noop_pass(c, RUNS).await;
    let noop_secs = noop.best;
    let noop_writes = c.log.count(is_counted_write) as f64 / RUNS as f64;
    let noop_requests = c.log.len() as f64 / RUNS as f64;

    // Baseline: only the cache reads those reconciles make (tenant and Job of each run, runs of each
    // tenant), none of the deciding or comparing.
    let baseline = timings(RUNS, || async {
        let mut found = 0usize;
        for _ in 0..BASELINE_ROUNDS {
            for r in &runs {
                let t = stores
                    .tenants
                    .get(&ObjectRef::new(&r.spec.tenant).within(NS));
                let j = stores.jobs.get(&ObjectRef::new(&r.name_any()).within(NS));
                found += usize::from(t.is_some()) + usize::from(j.is_some());
            }
            for t in &tenants {
                found += c.ctx.runs_of(&t.name_any()).len();
            }
        }
        std::hint::black_box(found);
    })
    .await;
    let baseline_secs = baseline.best / BASELINE_ROUNDS as f64;

    // A restart: the caches empty, filled again from the API as the watches' first lists do, then every
    // object reconciled once (all of them find nothing to do).
    c.clear_stores();
    let started = std::time::Instant::now();
    c.sync_stores().await;
    let refilled_secs = started.elapsed().as_secs_f64();
    noop_pass(c, 1).await;
    let restart_secs = started.elapsed().as_secs_f64();

    // The rest of each run's life: the Job runs the provisioner, the run finishes, is recorded on its
    // tenant and cleaned up.
    c.log.clear();
    fleet
        .converge(20)
        .await
        .expect("runs finish and are cleaned up");
    let lifecycle_writes = c.log.count(is_counted_write) as f64 / n as f64;
    let lifecycle_breakdown = breakdown(&c.log.writes(), n);

    let figures = vec![
        figure(
            "status writes per object, new tenants and runs to fixpoint",
            status_writes as f64 / objects,
            "writes",
        )
        .goal(Goal::AtMost(1.05))
        .note(format!("{status_writes} status writes for {objects} objects")),
        figure(
            "all writes per object, same",
            all_writes as f64 / objects,
            "writes",
        )
        .note(format!(
            "+ {job_creates} Job creates; Events not counted; {passes} passes, {converge_secs:.2} s"
        )),
        figure(
            "restart: empty caches to every object reconciled",
            restart_secs,
            "s",
        )
        .note(format!(
            "the caches listed again from the in-memory API ({refilled_secs:.2} s), then one reconcile of each \
             of the {objects} objects, none of which has anything to do"
        )),
        figure("writes per no-op reconcile", noop_writes / reconciles, "writes")
            .goal(Goal::AtMost(0.0))
            .note(format!(
                "{noop_writes} writes and {noop_requests} API requests in a pass of {reconciles} no-op reconciles"
            )),
        figure("no-op reconciles per second", reconciles / noop_secs, "/s")
            .note(format!("best of {RUNS} passes")),
        figure("no-op pass: spread over the passes", noop.spread(), "×")
            .note("slowest / fastest pass"),
        figure(
            "read-only baseline per second",
            reconciles / baseline_secs,
            "/s",
        )
        .note(format!(
            "the same cache reads, no decisions; best of {RUNS} repetitions of {BASELINE_ROUNDS} rounds each"
        )),
        figure("read-only baseline: spread over the repetitions", baseline.spread(), "×")
            .note("slowest / fastest repetition: what a ratio against this baseline can move by noise alone"),
        figure(
            "no-op reconcile / read-only baseline",
            noop_secs / baseline_secs,
            "×",
        )
        .note("time ratio: what deciding and comparing costs over reading"),
        figure(
            "writes per Provision run, Job start to cleanup",
            lifecycle_writes,
            "writes",
        )
        .note(lifecycle_breakdown),
    ];
    (figures, fleet)
}

/// Reconcile passes until one writes nothing; how many it took.
async fn to_fixpoint(fleet: &Fleet) -> usize {
    let mut passes = 0;
    loop {
        passes += 1;
        let pass = fleet.reconcile_pass().await;
        if pass.writes == 0 && pass.errors == 0 {
            return passes;
        }
        assert!(passes < 10, "no fixpoint after {passes} passes: {pass:?}");
    }
}

/// Every cached run and tenant reconciled once more, where each finds nothing to do: (how many
/// reconciles a pass makes, the timings of `passes`).
pub async fn noop_pass(c: &Cluster, passes: usize) -> (f64, Timings) {
    let runs = c.ctx.stores.runjobs.state();
    let tenants = c.ctx.stores.tenants.state();
    let secs = timings(passes, || async {
        for r in &runs {
            runjob::reconcile(Arc::clone(r), c.ctx.clone())
                .await
                .expect("no-op reconcile");
        }
        for t in &tenants {
            tenant::reconcile(Arc::clone(t), c.ctx.clone())
                .await
                .expect("no-op reconcile");
        }
    })
    .await;
    ((runs.len() + tenants.len()) as f64, secs)
}

/// No-op reconciles per second at `n` tenants + `n` runs, the best of `passes` (what `bench
/// noop-rate` prints): the figure the static build is compared on.
pub async fn noop_rate(n: usize, passes: usize) -> f64 {
    let fleet = Fleet::with_provision_runs(n).await;
    to_fixpoint(&fleet).await;
    fleet.cluster.sync_stores().await;
    let (reconciles, secs) = noop_pass(&fleet.cluster, passes).await;
    reconciles / secs.best
}

/// Writes per run by kind, e.g. "PATCH runjobs/status 2.0, POST secrets 1.0".
pub fn breakdown(writes: &[sentry_tenants_tests::Recorded], per: usize) -> String {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for w in writes {
        *counts.entry(w.kind()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k} {:.2}", *v as f64 / per as f64))
        .collect::<Vec<_>>()
        .join(", ")
}
