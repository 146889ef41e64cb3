//! The dashboard's view of the cluster: view models computed from the reflector caches the controllers
//! already keep (no extra LIST traffic). Only a tenant's recent Events, a running pod's log and the
//! leader Lease are read from the API, on demand.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ListParams, LogParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use sentry_tenants_app::api::{Backend, BoxFuture, TenantQuery};
use sentry_tenants_app::fragments::{Kept, ROWS_KEPT};
use sentry_tenants_app::model::{
    ConditionView, CopyView, EventView, HistoryView, Meta, Overview, PAGE_SIZE, Page, PageWindow,
    PhaseCount, RunDetail, RunRow, TENANT_PHASES, TenantDetail, TenantFacts, TenantRow,
};

use super::actions::ActingAs;
use super::insights;
use super::permissions::Permissions;
use crate::clock::Clock;
use crate::controller::runjob::LOG_TAIL_LINES;
use crate::controller::{Stores, TenantFilter, TenantListed, cached_or_fetched};
use crate::crd::{RunAction, RunJob, RunPhase, Tenant, TenantPhase};
use crate::leader::LEASE_NAME;
use crate::names::TenantName;

pub struct ClusterBackend {
    pub client: Client,
    pub stores: Stores,
    pub namespace: String,
    /// What the pages offer: the actions the dashboard's account may take.
    pub permissions: Permissions,
    /// Whose credentials the actions are made with: the same value the actions hold.
    pub acting_as: ActingAs,
    pub clock: Clock,
    /// The leader Lease's holder as last read, for the overview.
    pub leader: LeaderSeen,
    /// The rows the tenants page built, kept while their tenant and its runs in flight are as they
    /// were: a page of 50 rows builds only the rows of tenants that changed. None: every row is
    /// built (what a change to every tenant on the page costs; the benchmark measures it).
    pub rows: Option<KeptRows>,
}

/// A built row by what it was built from: the tenant's name and `resourceVersion` (the cached object
/// at that version never changes) and its runs in flight.
#[derive(Default)]
pub struct KeptRows(Kept<(String, String, Busy), Arc<TenantRow>>);

/// How long the overview shows the leader it read before reading the Lease again: one GET per this
/// long whatever the number of page views (a change of leader is rare and shown seconds late).
pub const LEADER_READ_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// The leader Lease's holder and when it was read.
#[derive(Default)]
pub struct LeaderSeen(std::sync::Mutex<Option<(jiff::Timestamp, Option<String>)>>);

impl LeaderSeen {
    /// The holder read at most [`LEADER_READ_EVERY`] before `now`, else none.
    fn fresh(&self, now: jiff::Timestamp) -> Option<Option<String>> {
        let seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        seen.as_ref()
            .filter(|(at, _)| now.duration_since(*at) < LEADER_READ_EVERY)
            .map(|(_, holder)| holder.clone())
    }

    fn remember(&self, now: jiff::Timestamp, holder: Option<String>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, holder));
    }
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> String {
    t.0.to_string()
}

impl ClusterBackend {
    /// The row of a listed tenant: kept if its tenant was built at the version listed and its runs in
    /// flight are the same, else built from the cache (and kept by the version it was built from,
    /// which a listing read a moment apart may not have caught up with yet).
    fn row_of(&self, listed: TenantListed) -> Option<Arc<TenantRow>> {
        let busy = Busy::of(&self.stores.runs_of(&self.namespace, &listed.name));
        let key = (listed.name, listed.resource_version, busy);
        if let Some(row) = self
            .rows
            .as_ref()
            .and_then(|kept| kept.0.find(&key, ROWS_KEPT))
        {
            return Some(row);
        }
        let (name, _, busy) = key;
        let t = self
            .stores
            .tenants
            .get(&ObjectRef::new(&name).within(&self.namespace))?;
        let row = Arc::new(tenant_row(&t, busy));
        if let Some(kept) = &self.rows {
            let built_from = (name, t.resource_version().unwrap_or_default(), busy);
            kept.0.put(built_from, row.clone(), ROWS_KEPT);
        }
        Some(row)
    }

