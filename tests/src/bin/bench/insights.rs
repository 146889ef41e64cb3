//! The overview's charts and needs-attention list (`web::insights`) over N tenants and their runs, each
//! tenant carrying a full history (20 finished runs, one in five failed: the most the status keeps):
//! what one overview render spends on them, read from the counts and indexes the watches keep, beside
//! the cost of merely walking the same objects.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use sentry_tenants::crd::HISTORY_LIMIT;
use sentry_tenants::crd::{RunAction, RunPhase, RunRecord, Tenant};
use sentry_tenants::web::insights;
use sentry_tenants_tests::{Cluster, NS};

use crate::figure;
use crate::report::{Goal, Section};

const ROUNDS: usize = 21;

/// Median of `ROUNDS` timings of `work`, in milliseconds.
fn median_ms(mut work: impl FnMut() -> usize) -> (f64, usize) {
    let mut times = Vec::with_capacity(ROUNDS);
    let mut seen = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        seen = std::hint::black_box(work());
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times[ROUNDS / 2], seen)
}

/// `t` with [`HISTORY_LIMIT`] finished runs over the last day, one in five failed.
fn with_full_history(mut t: Tenant, now: jiff::Timestamp) -> Tenant {
    let name = t.metadata.name.clone().unwrap_or_default();
    let history = (0..HISTORY_LIMIT)
        .map(|i| {
            let finished = now - jiff::SignedDuration::from_mins(70 * i as i64);
            RunRecord {
                name: format!("{name}-suspend-{i}"),
                uid: format!("{name}-{i}"),
                action: RunAction::ALL[i % RunAction::ALL.len()],
                phase: if i % 5 == 0 {
                    RunPhase::Failed
                } else {
                    RunPhase::Succeeded
                },
                message: String::new(),
                started_at: Some(Time(
                    finished - jiff::SignedDuration::from_secs(5 + i as i64),
                )),
                finished_at: Time(finished),
                log_tail: None,
                generation: Some(1),
            }
        })
        .collect();
    t.status.get_or_insert_with(Default::default).history = history;
    t
}

pub async fn measure(c: &Cluster, n: usize) -> Section {
    let tenants: Vec<_> = c.tenants().list(&Default::default()).await.unwrap().items;
    let runs: Vec<_> = c.runjobs().list(&Default::default()).await.unwrap().items;
    let now = jiff::Timestamp::now();
    let tenants: Vec<_> = tenants
        .into_iter()
        .map(|t| Arc::new(with_full_history(t, now)))
        .collect();
    let runs: Vec<_> = runs.into_iter().map(Arc::new).collect();
    let (walk, _) = median_ms(|| {
        tenants.iter().map(|t| t.history().len()).sum::<usize>()
            + runs.iter().filter(|r| r.is_in_flight()).count()
    });
    // What the watches keep up to date as the objects come: the caches, counts and indexes.
    c.fill_stores(
        tenants.iter().map(|t| (**t).clone()).collect(),
        runs.iter().map(|r| (**r).clone()).collect(),
        Vec::new(),
    );
    let stores = &c.ctx.stores;
    let (all, records) = median_ms(|| {
        let first = insights::first_hour(now);
        let per_hour = stores.finished_runs.per_hour(NS, first, insights::HOURS);
        let hours = insights::runs_per_hour(&per_hour, first);
        let durations = insights::durations(&stores.finished_runs.durations(NS));
        let concerned = stores.concerned_tenants(NS);
        let failed = stores.failed_runs(NS);
        let (attention, _) = insights::attention(&concerned, &failed, now);
        hours.len() + durations.len() + attention.len()
    });
    Section::new(
        format!("Overview charts and attention list, {n} tenants"),
        vec![
            figure("charts + attention list, median of 21", all, "ms")
                .goal(Goal::AtMost(50.0))
                .note(format!(
                    "{} tenants, {} runs, {records} hours, durations and entries out",
                    tenants.len(),
                    runs.len()
                )),
            figure("baseline: walking the same objects", walk, "ms"),
        ],
    )
}
