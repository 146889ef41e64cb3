//! The two reconcilers and what they share: the context (client, caches, clock, leadership) and the
//! wiring that runs them on one watch and one cache per kind.

pub mod attempts;
mod backoff;
pub mod concerns;
pub mod consent;
pub mod finished_runs;
mod follow;
pub mod job;
mod job_index;
pub mod queue;
mod run_index;
pub mod runjob;
mod sent_status;
pub mod shards;
pub mod slots;
pub mod tenant;
mod tenant_index;
mod triggers;
mod wiring;

pub use backoff::ErrorBackoff;
pub use finished_runs::FinishedRuns;
pub use job_index::JobIndex;
pub use run_index::RunIndex;
pub use tenant_index::{
    Filter as TenantFilter, Listed as TenantListed, Listing as TenantListing, TenantIndex,
};
pub use wiring::{
    Cache, StoreWriters, Stores, Synced, cached_or_fetched, drop_managed_fields, run_controllers,
    slim_tenant, watch_caches,
};

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::OperatorConfig;
use crate::crd::{RunJob, Tenant};
use crate::telemetry::Metrics;

/// Field manager of every write the operator makes, but for the fields below that have owners of
/// their own.
pub const MANAGER: &str = "sentry-tenants";
/// Field manager of the Tenant controller's part of a Tenant's status (phase, observedGeneration,
/// conditions), written by server-side apply so that no other status field goes over the wire.
pub const TENANT_CONTROLLER: &str = "sentry-tenants-tenant-controller";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("object has no {0}")]
    MissingField(&'static str),
}

impl Error {
    /// Short, stable label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::MissingField(_) => "invalid_object",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a reconcile needs. Built once per process and shared by both controllers.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub config: OperatorConfig,
    pub stores: Stores,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    pub leader: watch::Receiver<bool>,
    pub recorder: Recorder,
    pub backoff: Arc<ErrorBackoff>,
    /// The cap on runs in flight (`--max-concurrent-runs`).
    pub slots: Arc<slots::RunSlots>,
    /// Which namespaces consent to copies of credentials (rule 9).
    pub consents: Arc<consent::ConsentChecks>,
    /// The runs' and tenants' statuses as last sent, so a lagging cache does not make us send one
    /// twice.
    pub sent_status: Arc<sent_status::SentStatus>,
    /// The objects waiting for each controller's next free worker (a metric).
    pub queues: Queues,
    /// Which tenants and runs this operator reconciles (`--shards`, `--shard`).
    pub sharding: shards::Sharding,
}

#[derive(Clone, Default)]
pub struct Queues {
    pub tenant: Arc<queue::Queue>,
    pub runjob: Arc<queue::Queue>,
}

impl Context {
    pub fn new(
        client: Client,
        config: OperatorConfig,
        stores: Stores,
        metrics: Arc<Metrics>,
        clock: Clock,
        leader: watch::Receiver<bool>,
    ) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let sharding = shards::Sharding::new(config.shards.clone(), config.shard.clone());
        let runs_owned = shards::RunsOwned {
            sharding: sharding.clone(),
            tenants: stores.tenants.clone(),
            namespace: config.shared.namespace.clone(),
        };
        Self {
            slots: slots::RunSlots::sharded(config.max_concurrent_runs, runs_owned),
            consents: Arc::new(consent::ConsentChecks::new(
                client.clone(),
                &config.shared.namespace,
                &config.provisioner_service_account,
            )),
            client,
            config,
            stores,
            metrics,
            clock,
            leader,
            recorder,
            backoff: Arc::default(),
            sent_status: Arc::default(),
            queues: Queues::default(),
            sharding,
        }
    }

    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    pub fn tenants(&self) -> Api<Tenant> {
        Api::namespaced(self.client.clone(), &self.config.shared.namespace)
    }

    pub fn runjobs(&self) -> Api<RunJob> {
        Api::namespaced(self.client.clone(), &self.config.shared.namespace)
    }

    pub fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.config.shared.namespace)
    }

    /// The tenant from the cache; a miss is confirmed against the API, because acting on a stale
    /// negative (failing a run whose tenant was just created) would be wrong.
    pub async fn find_tenant(&self, name: &str) -> Result<Option<Arc<Tenant>>> {
        Ok(cached_or_fetched(
            &self.stores.tenants,
            &self.tenants(),
            &self.config.shared.namespace,
            name,
        )
        .await?)
    }

    /// The tenant's runs, from the cache.
    pub fn runs_of(&self, tenant: &str) -> Vec<Arc<RunJob>> {
        self.stores.runs_of(&self.config.shared.namespace, tenant)
    }

    /// Publishes a Kubernetes Event. Events are advisory: a failure is logged, never fails a reconcile.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish(obj.object_ref(&()), None, type_, reason, note)
            .await;
    }

    /// An event on `tenant` about its run `run`, which it names as related. kube's Recorder folds the
    /// events of one key (regarding, related, reason, action) into a series that keeps the first
    /// event's note: without the run, "Created Provision run acme-provision-2" would show as the first
    /// run's note counted twice.
    pub async fn run_event(
        &self,
        tenant: &Tenant,
        run: &RunJob,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let regarding = tenant.object_ref(&());
        self.publish(regarding, Some(run.object_ref(&())), type_, reason, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary: related,
        };
        if let Err(error) = self.recorder.publish(&event, &regarding).await {
            tracing::warn!(%error, reason, "could not publish event");
        }
    }
}

