//! Runs both controllers on one watch per kind: one cache per kind, read by
//! the reconcilers and the dashboard alike.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use tokio::sync::watch;

use super::backoff::{WATCH_MAX_DELAY, WatchBackoff};
use super::queue::{Key, Queue};
use super::triggers::Triggers;
use super::{
    Context, FinishedRuns, JobIndex, Queues, RunIndex, TenantIndex, error_policy, runjob, tenant,
};
use crate::crd::{RunJob, SECRET_MARKER_COMPONENT, Tenant};
use crate::telemetry::{RunsInFlight, Snapshot};

/// Label on everything we create; the Job cache holds only those.
pub const MANAGED_BY_SELECTOR: &str = "app.kubernetes.io/managed-by=sentry-tenants";

/// Read sides of the caches, and a counter of their changes for the dashboard's live updates.
#[derive(Clone)]
pub struct Stores {
    pub tenants: Store<Tenant>,
    pub runjobs: Store<RunJob>,
    pub jobs: Store<Job>,
    /// The markers of the tenants' credentials Secrets (rule 11), by name.
    pub markers: Store<ConfigMap>,
    /// Runs by tenant and the queue for slots, fed from the RunJob watch alongside its cache.
    pub run_index: RunIndex,
    /// The unfinished Jobs the cap counts, fed from the Job watch alongside its cache.
    pub job_index: JobIndex,
    /// Tenants in the dashboard's orders, fed from the Tenant watch alongside its cache.
    pub tenant_index: TenantIndex,
    /// The overview's counts of finished runs, fed from both watches.
    pub finished_runs: FinishedRuns,
    pub changes: Changes,
    pub synced: Synced,
    /// What the watches bring into the caches, for the controllers' triggers.
    pub triggers: Arc<WatchTriggers>,
}

/// The controllers' trigger streams, one fan-out per watched kind (see [`Triggers`]).
#[derive(Default)]
pub struct WatchTriggers {
    pub tenants: Triggers<Tenant>,
    pub runjobs: Triggers<RunJob>,
    pub jobs: Triggers<Job>,
}

/// One of the caches.
#[derive(Clone, Copy, Debug)]
pub enum Cache {
    Tenants = 1,
    RunJobs = 2,
    Jobs = 4,
    Markers = 8,
}

const ALL_CACHES: u8 =
    Cache::Tenants as u8 | Cache::RunJobs as u8 | Cache::Jobs as u8 | Cache::Markers as u8;

/// Which caches have had their first complete list, for any number of waiters and for the probe.
///
/// Not `Store::wait_until_ready`: a store's readiness is a oneshot that keeps one waker, and the
/// controller's runner already waits on it. A second waiter (or the probe's poll) takes that wake-up
/// away from whichever registered first, which then sleeps until something else wakes its task; it
/// cost the cluster tests a stalled start up to their 120 s timeout.
#[derive(Clone)]
pub struct Synced(Arc<watch::Sender<u8>>);

impl Synced {
    fn new() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
    /// `cache` had its first complete list (the watches mark it; tests that feed caches by hand too).
    pub fn mark(&self, cache: Cache) {
        self.0.send_if_modified(|synced| {
            let before = *synced;
            *synced |= cache as u8;
            *synced != before
        });
    }
    pub fn all(&self) -> bool {
        *self.0.borrow() == ALL_CACHES
    }
    /// Whether `cache` had its first complete list.
    pub fn has(&self, cache: Cache) -> bool {
        *self.0.borrow() & cache as u8 != 0
    }
    pub async fn wait_all(&self) {
        let _ = self.0.subscribe().wait_for(|s| *s == ALL_CACHES).await;
    }
}

/// Counts changes to the cached tenants and runs; the dashboard's event stream follows it.
#[derive(Clone)]
pub struct Changes(Arc<watch::Sender<u64>>);