    /// The tenant as the API has it, history log tails included (the caches keep the history without
    /// them); the cached copy if the API cannot be read, so the page still shows everything else.
    async fn tenant_with_log_tails(&self, name: &str) -> Option<Arc<Tenant>> {
        let api: Api<Tenant> = Api::namespaced(self.client.clone(), &self.namespace);
        match api.get_opt(name).await {
            Ok(found) => found.map(Arc::new),
            Err(_) => self.tenant_object(name).await,
        }
    }
}

/// The tenant's condition of `type_`, if its status has one.
fn condition<'a>(t: &'a Tenant, type_: &str) -> Option<&'a Condition> {
    let status = t.status.as_ref()?;
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The tenant as a list shows it.
fn tenant_row(t: &Tenant, busy: Busy) -> TenantRow {
    let status = t.status.as_ref();
    let ready = condition(t, "Ready");
    let phase = t.phase().unwrap_or(TenantPhase::Pending);
    TenantRow {
        provisioning: busy.provision,
        reclaim_policy: t.spec.reclaim_policy.as_str().to_owned(),
        name: t.name_any(),
        display_name: t.spec.display_name.clone(),
        phase: phase.as_str().to_owned(),
        ready: ready.is_some_and(|c| c.status == "True"),
        ready_reason: ready
            .map(|c| c.reason.clone())
            .unwrap_or_else(|| phase.as_str().to_owned()),
        ready_message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        database: status
            .and_then(|s| s.click_house_database_name.clone())
            .filter(|d| !d.is_empty()),
        secret_name: status.and_then(|s| s.click_house_secret_ref.as_ref().map(|r| r.name.clone())),
        created: t.metadata.creation_timestamp.as_ref().map(time),
        suspended: t.spec.suspended,
    }
}

/// What the tenant's own page shows beyond its row.
fn tenant_facts(t: &Tenant, busy: Busy) -> TenantFacts {
    let terminating = t.phase() == Some(TenantPhase::Terminating);
    TenantFacts {
        logins: logins(condition(t, "AccessLocked")),
        provisioning_policy: t.spec.provisioning.as_str().to_owned(),
        limits: (&t.spec.limits()).into(),
        limits_state: limits_state(condition(t, "LimitsEnforced")),
        clickhouse_generation: clickhouse_generation(t),
        credentials: credentials(t, busy.rotate),
        deletion: terminating
            .then(|| condition(t, "Reclaimed").map(|c| c.message.clone()))
            .flatten(),
    }
}

/// Runs a tenant has in flight, as far as its row shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Busy {
    pub provision: bool,
    pub rotate: bool,
}

impl Busy {
    fn add(&mut self, action: RunAction) {
        match action {
            RunAction::Provision => self.provision = true,
            RunAction::Rotate | RunAction::Revoke => self.rotate = true,
            _ => {}
        }
    }

    fn of(runs: &[Arc<RunJob>]) -> Self {
        let mut busy = Self::default();
        for run in runs.iter().filter(|r| r.is_in_flight()) {
            busy.add(run.spec.action);
        }
        busy
    }
}

/// The `LimitsEnforced` condition's reason in the words the tenant page shows.
fn limits_state(condition: Option<&Condition>) -> String {
    let word = match condition.map(|c| c.reason.as_str()) {
        None => "—",
        Some("Enforced") => "enforced",
        Some("Applying") => "applying…",
        Some("ApplyFailed") => "apply failed",
        Some(other) => other,
    };
    word.to_owned()
}

/// Which generation of the spec ClickHouse reflects (`status.syncedGeneration`) against the current one.
fn clickhouse_generation(t: &Tenant) -> String {
    let synced = t.status.as_ref().and_then(|s| s.synced_generation);
    match (synced, t.metadata.generation) {
        (Some(s), Some(g)) if s == g => format!("generation {s} (current)"),
        (Some(s), Some(g)) => format!("generation {s}; bringing it to {g}"),
        _ => "—".to_owned(),
    }
}