/// Merge-patches `status` when it differs from what the object already has: a no-op reconcile writes
/// nothing. Returns the resourceVersion the write made, if it wrote.
pub async fn patch_status_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    current: Option<&S>,
    desired: &S,
) -> Result<Option<String>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if current == Some(desired) {
        return Ok(None);
    }
    let patch = serde_json::json!({ "status": desired });
    let written = api
        .patch_status(name, &write_params(), &Patch::Merge(&patch))
        .await?;
    Ok(Some(
        written.meta().resource_version.clone().unwrap_or_default(),
    ))
}

/// Server-side applies `status` (only the fields `manager` owns) to the object. Fields owned by other
/// managers are neither sent nor touched, so a writer working from a stale copy cannot put back an
/// old value of someone else's field. Controllers force: the fields are theirs by design. Returns the
/// resourceVersion the write made.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    status: &impl Serialize,
) -> Result<String>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    let written = api
        .patch_status(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(written.meta().resource_version.clone().unwrap_or_default())
}

/// Parameters of every merge patch the operator sends: its own field manager.
pub fn write_params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    }
}

/// A failed reconcile is retried after a jittered exponential backoff per object (see `backoff`): a
/// conflict (someone wrote the object since we read it) starts at 200 ms, any other API or transport
/// failure at 1 s; an object the API should never have given us waits for a change instead.
pub fn error_policy<K>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action
where
    K: Resource<DynamicType = ()>,
{
    let base = match error.kind() {
        "invalid_object" => return Action::await_change(),
        "conflict" => Duration::from_millis(200),
        _ => Duration::from_secs(1),
    };
    let key = backoff_key(obj.as_ref());
    let failures = ctx.backoff.failed(&key);
    Action::requeue(ctx.backoff.delay(&key, base, failures))
}

/// The object's identity in [`ErrorBackoff`].
pub fn backoff_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    kube::runtime::reflector::ObjectRef::from_obj(obj).to_string()
}

/// True if `obj` is controlled by the object with `uid`.
pub fn is_controlled_by<K: Resource>(obj: &K, uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Name of an object the API gave us (it always has one).
pub fn name_of<K: ResourceExt>(obj: &K) -> Result<String> {
    obj.meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))
}

/// Requeue for exactly `at` (rounded up to the millisecond, so the wake-up is never early).
pub fn requeue_at(at: Timestamp, now: Timestamp) -> Action {
    let wait = at.duration_since(now);
    if wait <= SignedDuration::ZERO {
        return Action::requeue(Duration::ZERO);
    }
    let nanos = wait.as_nanos();
    let millis = nanos / 1_000_000 + i128::from(nanos % 1_000_000 != 0);
    Action::requeue(Duration::from_millis(
        u64::try_from(millis).unwrap_or(u64::MAX),
    ))
}

/// `finalizers` without `ours`.
pub fn without(finalizers: &[String], ours: &str) -> Vec<String> {
    finalizers.iter().filter(|f| *f != ours).cloned().collect()
}

/// Replaces `obj`'s finalizer list with `finalizers`, on the condition that it still is the list this
/// decision was made from (a JSON patch `test`; with no list yet, the resourceVersion), so a finalizer
/// someone else added meanwhile is never dropped. An object already gone is no error.
pub async fn replace_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    finalizers: Vec<String>,
) -> kube::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let patched = match obj.meta().finalizers.as_ref() {
        Some(current) => {
            let ops = serde_json::json!([
                { "op": "test", "path": "/metadata/finalizers", "value": current },
                { "op": "replace", "path": "/metadata/finalizers", "value": finalizers },
            ]);
            let patch: json_patch::Patch =
                serde_json::from_value(ops).expect("well-formed JSON patch");
            api.patch(&name, &write_params(), &Patch::Json::<()>(patch))
                .await
        }
        None => {
            let patch = serde_json::json!({ "metadata": {
                "resourceVersion": obj.meta().resource_version,
                "finalizers": finalizers,
            }});
            api.patch(&name, &write_params(), &Patch::Merge(&patch))
                .await
        }
    };
    match patched {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}