impl Changes {
    fn new() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
    /// Announces a change (the watches do it; tests that feed the caches by hand do it too).
    pub fn notify(&self) {
        self.0.send_modify(|v| *v += 1);
    }
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// Write sides of the caches: fed by watches in `run`, by hand in tests.
pub struct StoreWriters {
    pub tenants: reflector::store::Writer<Tenant>,
    pub runjobs: reflector::store::Writer<RunJob>,
    pub jobs: reflector::store::Writer<Job>,
    /// Feeds no trigger: the Tenant controller is told of markers through [`marker_watch`], deletions
    /// included (the controllers' triggers are told only what a watch brings into a cache).
    pub markers: reflector::store::Writer<ConfigMap>,
}

impl Stores {
    /// The tenants of `namespace` that may need attention, from the cache through the tenant index
    /// (not a scan).
    pub fn concerned_tenants(&self, namespace: &str) -> Vec<Arc<Tenant>> {
        let cached = |name: &String| {
            let key = ObjectRef::new(name).within(namespace);
            self.tenants.get(&key)
        };
        let concerned = self.tenant_index.concerned(namespace);
        concerned.iter().filter_map(cached).collect()
    }

    /// The failed runs of `namespace` not cleaned up yet, from the cache through the run index (not
    /// a scan).
    pub fn failed_runs(&self, namespace: &str) -> Vec<Arc<RunJob>> {
        let cached = self.run_index.read(|i| i.failed()).into_iter();
        let cached = cached.filter_map(|key| self.runjobs.get(&key));
        cached
            .filter(|r| r.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    /// The gauges `/metrics` shows, counted now: tenants by phase from the tenant index, the rest
    /// from the caches (the runs are few: finished ones are cleaned up; retrying is read off each
    /// tenant's conditions).
    pub fn metrics_snapshot(&self, namespace: &str, slots: RunsInFlight) -> Snapshot {
        let mut tenants_retrying = HashMap::new();
        for tenant in self.tenants.state() {
            for condition in tenant.retrying() {
                *tenants_retrying.entry(condition).or_default() += 1;
            }
        }
        let mut runs = HashMap::new();
        for run in self.runjobs.state() {
            *runs.entry(run.phase()).or_default() += 1;
        }
        Snapshot {
            tenants: self.tenant_index.counts(namespace).0,
            tenants_retrying,
            runs,
            slots,
        }
    }

    pub fn shared() -> (Stores, StoreWriters) {
        let (tenants, tw) = reflector::store();
        let (runjobs, rw) = reflector::store();
        let (jobs, jw) = reflector::store();
        let mw = reflector::store::Writer::default();
        (
            Stores {
                tenants,
                runjobs,
                jobs,
                markers: mw.as_reader(),
                run_index: RunIndex::default(),
                job_index: JobIndex::default(),
                tenant_index: TenantIndex::default(),
                finished_runs: FinishedRuns::default(),
                changes: Changes::new(),
                synced: Synced::new(),
                triggers: Arc::default(),
            },
            StoreWriters {
                tenants: tw,
                runjobs: rw,
                jobs: jw,
                markers: mw,
            },
        )
    }

    /// Follows a Tenant watch event in the indexes kept beside the cache.
    pub fn index_tenant_event(&self, event: &watcher::Event<Tenant>) {
        self.tenant_index.apply(event);
        self.finished_runs.tenant_event(event);
    }

    /// Follows a RunJob watch event in the indexes kept beside the cache.
    pub fn index_run_event(&self, event: &watcher::Event<RunJob>) {
        self.run_index.apply(event);
        self.finished_runs.run_event(event);
    }

    /// Follows a Job watch event in the index kept beside the cache.
    pub fn index_job_event(&self, event: &watcher::Event<Job>) {
        self.job_index.apply(event);
    }

    /// `tenant`'s runs in `namespace`, from the cache, found through the run index (not a scan).
    pub fn runs_of(&self, namespace: &str, tenant: &str) -> Vec<Arc<RunJob>> {
        self.run_index
            .read(|i| i.runs_of(tenant))
            .iter()
            .filter_map(|key| self.runjobs.get(key))
            .filter(|r| {
                r.spec.tenant == tenant && r.metadata.namespace.as_deref() == Some(namespace)
            })
            .collect()
    }

    /// For a reflector's output stream, what follows once an event is in the cache: the first list
    /// marks the cache synced, and a change to a tenant or run, deletions included (the controllers'
    /// triggers are not told of those), is announced to the dashboard.
    fn after_cached<K, E>(
        &self,
        cache: Cache,
    ) -> impl FnMut(&Result<watcher::Event<K>, E>) + use<K, E> {
        let (synced, changes) = (self.synced.clone(), self.changes.clone());
        let announced = matches!(cache, Cache::Tenants | Cache::RunJobs);
        move |event| match event {
            Ok(watcher::Event::InitDone) => {
                synced.mark(cache);
                if announced {
                    changes.notify();
                }
            }
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) if announced => {
                changes.notify();
            }
            _ => {}
        }
    }

    /// For a reflector's output stream: tells the controllers' triggers what each event brought into
    /// `cache` (after the indexes, so that a reconcile finds the object in both).
    fn triggering<K>(
        &self,
        of: fn(&WatchTriggers) -> &Triggers<K>,
        cache: &Store<K>,
    ) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + use<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let (triggers, cache) = (Arc::clone(&self.triggers), cache.clone());
        move |event| {
            if let Ok(event) = event {
                of(&triggers).announce(event, &cache);
            }
        }
    }