/// The credentials' latest rotation or revocation, from a run in flight or the history, and when
/// the schedule (if any) rotates them next.
fn credentials(t: &Tenant, rotating: bool) -> String {
    if rotating {
        return "rotating…".to_owned();
    }
    let secret_deleted = t.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "CredentialsSecret" && c.reason == "SecretDeleted")
    });
    if secret_deleted {
        return "the credentials Secret was deleted: Rotate credentials makes it again with a new password".to_owned();
    }
    let changed = |a: RunAction| matches!(a, RunAction::Rotate | RunAction::Revoke);
    let latest = match t.history().iter().find(|h| changed(h.action)) {
        None => "never rotated".to_owned(),
        Some(h) if h.phase == RunPhase::Failed => {
            format!("the last rotation ({}) failed: {}", h.name, h.message)
        }
        Some(h) if h.action == RunAction::Revoke => format!("revoked by {}: {}", h.name, h.message),
        Some(h) => format!("rotated by {}: {}", h.name, h.message),
    };
    match crate::controller::tenant::rotation_due(t) {
        Some(due) => format!(
            "{latest}; next scheduled rotation at {}",
            due.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
        None => latest,
    }
}

/// The `AccessLocked` condition's reason in the words the tenant page shows.
fn logins(condition: Option<&Condition>) -> String {
    let word = match condition.map(|c| c.reason.as_str()) {
        None => "—",
        Some("LoginsLocked") => "locked",
        Some("LoginsAllowed") => "allowed",
        Some("Locking") => "locking…",
        Some("Unlocking") => "unlocking…",
        Some("LockFailed") => "lock failed",
        Some("UnlockFailed") => "unlock failed",
        Some(other) => other,
    };
    word.to_owned()
}

pub fn run_row(r: &RunJob) -> RunRow {
    let status = r.status.clone().unwrap_or_default();
    RunRow {
        name: r.name_any(),
        tenant: r.spec.tenant.clone(),
        action: r.spec.action.as_str().to_owned(),
        phase: status
            .phase
            .map(|p| p.as_str())
            .unwrap_or("Pending")
            .to_owned(),
        job: status.job_ref.map(|j| j.name),
        started: status.start_time.as_ref().map(time),
        finished: status.completion_time.as_ref().map(time),
        cleanup_at: status.cleanup_at.as_ref().map(time),
        message: status.message.unwrap_or_default(),
    }
}

fn newest_first(runs: &mut [Arc<RunJob>]) {
    runs.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
            .then(b.name_any().cmp(&a.name_any()))
    });
}

impl ClusterBackend {
    /// Who holds the leader Lease: read from the API at most once per [`LEADER_READ_EVERY`]. A failed
    /// read shows no leader and is not remembered.
    async fn lease_holder(&self, now: jiff::Timestamp) -> Option<String> {
        if let Some(holder) = self.leader.fresh(now) {
            return holder;
        }
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let lease = leases.get_opt(LEASE_NAME).await.ok()?;
        let holder = lease
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        self.leader.remember(now, holder.clone());
        holder
    }
}

impl Backend for ClusterBackend {
    fn meta(&self) -> Meta {
        Meta {
            server_now: crate::crd::to_k8s_time(self.clock.now()).0.to_string(),
            may: self.permissions.now(),
            namespace: self.namespace.clone(),
            acting_as: match &self.acting_as {
                ActingAs::Operator => None,
                ActingAs::Person(who) => Some(who.clone()),
            },
        }
    }

    fn overview(&self) -> Overview {
        let (counts, tenants_total) = self.stores.tenant_index.counts(&self.namespace);
        let tenants_by_phase = TENANT_PHASES
            .iter()
            .map(|p| PhaseCount {
                phase: (*p).to_owned(),
                count: p
                    .parse::<TenantPhase>()
                    .ok()
                    .and_then(|phase| counts.get(&phase).copied())
                    .unwrap_or(0),
            })
            .collect();
        let now = self.clock.now();
        let concerned = self.stores.concerned_tenants(&self.namespace);
        let failed = self.stores.failed_runs(&self.namespace);
        let (attention, attention_total) = insights::attention(&concerned, &failed, now);
        let finished = &self.stores.finished_runs;
        let first = insights::first_hour(now);
        let per_hour = finished.per_hour(&self.namespace, first, insights::HOURS);
        Overview {
            tenants_total,
            tenants_by_phase,
            runs_in_flight: self.stores.run_index.read(|i| i.in_flight(&self.namespace)),
            finished_last_24h: per_hour.iter().map(|[ok, failed]| ok + failed).sum(),
            cleaned_up_last_24h: finished.recorded(&self.namespace, first, insights::HOURS),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            runs_per_hour: insights::runs_per_hour(&per_hour, first),
            durations: insights::durations(&finished.durations(&self.namespace)),
            attention,
            attention_total,
        }
    }

