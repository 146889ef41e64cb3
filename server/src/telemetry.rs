//! Logs (tracing, text or JSON) and Prometheus metrics (prometheus-client).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing_subscriber::EnvFilter;

use crate::crd::{RunPhase, TenantPhase};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// How much a process logs unless `RUST_LOG` says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    /// A command a person runs and reads: its own lines say what happened, and a failure is one line.
    Quiet,
    /// A process others read through its log (the operator, a provisioning pod).
    Service,
    /// `-v`: what happens underneath, the requests behind a failure included.
    Verbose,
}

impl Verbosity {
    fn default_filter(self) -> &'static str {
        match self {
            Self::Quiet => "off",
            // kube-client's own line for every failed request repeats what the caller reports.
            Self::Service => "info,kube=warn,kube_client::client::builder=off",
            Self::Verbose => "debug,hyper=info,hyper_util=info,h2=info,rustls=info,tower=info",
        }
    }
}

/// Installs the global subscriber. `RUST_LOG` overrides the default filter.
pub fn init_logging(format: LogFormat, verbosity: Verbosity) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(verbosity.default_filter()));
    // Colour only for a person at a terminal, never in a pod's log (it ends up in a run's log tail
    // and on the dashboard) and never with NO_COLOR set.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The shard a replica reconciles; empty (no label) for an unsharded install's replicas and for the
/// main operator of a sharded one.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ShardLabel {
    pub shard: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub controller: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabel {
    pub condition: String,
}