    /// Resolves once every cache has had its first complete list.
    pub async fn wait_until_ready(&self) {
        self.synced.wait_all().await;
    }

    pub fn is_ready(&self) -> bool {
        self.synced.all()
    }
}

/// For a watch's stream: a warning when it breaks, once per outage (a retry every few seconds would
/// fill the log), and a note when it lists again. An expired resourceVersion (410 Gone: the API
/// compacted the history the watch would resume from) is routine, not a break: the watcher lists
/// again at once.
fn reporting_breaks<K>(
    watch: &'static str,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    let mut health = WatchHealth::default();
    move |event| {
        let error = event.as_ref().err().map(tracing::field::display);
        match health.read(event) {
            WatchNews::Broke => tracing::warn!(
                watch,
                error,
                retry_within = ?WATCH_MAX_DELAY,
                "a watch broke; retrying until the API answers"
            ),
            WatchNews::StillBroken => tracing::debug!(watch, error, "a watch is still broken"),
            WatchNews::Expired => tracing::info!(
                watch,
                "a watch's place in the API's history expired (410 Gone); listing again"
            ),
            WatchNews::Back => tracing::info!(watch, "a watch is back; listing again"),
            WatchNews::Nothing => {}
        }
    }
}

/// Whether a watch is broken, read from its stream's events.
#[derive(Debug, Default)]
struct WatchHealth {
    broken: bool,
}

/// What one event of a watch's stream says about the watch.
#[derive(Debug, PartialEq, Eq)]
enum WatchNews {
    Broke,
    StillBroken,
    Expired,
    Back,
    Nothing,
}

impl WatchHealth {
    fn read<K>(&mut self, event: &Result<watcher::Event<K>, watcher::Error>) -> WatchNews {
        match event {
            Err(watcher::Error::WatchError(status)) if status.code == 410 && !self.broken => {
                WatchNews::Expired
            }
            Err(_) if self.broken => WatchNews::StillBroken,
            Err(_) => {
                self.broken = true;
                WatchNews::Broke
            }
            Ok(_) if self.broken => {
                self.broken = false;
                WatchNews::Back
            }
            Ok(_) => WatchNews::Nothing,
        }
    }
}

/// Yields once each time leadership is gained, to reconcile everything the new leader inherits.
fn on_leadership_gained(leader: watch::Receiver<bool>) -> impl Stream<Item = ()> + Send {
    futures::stream::unfold(leader, |mut rx| async move {
        loop {
            rx.changed().await.ok()?;
            if *rx.borrow_and_update() {
                return Some(((), rx));
            }
        }
    })
}

/// An object from its cache; a miss is confirmed against the API, because a cache may lag a moment
/// behind (a Job just created, a tenant a form just made) and acting on a stale "absent" would be wrong.
pub async fn cached_or_fetched<K>(
    store: &Store<K>,
    api: &Api<K>,
    namespace: &str,
    name: &str,
) -> kube::Result<Option<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if let Some(obj) = store.get(&ObjectRef::new(name).within(namespace)) {
        return Ok(Some(obj));
    }
    Ok(api.get_opt(name).await?.map(Arc::new))
}