    fn leader(&self) -> BoxFuture<'_, Option<String>> {
        Box::pin(self.lease_holder(self.clock.now()))
    }

    fn tenants(&self, query: &TenantQuery) -> Page<Arc<TenantRow>> {
        let phase = query
            .phase
            .as_deref()
            .map(|asked| asked.parse::<TenantPhase>().ok());
        let filter = TenantFilter {
            phase: phase.flatten(),
            text: query.text.as_deref(),
        };
        if phase == Some(None) {
            // A phase no tenant can be in matches none (the page says so).
            let total = self.stores.tenant_index.counts(&self.namespace).1;
            return PageWindow::of(0, query.page).page(Vec::new(), 0, total);
        }
        let mut window = PageWindow::of(0, None);
        let listing = self
            .stores
            .tenant_index
            .list(&self.namespace, filter, |matched| {
                window = PageWindow::of(matched, query.page);
                (window.skip, PAGE_SIZE)
            });
        let rows = listing
            .tenants
            .into_iter()
            .filter_map(|listed| self.row_of(listed))
            .collect();
        window.page(rows, listing.matched, listing.total)
    }

    fn runs(&self, page: Option<usize>) -> Page<RunRow> {
        let mut window = PageWindow::of(0, None);
        let (keys, total) = self.stores.run_index.read(|index| {
            index.newest(&self.namespace, |total| {
                window = PageWindow::of(total, page);
                (window.skip, PAGE_SIZE)
            })
        });
        let rows = keys.iter().filter_map(|key| self.stores.runjobs.get(key));
        window.page(rows.map(|r| run_row(&r)).collect(), total, total)
    }

    fn tenant(&self, name: &str) -> BoxFuture<'_, Option<TenantDetail>> {
        let name = name.to_owned();
        Box::pin(async move {
            // Not a tenant's name (`acme/status` is a subresource's path): nothing to ask the API.
            TenantName::parse(&name).ok()?;
            let t = self.tenant_with_log_tails(&name).await?;
            let mut runs = self.stores.runs_of(&self.namespace, &name);
            newest_first(&mut runs);
            let busy = Busy::of(&runs);
            let status = t.status.clone().unwrap_or_default();
            Some(TenantDetail {
                tenant: tenant_row(&t, busy),
                facts: tenant_facts(&t, busy),
                copies: copy_views(&t),
                conditions: status
                    .conditions
                    .iter()
                    .map(|c| ConditionView {
                        type_: c.type_.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition: time(&c.last_transition_time),
                    })
                    .collect(),
                runs: runs.iter().map(|r| run_row(r)).collect(),
                history: status
                    .history
                    .iter()
                    .map(|h| HistoryView {
                        name: h.name.clone(),
                        action: h.action.as_str().to_owned(),
                        phase: h.phase.as_str().to_owned(),
                        message: h.message.clone(),
                        started: h.started_at.as_ref().map(time),
                        finished: time(&h.finished_at),
                        log_tail: h.log_tail.clone(),
                    })
                    .collect(),
                events: self.events_of(&name).await,
            })
        })
    }

    fn run(&self, name: &str) -> BoxFuture<'_, Option<RunDetail>> {
        let name = name.to_owned();
        Box::pin(async move {
            if !crate::names::is_run_job_name(&name) {
                return None;
            }
            let r = self
                .stores
                .runjobs
                .get(&ObjectRef::new(&name).within(&self.namespace))?;
            let job = self
                .stores
                .jobs
                .get(&ObjectRef::new(&name).within(&self.namespace));
            let log_tail = match r.status.as_ref().and_then(|s| s.log_tail.clone()) {
                Some(kept) => Some(kept),
                None if job.is_some() => self.live_log_tail(&name).await,
                None => None,
            };
            Some(RunDetail {
                run: run_row(&r),
                job_status: job.map(|j| job_status(&j)),
                log_tail,
            })
        })
    }
}