impl PhaseLabel {
    pub fn new(phase: &str) -> Self {
        Self {
            phase: phase.to_owned(),
        }
    }
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ControllerLabel, Counter>,
    pub reconcile_errors: Family<ErrorLabel, Counter>,
    pub reconcile_duration: Family<ControllerLabel, Histogram>,
    pub reconcile_queue_depth: Family<ControllerLabel, Histogram>,
    pub tenants: Family<PhaseLabel, Gauge>,
    pub tenants_retrying: Family<ConditionLabel, Gauge>,
    pub runs: Family<PhaseLabel, Gauge>,
    pub runs_finished: Family<PhaseLabel, Counter>,
    pub runs_in_flight: Gauge,
    pub runs_waiting: Gauge,
    pub runs_max_in_flight: Gauge,
    pub jobs_created: Counter,
    pub cleanups: Counter,
    pub is_leader: Family<ShardLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sentry_tenants");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let reconcile_errors = Family::<ErrorLabel, Counter>::default();
        let reconcile_duration = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        // 0, then 1, 2, 4 … 8,192 objects: a queue a whole fleet deep after a leadership change shows
        // in the top buckets, a keeping-up controller in the first.
        let reconcile_queue_depth =
            Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
                Histogram::new(std::iter::once(0.0).chain(exponential_buckets(1.0, 2.0, 14)))
            });
        let tenants = Family::<PhaseLabel, Gauge>::default();
        let tenants_retrying = Family::<ConditionLabel, Gauge>::default();
        let runs = Family::<PhaseLabel, Gauge>::default();
        let runs_finished = Family::<PhaseLabel, Counter>::default();
        let (runs_in_flight, runs_waiting, runs_max_in_flight) =
            (Gauge::default(), Gauge::default(), Gauge::default());
        let jobs_created = Counter::default();
        let cleanups = Counter::default();
        let is_leader = Family::<ShardLabel, Gauge>::default();
        registry.register(
            "reconciles",
            "Reconciles run, by controller",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by controller and error kind",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_queue_depth",
            "Objects still waiting for a reconcile when one starts",
            reconcile_queue_depth.clone(),
        );
        registry.register("tenants", "Tenants by phase", tenants.clone());
        registry.register(
            "tenants_retrying",
            "Tenants whose wanted state ClickHouse does not have yet: a run failed and its retry is scheduled, by the condition that says so",
            tenants_retrying.clone(),
        );
        registry.register(
            "runs",
            "RunJobs by phase (Unknown: no status yet)",
            runs.clone(),
        );
        registry.register(
            "runs_finished",
            "Runs that reached a final phase",
            runs_finished.clone(),
        );
        registry.register(
            "runs_in_flight",
            "Runs whose Job is unfinished: the slots of --max-concurrent-runs taken",
            runs_in_flight.clone(),
        );
        registry.register(
            "runs_waiting",
            "Runs in flight that have no Job yet: waiting for a free slot, or for the reconcile that makes it",
            runs_waiting.clone(),
        );
        registry.register(
            "runs_max_in_flight",
            "The cap on runs in flight (--max-concurrent-runs)",
            runs_max_in_flight.clone(),
        );
        registry.register(
            "jobs_created",
            "Jobs created for RunJobs",
            jobs_created.clone(),
        );
        registry.register(
            "runjob_cleanups",
            "Finished RunJobs deleted after their TTL",
            cleanups.clone(),
        );
        // `sentry_tenants_build_info{version="…"} 1`: which version each replica runs, for joins
        // and for spotting a replica left on an old version during an upgrade.
        registry.register(
            "build",
            "The version of this binary",
            prometheus_client::metrics::info::Info::new(vec![(
                "version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            )]),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (of its shard, if it is one)",
            is_leader.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            reconcile_queue_depth,
            tenants,
            tenants_retrying,
            runs,
            runs_finished,
            runs_in_flight,
            runs_waiting,
            runs_max_in_flight,
            jobs_created,
            cleanups,
            is_leader,
        }
    }
}

impl Metrics {
    /// Counts a reconcile and records its duration when the returned guard drops.
    pub fn reconcile_timer(self: &Arc<Self>, controller: &str) -> ReconcileTimer {
        let label = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconciles.get_or_create(&label).inc();
        ReconcileTimer {
            metrics: Arc::clone(self),
            label,
            start: Instant::now(),
        }
    }

    pub fn count_error(&self, controller: &str, kind: &str) {
        let label = ErrorLabel {
            controller: controller.to_owned(),
            error: kind.to_owned(),
        };
        self.reconcile_errors.get_or_create(&label).inc();
    }

    /// Samples how many objects still wait for `controller`'s workers as one of its reconciles starts.
    pub fn observe_queue_depth(&self, controller: &str, waiting: usize) {
        let label = ControllerLabel {
            controller: controller.to_owned(),
        };
        self.reconcile_queue_depth
            .get_or_create(&label)
            .observe(waiting as f64);
    }

    /// Prometheus text, with the gauges set from `now` (read from the caches at scrape time).
    pub fn render(&self, now: &Snapshot) -> String {
        for phase in TenantPhase::ALL {
            let n = now.tenants.get(&phase).copied().unwrap_or_default();
            self.tenants
                .get_or_create(&PhaseLabel::new(phase.as_str()))
                .set(n as i64);
        }
        for (condition, _) in crate::crd::RETRYING {
            let n = now
                .tenants_retrying
                .get(condition)
                .copied()
                .unwrap_or_default();
            let label = ConditionLabel {
                condition: condition.to_owned(),
            };
            self.tenants_retrying.get_or_create(&label).set(n as i64);
        }
        for phase in RunPhase::ALL.map(Some).into_iter().chain([None]) {
            let n = now.runs.get(&phase).copied().unwrap_or_default();
            let label = phase.map_or("Unknown", RunPhase::as_str);
            self.runs
                .get_or_create(&PhaseLabel::new(label))
                .set(n as i64);
        }
        self.runs_in_flight.set(now.slots.in_flight as i64);
        self.runs_waiting.set(now.slots.waiting as i64);
        self.runs_max_in_flight.set(now.slots.max as i64);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

/// What the scrape-time gauges show, counted by whoever holds the caches.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub tenants: HashMap<TenantPhase, usize>,
    /// Tenants with a run being retried, by the condition that says so.
    pub tenants_retrying: HashMap<&'static str, usize>,
    /// Runs by phase; `None`: no status yet.
    pub runs: HashMap<Option<RunPhase>, usize>,
    pub slots: RunsInFlight,
}

/// The cap on runs in flight as counted now.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunsInFlight {
    pub in_flight: usize,
    pub waiting: usize,
    /// The cap itself.
    pub max: usize,
}

pub struct ReconcileTimer {
    metrics: Arc<Metrics>,
    label: ControllerLabel,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        let secs = self.start.elapsed().as_secs_f64();
        self.metrics
            .reconcile_duration
            .get_or_create(&self.label)
            .observe(secs);
    }
}