/// Nothing reads `managedFields` from the caches; dropping them before they are stored keeps the caches
/// near the size of the objects themselves (see the memory figure in BENCHMARKS.md).
pub fn drop_managed_fields<K: kube::ResourceExt>(obj: &mut K) {
    obj.managed_fields_mut().clear();
}

/// A Tenant as the caches keep it: no managedFields, and its history's log tail (the newest record's,
/// up to 2 KiB) replaced by an empty one: no reconcile reads it, the tenant page reads it from the API,
/// and the history writer only needs to know that it is there (to remove it when a newer record comes).
pub fn slim_tenant(tenant: &mut Tenant) {
    drop_managed_fields(tenant);
    if let Some(status) = tenant.status.as_mut() {
        for record in &mut status.history {
            if record.log_tail.is_some() {
                record.log_tail = Some(String::new());
            }
        }
    }
}

/// Maps a RunJob to the Tenant whose phase and history depend on it.
pub fn tenant_of_run(run: Arc<RunJob>) -> Option<ObjectRef<Tenant>> {
    let ns = run.metadata.namespace.as_deref()?;
    Some(ObjectRef::new(&run.spec.tenant).within(ns))
}

/// Every watch's settings: ended by the server before the client's read timeout (see
/// [`crate::cluster::WATCH_TIMEOUT_SECONDS`]).
fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(crate::cluster::WATCH_TIMEOUT_SECONDS)
}

/// One watch per kind in `namespace`, each feeding its cache (and the controllers' triggers); the
/// Jobs are watched only when given a writer for them. Never ends.
pub fn watch_caches(
    client: kube::Client,
    namespace: &str,
    stores: &Stores,
    (tw, rw, jw): (
        reflector::store::Writer<Tenant>,
        reflector::store::Writer<RunJob>,
        Option<reflector::store::Writer<Job>>,
    ),
) -> impl Future<Output = ()> + Send + 'static {
    let ns = namespace.to_owned();
    let stores = stores.clone();
    let tenant_watch = watcher(
        Api::<Tenant>::namespaced(client.clone(), &ns),
        watch_config(),
    )
    .backoff(WatchBackoff::default())
    .inspect(reporting_breaks("tenants"))
    .modify(slim_tenant)
    .reflect(tw)
    .inspect({
        // After the cache, so a name the index lists is found in it (but for a moment after a
        // deletion, when the page leaves the name out).
        let stores = stores.clone();
        move |event| {
            if let Ok(event) = event {
                stores.index_tenant_event(event);
            }
        }
    })
    .inspect(stores.after_cached(Cache::Tenants))
    .inspect(stores.triggering(|t| &t.tenants, &stores.tenants))
    .for_each(|_| futures::future::ready(()));
    let run_watch = watcher(
        Api::<RunJob>::namespaced(client.clone(), &ns),
        watch_config(),
    )
    .backoff(WatchBackoff::default())
    .inspect(reporting_breaks("runjobs"))
    .modify(drop_managed_fields)
    .inspect({
        let stores = stores.clone();
        move |event| {
            if let Ok(event) = event {
                stores.index_run_event(event);
            }
        }
    })
    .reflect(rw)
    .inspect(stores.after_cached(Cache::RunJobs))
    .inspect(stores.triggering(|t| &t.runjobs, &stores.runjobs))
    .for_each(|_| futures::future::ready(()));
    let job_watch = async move {
        let Some(jw) = jw else {
            // Not watched: the cache stays empty, and is as complete as it will get.
            stores.synced.mark(Cache::Jobs);
            return;
        };
        let job_config = watch_config().labels(MANAGED_BY_SELECTOR);
        watcher(Api::<Job>::namespaced(client, &ns), job_config)
            .backoff(WatchBackoff::default())
            .inspect(reporting_breaks("jobs"))
            .modify(drop_managed_fields)
            .inspect({
                let stores = stores.clone();
                move |event| {
                    if let Ok(event) = event {
                        stores.index_job_event(event);
                    }
                }
            })
            .reflect(jw)
            .inspect(stores.after_cached(Cache::Jobs))
            .inspect(stores.triggering(|t| &t.jobs, &stores.jobs))
            .for_each(|_| futures::future::ready(()))
            .await;
    };
    async move {
        futures::join!(tenant_watch, run_watch, job_watch);
    }
}