impl ClusterBackend {
    /// From the cache; a miss is confirmed against the API, since a tenant created a moment ago (the
    /// page a Create redirects to) may not have reached the cache yet.
    async fn tenant_object(&self, name: &str) -> Option<Arc<Tenant>> {
        let api: Api<Tenant> = Api::namespaced(self.client.clone(), &self.namespace);
        cached_or_fetched(&self.stores.tenants, &api, &self.namespace, name)
            .await
            .ok()
            .flatten()
    }

    /// The tenant's ten most recent Events, newest first. Advisory: an error shows none.
    async fn events_of(&self, tenant: &str) -> Vec<EventView> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let selector = format!("involvedObject.kind=Tenant,involvedObject.name={tenant}");
        let Ok(list) = api.list(&ListParams::default().fields(&selector)).await else {
            return Vec::new();
        };
        let when = |e: &Event| {
            e.event_time
                .as_ref()
                .map(|t| t.0)
                .or(e.last_timestamp.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .unwrap_or(Timestamp::UNIX_EPOCH)
        };
        let mut events = list.items;
        events.sort_by_key(|e| std::cmp::Reverse(when(e)));
        events
            .iter()
            .take(10)
            .map(|e| EventView {
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                message: e.message.clone().unwrap_or_default(),
                time: Some(when(e).to_string()),
            })
            .collect()
    }

    async fn live_log_tail(&self, job: &str) -> Option<String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
            .await
            .ok()?;
        let pod = list
            .items
            .into_iter()
            .max_by_key(|p| p.metadata.creation_timestamp.clone())?;
        let params = LogParams {
            tail_lines: Some(LOG_TAIL_LINES),
            limit_bytes: Some(4096),
            ..LogParams::default()
        };
        pods.logs(&pod.name_any(), &params).await.ok()
    }
}

fn job_status(job: &Job) -> String {
    let s = job.status.clone().unwrap_or_default();
    let mut text = format!(
        "Job {}: {} active, {} succeeded, {} failed",
        job.name_any(),
        s.active.unwrap_or(0),
        s.succeeded.unwrap_or(0),
        s.failed.unwrap_or(0)
    );
    for c in s.conditions.iter().flatten().filter(|c| c.status == "True") {
        text.push_str(&format!("; {}", c.type_));
        if let Some(reason) = &c.reason {
            text.push_str(&format!(" ({reason})"));
        }
    }
    text
}

/// The tenant's copies of its credentials as the page shows them: each the spec asks for, then each
/// it no longer asks for that is still there.
fn copy_views(tenant: &Tenant) -> Vec<CopyView> {
    use crate::crd::CopyState;
    let stale = crate::controller::tenant::out_of_date(tenant);
    let find = |namespace: &str, name: &str| {
        stale
            .iter()
            .find(|c| c.namespace == namespace && c.secret_name == name)
    };
    let asked = tenant.spec.credential_copies().iter().map(|entry| {
        let (state, message) = match find(&entry.namespace, &entry.secret_name) {
            None => ("up to date", String::new()),
            Some(c) => (
                match c.state {
                    None => "not written yet",
                    Some(CopyState::Delivered) => "updating…",
                    Some(CopyState::NoConsent) => "waiting for consent",
                    Some(CopyState::Conflict) => "conflict",
                    Some(CopyState::Failed) => "failed",
                },
                c.message.clone(),
            ),
        };
        CopyView {
            namespace: entry.namespace.clone(),
            secret_name: entry.secret_name.clone(),
            state: state.to_owned(),
            message,
        }
    });
    let leaving = stale.iter().filter(|c| c.removed).map(|c| CopyView {
        namespace: c.namespace.clone(),
        secret_name: c.secret_name.clone(),
        state: "being deleted".to_owned(),
        message: c.message.clone(),
    });
    asked.chain(leaving).collect()
}