/// The markers of the tenants' credentials Secrets (`provision::secret_marker`) feeding their
/// cache. Yields the tenant of every marker that comes or goes, and, once the first list is in,
/// every cached tenant whose marker the list lacks: a Secret deleted while nobody watched shows only
/// by its marker's absence (the others' reconciles at start-up already had nothing to decide).
pub fn marker_watch(
    client: kube::Client,
    namespace: &str,
    stores: &Stores,
    writer: reflector::store::Writer<ConfigMap>,
) -> impl Stream<Item = ObjectRef<Tenant>> + Send + 'static {
    let selector = format!(
        "{}={SECRET_MARKER_COMPONENT},{MANAGED_BY_SELECTOR}",
        crate::labels::COMPONENT
    );
    let (tenants, markers) = (stores.tenants.clone(), stores.markers.clone());
    let unmarked = move |t: &Tenant| {
        let name = super::tenant::watched_marker(t);
        let namespace = t.metadata.namespace.as_deref().unwrap_or_default();
        name.is_some_and(|n| markers.get(&ObjectRef::new(&n).within(namespace)).is_none())
    };
    watcher(
        Api::<ConfigMap>::namespaced(client, namespace),
        watch_config().labels(&selector),
    )
    .backoff(WatchBackoff::default())
    .inspect(reporting_breaks("markers"))
    .modify(drop_managed_fields)
    .reflect(writer)
    .inspect(stores.after_cached(Cache::Markers))
    .flat_map(move |event| {
        let tenants: Vec<ObjectRef<Tenant>> = match event {
            Ok(watcher::Event::Apply(marker) | watcher::Event::Delete(marker)) => {
                tenant_of_marker(&marker).into_iter().collect()
            }
            Ok(watcher::Event::InitDone) => (tenants.state().iter())
                .filter(|t| unmarked(t))
                .map(|t| ObjectRef::from_obj(t.as_ref()))
                .collect(),
            _ => Vec::new(),
        };
        futures::stream::iter(tenants)
    })
}

/// The Tenant a marker was written for (its `sentry.io/tenant` label).
fn tenant_of_marker(marker: &ConfigMap) -> Option<ObjectRef<Tenant>> {
    let tenant = marker
        .metadata
        .labels
        .as_ref()?
        .get(crate::labels::TENANT)?;
    Some(ObjectRef::new(tenant).within(marker.metadata.namespace.as_deref()?))
}

/// Starts one watch per kind, each feeding its cache and its subscribers, and both controllers.
/// Resolves when `shutdown` fires and the controllers have finished their in-flight reconciles.
pub async fn run_controllers(
    ctx: Arc<Context>,
    writers: StoreWriters,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let StoreWriters {
        tenants: tw,
        runjobs: rw,
        jobs: jw,
        markers: mw,
    } = writers;
    let ns = ctx.config.shared.namespace.clone();
    let client = ctx.client.clone();
    let triggers = &ctx.stores.triggers;
    let subscribe_tenants = triggers.tenants.subscribe();
    let subscribe_runs_a = triggers.runjobs.subscribe();
    let subscribe_runs_b = triggers.runjobs.subscribe();
    let subscribe_jobs = triggers.jobs.subscribe();
    let subscribe_tenants_for_runs = ctx
        .sharding
        .is_sharded()
        .then(|| triggers.tenants.subscribe());

    let markers = marker_watch(client.clone(), &ns, &ctx.stores, mw);
    let watches = watch_caches(client, &ns, &ctx.stores, (tw, rw, Some(jw)));

    let config = kube::runtime::controller::Config::default()
        .concurrency(ctx.config.max_concurrent_reconciles);
    let slot_wake_ups = ctx
        .slots
        .take_wake_ups()
        .expect("the RunJob controller is started once per process");
    // Every trigger also queues its object in the controller's mirror of its queue (a metric).
    let Queues {
        tenant: tq,
        runjob: rq,
    } = ctx.queues.clone();
    let (tenants, runs) = (ctx.stores.tenants.clone(), ctx.stores.runjobs.clone());
    let tenant_controller = Controller::for_shared_stream(
        subscribe_tenants.inspect(queuing(&tq, |t: &Arc<Tenant>| [Key::of(t.as_ref())])),
        ctx.stores.tenants.clone(),
    )
    .with_config(config.clone())
    .watches_shared_stream(
        subscribe_runs_a.inspect(queuing(&tq, |r: &Arc<RunJob>| {
            tenant_of_run(Arc::clone(r)).map(|t| Key::of_ref(&t))
        })),
        tenant_of_run,
    )
    .reconcile_on(markers.inspect(queuing(&tq, |t: &ObjectRef<Tenant>| [Key::of_ref(t)])))
    .reconcile_all_on(
        on_leadership_gained(ctx.leader.clone()).inspect(queuing(&tq, move |()| {
            tenants
                .state()
                .iter()
                .map(|t| Key::of(t.as_ref()))
                .collect::<Vec<_>>()
        })),
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        forgetting_failures(("tenant", |q| &q.tenant), tenant::reconcile),
        report_error("tenant"),
        Arc::clone(&ctx),
    )
    .for_each(move |result| log_result("tenant", Arc::clone(&tq), result));
    let run_controller = Controller::for_shared_stream(
        subscribe_runs_b.inspect(queuing(&rq, |r: &Arc<RunJob>| [Key::of(r.as_ref())])),
        ctx.stores.runjobs.clone(),
    )
    .with_config(config)
    .owns_shared_stream(subscribe_jobs.inspect(queuing(&rq, owner_runs)));
    // Sharded, a tenant's label decides whose its runs are: a run that waited for its tenant's label,
    // or whose tenant moved to this shard, has no event of its own to bring it here.
    let run_controller = match subscribe_tenants_for_runs {
        Some(tenants) => {
            let index = ctx.stores.run_index.clone();
            let runs_of = move |t: Arc<Tenant>| {
                index.read(|i| i.runs_of(&kube::ResourceExt::name_any(t.as_ref())))
            };
            let keys = {
                let runs_of = runs_of.clone();
                move |t: &Arc<Tenant>| {
                    runs_of(Arc::clone(t))
                        .iter()
                        .map(Key::of_ref)
                        .collect::<Vec<_>>()
                }
            };
            run_controller.watches_shared_stream(tenants.inspect(queuing(&rq, keys)), runs_of)
        }
        None => run_controller,
    };
    let run_controller = run_controller
        .reconcile_on(slot_wake_ups.inspect(queuing(&rq, |r: &ObjectRef<RunJob>| [Key::of_ref(r)])))
        .reconcile_all_on(on_leadership_gained(ctx.leader.clone()).inspect(queuing(
            &rq,
            move |()| {
                runs.state()
                    .iter()
                    .map(|r| Key::of(r.as_ref()))
                    .collect::<Vec<_>>()
            },
        )))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            forgetting_failures(("runjob", |q| &q.runjob), runjob::reconcile),
            report_error("runjob"),
            Arc::clone(&ctx),
        )
        .for_each(move |result| log_result("runjob", Arc::clone(&rq), result));

    // The watches never end on their own; the controllers end on shutdown, and that ends the select.
    tokio::select! {
        _ = watches => {}
        _ = async { futures::join!(tenant_controller, run_controller) } => {}
    }
}

/// `reconcile`, and on its success the object's failures are forgotten: the next failure backs off
/// from the start again. Its start takes the object out of the controller's queue, and samples how
/// many others still wait.
fn forgetting_failures<K, F>(
    (controller, queue): (&'static str, fn(&Queues) -> &Queue),
    reconcile: impl Fn(Arc<K>, Arc<Context>) -> F,
) -> impl Fn(Arc<K>, Arc<Context>) -> futures::future::BoxFuture<'static, F::Output>
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
    F: std::future::Future<Output = super::Result<kube::runtime::controller::Action>>
        + Send
        + 'static,
{
    move |obj, ctx| {
        let waiting = queue(&ctx.queues).started(&Key::of(obj.as_ref()));
        ctx.metrics.observe_queue_depth(controller, waiting);
        let key = super::backoff_key(obj.as_ref());
        let reconciled = reconcile(obj, Arc::clone(&ctx));
        Box::pin(async move {
            let result = reconciled.await;
            if result.is_ok() {
                ctx.backoff.succeeded(&key);
            }
            result
        })
    }
}

/// An `inspect` for a trigger stream: queues in `queue` the objects `keys` says an item names.
fn queuing<T, I: IntoIterator<Item = Key>, F: Fn(&T) -> I>(
    queue: &Arc<Queue>,
    keys: F,
) -> impl FnMut(&T) + use<T, I, F> {
    let queue = Arc::clone(queue);
    move |item| queue.queued_all(keys(item))
}

/// The RunJobs that own `job` (the runs its events reconcile).
fn owner_runs(job: &Arc<Job>) -> Vec<Key> {
    let ns = job.metadata.namespace.as_deref();
    kube::ResourceExt::owner_references(job.as_ref())
        .iter()
        .filter(|o| o.kind == "RunJob")
        .map(|o| Key::of_ref(&ObjectRef::<RunJob>::new(&o.name).within(ns.unwrap_or_default())))
        .collect()
}

fn report_error<K: kube::Resource<DynamicType = ()>>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &super::Error, Arc<Context>) -> kube::runtime::controller::Action {
    move |obj, error, ctx| {
        ctx.metrics.count_error(controller, error.kind());
        error_policy(obj, error, ctx)
    }
}

async fn log_result<K, QE: std::error::Error + 'static, RE: std::error::Error + 'static>(
    controller: &'static str,
    queue: Arc<Queue>,
    result: Result<
        (ObjectRef<K>, kube::runtime::controller::Action),
        kube::runtime::controller::Error<RE, QE>,
    >,
) where
    K: kube::Resource,
{
    match result {
        Ok((obj, _)) => tracing::debug!(controller, object = %obj, "reconciled"),
        Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
            // Deleted while it waited: it never reaches a reconcile, so it leaves the queue here.
            queue.dropped(&Key::of_ref(obj.as_ref()));
            tracing::debug!(controller, object = %obj, "gone before its reconcile");
        }
        Err(error) => tracing::warn!(controller, %error, "reconcile failed"),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Wake, Waker};

    use super::*;

    #[test]
    fn an_expired_watch_is_routine_and_a_broken_one_is_reported_once_per_outage() {
        let gone = || {
            Err(watcher::Error::WatchError(Box::new(
                kube::core::Status::failure("too old resource version", "Expired").with_code(410),
            )))
        };
        let refused = || {
            Err(watcher::Error::WatchFailed(kube::Error::Service(Box::new(
                std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            ))))
        };
        let fine = || Ok(watcher::Event::<Job>::InitDone);
        let mut health = WatchHealth::default();
        let news: Vec<WatchNews> = [
            fine(),
            gone(),
            fine(),
            refused(),
            refused(),
            gone(),
            fine(),
            fine(),
        ]
        .iter()
        .map(|event| health.read(event))
        .collect();
        assert_eq!(
            news,
            [
                WatchNews::Nothing,
                WatchNews::Expired,
                WatchNews::Nothing,
                WatchNews::Broke,
                WatchNews::StillBroken,
                WatchNews::StillBroken,
                WatchNews::Back,
                WatchNews::Nothing,
            ]
        );
    }

    /// A Job's event queues the run that owns it under the key that run's reconcile takes out.
    #[test]
    fn a_jobs_owner_run_is_queued_under_the_runs_own_key() {
        let run: RunJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
            "metadata": {"name": "acme-provision-1", "namespace": "ns", "uid": "run-uid"},
            "spec": {"tenant": "acme", "action": "Provision"},
        }))
        .unwrap();
        let job: Job = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "acme-provision-1", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-a-run", "uid": "u1"},
                {"apiVersion": "sentry.io/v1alpha1", "kind": "RunJob", "name": "acme-provision-1",
                 "uid": "run-uid", "controller": true},
            ]},
        }))
        .unwrap();
        assert_eq!(owner_runs(&Arc::new(job)), [Key::of(&run)]);
    }

    struct Wakes(AtomicUsize);
    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn counting_waker() -> (Arc<Wakes>, Waker) {
        let wakes = Arc::new(Wakes(AtomicUsize::new(0)));
        (Arc::clone(&wakes), Waker::from(wakes))
    }

    /// kube-runtime's controller runner waits on its store's own readiness, which wakes one waiter
    /// only. Waiting for the caches, or probing them, must not take that wake-up away.
    #[test]
    fn waiting_for_or_probing_the_caches_leaves_the_controllers_wake_up_alone() {
        let (stores, mut writers) = Stores::shared();
        let (runner_wakes, runner_waker) = counting_waker();
        let mut runner = Box::pin(stores.tenants.wait_until_ready());
        assert!(
            runner
                .as_mut()
                .poll(&mut Context::from_waker(&runner_waker))
                .is_pending()
        );

        let (our_wakes, our_waker) = counting_waker();
        let mut ours = Box::pin(stores.wait_until_ready());
        assert!(
            ours.as_mut()
                .poll(&mut Context::from_waker(&our_waker))
                .is_pending()
        );
        assert!(!stores.is_ready(), "the probe before any list");

        writers
            .tenants
            .apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(
            runner_wakes.0.load(Ordering::SeqCst),
            1,
            "the controller's runner is woken when its cache is ready"
        );
        assert!(matches!(
            runner
                .as_mut()
                .poll(&mut Context::from_waker(&runner_waker)),
            Poll::Ready(Ok(()))
        ));

        stores.synced.mark(Cache::Tenants);
        stores.synced.mark(Cache::RunJobs);
        stores.synced.mark(Cache::Markers);
        assert!(
            ours.as_mut()
                .poll(&mut Context::from_waker(&our_waker))
                .is_pending(),
            "jobs not listed yet"
        );
        assert!(stores.synced.has(Cache::Markers) && !stores.synced.has(Cache::Jobs));
        let before = our_wakes.0.load(Ordering::SeqCst);
        stores.synced.mark(Cache::Jobs);
        assert!(
            our_wakes.0.load(Ordering::SeqCst) > before,
            "woken once all are listed"
        );
        assert!(
            ours.as_mut()
                .poll(&mut Context::from_waker(&our_waker))
                .is_ready()
        );
        assert!(stores.is_ready());
    }
}
