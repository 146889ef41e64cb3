//! Many tenants at once, for the fault drills and the benchmarks: both reconcilers driven round by round
//! over the shared caches (as the controllers do, one pass per object per round), the Job controller
//! played by running the provisioner for each pending Job (retried up to the Job's backoffLimit, as its
//! pods would be), the user played by posting to the dashboard's action routes, and the clock moved past
//! every cleanup deadline between rounds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Body;
use futures::FutureExt;
use futures::future::LocalBoxFuture;
use http::{Method, Request, StatusCode, header};
use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use sentry_tenants::controller::{runjob, tenant};
use sentry_tenants::crd::{
    DEFAULT_TTL_SECONDS, ProvisioningPolicy, RunAction, RunJob, Tenant, TenantPhase,
};
use sentry_tenants::names::TenantName;
use sentry_tenants::provision::{PASSWORD_KEY, Provisioner, TenantSync};
use sentry_tenants::web::actions::{self, Actions};
use tower::ServiceExt;

use crate::clickhouse_seam::RecordingClickHouse;
use crate::{Cluster, NS, Recorded};

/// What one round did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Round {
    pub reconciles: usize,
    /// Reconciles that returned an error (the controller would retry them with backoff).
    pub errors: usize,
    /// Writes by the operator's client, Events not counted.
    pub writes: usize,
    /// Pending Jobs whose pods ran this round.
    pub jobs_run: usize,
}

impl Round {
    /// Nothing written, failed or run: the fleet has settled.
    pub fn quiet(&self) -> bool {
        self.writes == 0 && self.errors == 0 && self.jobs_run == 0
    }
}

/// What the API held at one moment.
#[derive(Clone, Default)]
pub struct Snapshot {
    pub tenants: Vec<Tenant>,
    pub runs: Vec<RunJob>,
    pub jobs: Vec<Job>,
}

pub struct Fleet {
    pub cluster: Cluster,
    pub clickhouse: RecordingClickHouse,
    actions: axum::Router,
}

/// `count` tenant names that sort in creation order: `t-00000`, `t-00001`, ….
pub fn tenant_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("t-{i:05}")).collect()
}

/// A tenant's ClickHouse user, derived by the provisioner's own rule.
pub fn clickhouse_user(tenant: &str) -> String {
    crate::tenant_idents(tenant).user.as_str().to_owned()
}

impl Fleet {
    pub async fn new() -> Self {
        Self::on(Cluster::new().await)
    }

    fn on(cluster: Cluster) -> Self {
        let actions = actions::router(Arc::new(Actions {
            client: cluster.client.clone(),
            stores: cluster.ctx.stores.clone(),
            namespace: NS.into(),
            acting_as: sentry_tenants::web::actions::ActingAs::Operator,
        }));
        Self {
            cluster,
            clickhouse: RecordingClickHouse::new("24.8.4.13"),
            actions,
        }
    }

    /// `n` tenants, each with its Provision run `<name>-provision-1` created by hand (as `kubectl
    /// apply` would), nothing reconciled yet. Every run may have its Job at once (a cap of `n`): these
    /// fleets measure what the reconcilers cost per object; the cap on runs in flight, which makes a
    /// waiting run's status say so (one write more), is measured on its own.
    pub async fn with_provision_runs(n: usize) -> Self {
        let cap = u16::try_from(n).unwrap_or(u16::MAX);
        let fleet = Self::on(Cluster::with_max_concurrent_runs(cap).await);
        let names = tenant_names(n);
        fleet.create_tenants(&names).await;
        for name in &names {
            fleet
                .cluster
                .create_run(
                    name,
                    sentry_tenants::crd::RunAction::Provision,
                    &format!("{name}-provision-1"),
                )
                .await;
        }
        fleet
    }

    /// `n` Automatic tenants, as `kubectl apply` of Tenants alone makes them (the reconciler makes
    /// each one's Provision run), nothing reconciled yet; every run may have its Job at once.
    pub async fn with_automatic_tenants(n: usize) -> Self {
        let cap = u16::try_from(n).unwrap_or(u16::MAX);
        let fleet = Self::on(Cluster::with_max_concurrent_runs(cap).await);
        for name in tenant_names(n) {
            fleet
                .cluster
                .create_tenant_with(&name, ProvisioningPolicy::Automatic)
                .await;
        }
        fleet
    }

    pub async fn create_tenants(&self, names: &[String]) {
        for name in names {
            self.cluster.create_tenant(name).await;
        }
    }

    /// The user clicks `action` ("provision", "suspend", "resume") for `tenant` in the dashboard.
    /// Returns whether the dashboard reported success.
    pub async fn click(&self, tenant: &str, action: &str) -> bool {
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("/tenants/{tenant}/{action}"))
            .header(header::HOST, "127.0.0.1:8080")
            .header(header::ORIGIN, "http://127.0.0.1:8080")
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            // The actions router alone serves no page to read the token from; this process's token
            // is what any of the dashboard's pages would carry.
            .body(Body::from(format!(
                "session={}",
                sentry_tenants::web::flash::session_token()
            )))
            .unwrap();
        let reply = self.actions.clone().oneshot(request).await.unwrap();
        reply.status() == StatusCode::OK
    }

    /// One round: a reconcile pass, the pending Jobs run, and the clock moved past every cleanup
    /// deadline.
    pub async fn round(&self) -> Round {
        self.round_then(Some(SignedDuration::from_secs(
            i64::from(DEFAULT_TTL_SECONDS) + 1,
        )))
        .await
    }

    /// A reconcile pass and the pending Jobs run, then the clock moved by `later`, if at all.
    async fn round_then(&self, later: Option<SignedDuration>) -> Round {
        let c = &self.cluster;
        let writes_before = c.log.count(is_counted_write);
        let mut round = self.reconcile_pass().await;
        round.jobs_run = self.run_pending_jobs().await;
        if let Some(later) = later {
            c.clock.advance(later);
        }
        round.writes = c.log.count(is_counted_write) - writes_before;
        round
    }

    /// Refills the caches, reconciles every RunJob, refills, reconciles every Tenant: what the two
    /// controllers do for a batch of watch events, one reconcile per object.
    pub async fn reconcile_pass(&self) -> Round {
        let c = &self.cluster;
        let writes_before = c.log.count(is_counted_write);
        let mut round = Round::default();
        c.sync_stores().await;
        for run in self.cached_runs() {
            round.reconciles += 1;
            round.errors += usize::from(runjob::reconcile(run, c.ctx.clone()).await.is_err());
        }
        c.sync_stores().await;
        for t in self.cached_tenants() {
            round.reconciles += 1;
            round.errors += usize::from(tenant::reconcile(t, c.ctx.clone()).await.is_err());
        }
        round.writes = c.log.count(is_counted_write) - writes_before;
        round
    }

    /// The cached RunJobs in name order, not the cache's hash order: a drill's seed then decides
    /// everything.
    fn cached_runs(&self) -> Vec<Arc<RunJob>> {
        let mut runs = self.cluster.ctx.stores.runjobs.state();
        runs.sort_by_key(|r| r.name_any());
        runs
    }

    /// The cached Tenants in name order.
    fn cached_tenants(&self) -> Vec<Arc<Tenant>> {
        let mut tenants = self.cluster.ctx.stores.tenants.state();
        tenants.sort_by_key(|t| t.name_any());
        tenants
    }

    /// What the API holds now, as a watch that lags would still show it later.
    pub async fn snapshot(&self) -> Snapshot {
        let c = &self.cluster;
        let all = ListParams::default();
        Snapshot {
            tenants: c.tenants().list(&all).await.unwrap().items,
            runs: c.runjobs().list(&all).await.unwrap().items,
            jobs: c.jobs().list(&all).await.unwrap().items,
        }
    }

    /// One pass of both controllers over caches that lag, each on its own as three watches would: the
    /// Tenant cache shows `tenants`, the RunJob cache `runs`, the Job cache `jobs`. Every cached object
    /// is reconciled once, all side by side (interleaved at each API request), in the order `order`
    /// gives: a seeded shuffle makes the interleaving, and the replay, the seed's.
    pub async fn lagging_pass(
        &self,
        tenants: &Snapshot,
        runs: &Snapshot,
        jobs: &Snapshot,
        order: impl FnOnce(&mut Vec<LocalBoxFuture<'static, bool>>),
    ) -> Round {
        let c = &self.cluster;
        let writes_before = c.log.count(is_counted_write);
        c.fill_stores(
            tenants.tenants.clone(),
            runs.runs.clone(),
            jobs.jobs.clone(),
        );
        let mut reconciles: Vec<LocalBoxFuture<'static, bool>> = Vec::new();
        for run in self.cached_runs() {
            let ctx = c.ctx.clone();
            reconciles
                .push(async move { runjob::reconcile(run, ctx).await.is_err() }.boxed_local());
        }
        for t in self.cached_tenants() {
            let ctx = c.ctx.clone();
            reconciles.push(async move { tenant::reconcile(t, ctx).await.is_err() }.boxed_local());
        }
        order(&mut reconciles);
        let outcomes = futures::future::join_all(reconciles).await;
        Round {
            reconciles: outcomes.len(),
            errors: outcomes.iter().filter(|failed| **failed).count(),
            writes: c.log.count(is_counted_write) - writes_before,
            jobs_run: 0,
        }
    }

    /// Rounds until one writes nothing, fails nothing and runs no Job. Returns the rounds taken, or
    /// `Err` with the last round when there is no fixpoint within `max_rounds`.
    pub async fn converge(&self, max_rounds: usize) -> Result<usize, Round> {
        self.converge_with(max_rounds, async || self.round().await)
            .await
    }

    /// [`Self::converge`] with the clock standing still: no finished run's cleanup falls due.
    pub async fn converge_before_cleanup(&self, max_rounds: usize) -> Result<usize, Round> {
        self.converge_with(max_rounds, async || self.round_then(None).await)
            .await
    }

    async fn converge_with(
        &self,
        max_rounds: usize,
        mut round: impl AsyncFnMut() -> Round,
    ) -> Result<usize, Round> {
        let mut last = Round::default();
        for n in 1..=max_rounds {
            last = round().await;
            if last.quiet() {
                return Ok(n);
            }
        }
        Err(last)
    }

    /// Plays the Job controller and the Jobs' pods: each Job with no outcome yet runs the provisioner
    /// (through the operator-side client, faults and all) up to `backoffLimit + 1` times, then is
    /// marked Complete or Failed with the last error.
    pub async fn run_pending_jobs(&self) -> usize {
        self.run_pending_jobs_where(|_| true).await
    }

    /// [`Self::run_pending_jobs`] for the pending Jobs `now` picks (by name); the others' pods have not
    /// started yet.
    pub async fn run_pending_jobs_where(&self, mut now: impl FnMut(&str) -> bool) -> usize {
        let c = &self.cluster;
        let mut jobs = c.jobs().list(&ListParams::default()).await.unwrap().items;
        jobs.sort_by_key(|j| j.name_any());
        let mut ran = 0;
        for job in jobs {
            let finished = job
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| !c.is_empty());
            if finished {
                continue;
            }
            let name = job.name_any();
            if !now(&name) {
                continue;
            }
            let Some(run) = c.run(&name).await else {
                continue;
            };
            ran += 1;
            let tries = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(0) + 1;
            let mut outcome = Err(String::new());
            for _ in 0..tries {
                outcome = self.provision(&run).await;
                if outcome.is_ok() {
                    break;
                }
            }
            match outcome {
                Ok(()) => c.job_succeeded(&name).await,
                Err(message) => c.job_failed_in_pod(&name, &message).await,
            }
        }
        ran
    }

    async fn provision(&self, run: &RunJob) -> Result<(), String> {
        let provisioner = Provisioner {
            clickhouse: self.clickhouse.clone(),
            clickhouse_url: "http://clickhouse:8123".into(),
            sync: TenantSync::new(self.cluster.client.clone(), NS, "/var/lib/sentry/tantivy"),
            rotate: false,
            cluster: None,
            prefix: crate::legacy_prefix(),
            clock: self.cluster.clock.clone(),
        };
        let tenant = TenantName::parse(&run.spec.tenant).map_err(|e| e.to_string())?;
        provisioner
            .run(&tenant, run.spec.action)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    pub async fn tenants(&self) -> Vec<Tenant> {
        self.cluster
            .tenants()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Password of each tenant's credentials Secret, by tenant.
    pub async fn stored_passwords(&self) -> BTreeMap<String, String> {
        let secrets: Api<Secret> = Api::namespaced(self.cluster.admin.clone(), NS);
        let mut out = BTreeMap::new();
        for s in secrets.list(&ListParams::default()).await.unwrap().items {
            let tenant = s.labels().get("sentry.io/tenant").cloned();
            let password = s
                .data
                .as_ref()
                .and_then(|d| d.get(PASSWORD_KEY))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            if let (Some(tenant), Some(password)) = (tenant, password) {
                out.insert(tenant, password);
            }
        }
        out
    }

    /// Tenants whose status says Active while they are not, each with the reason: no ClickHouse user
    /// whose password is the one in their Secret, or suspended in the very generation the status was
    /// computed for. (A status a generation behind a Suspend click is late, not wrong: the reconciler has
    /// not seen the click yet.)
    pub async fn wrongly_active(&self) -> Vec<String> {
        let passwords = self.stored_passwords().await;
        let mut wrong = Vec::new();
        for t in self.tenants().await {
            if t.phase() != Some(TenantPhase::Active) {
                continue;
            }
            let name = t.name_any();
            let login_works = passwords
                .get(&name)
                .is_some_and(|p| self.clickhouse.password_matches(&clickhouse_user(&name), p));
            let observed = t.status.as_ref().and_then(|s| s.observed_generation);
            if !login_works {
                wrong.push(format!("{name}: no working ClickHouse login"));
            } else if t.spec.suspended && observed == t.metadata.generation {
                wrong.push(format!("{name}: suspended"));
            }
        }
        wrong
    }

    /// Jobs created more than once under one name (a Job's name is its RunJob's).
    pub fn duplicate_jobs(&self) -> usize {
        duplicates(&self.cluster.log.all(), "jobs")
    }

    /// Lock runs that should not exist: for each tenant, successful Suspend/Resume runs beyond one per
    /// change of `spec.suspended` the user made (`changes`, by tenant; counted by the drill from the
    /// tenants it read back, not from run names), plus any RunJob created twice under one name.
    pub async fn duplicate_runjobs(&self, changes: &BTreeMap<String, usize>) -> usize {
        let mut extra = 0;
        for t in self.tenants().await {
            let succeeded = t
                .history()
                .iter()
                .filter(|h| h.phase == sentry_tenants::crd::RunPhase::Succeeded)
                .filter(|h| matches!(h.action, RunAction::Suspend | RunAction::Resume))
                .count();
            extra += succeeded.saturating_sub(changes.get(&t.name_any()).copied().unwrap_or(0));
        }
        extra + duplicates(&self.cluster.log.all(), "runjobs")
    }

    /// The lock states ClickHouse was put in for `tenant`'s user, in order, repeats folded: read from
    /// the statements it was sent (`CREATE USER … HOST`, `ALTER USER … HOST`).
    pub fn lock_states(&self, tenant: &str) -> Vec<bool> {
        let user = format!("`{}`", clickhouse_user(tenant));
        let mut states: Vec<bool> = Vec::new();
        for sql in self.clickhouse.statements() {
            let about_user = sql.starts_with(&format!("CREATE USER IF NOT EXISTS {user} "))
                || sql.starts_with(&format!("ALTER USER {user} "));
            if !about_user || !sql.contains(" HOST ") {
                continue;
            }
            // `CREATE USER IF NOT EXISTS` of an existing user changes nothing.
            if sql.starts_with("CREATE") && !states.is_empty() {
                continue;
            }
            let locked = sql.contains(" HOST NONE");
            if states.last() != Some(&locked) {
                states.push(locked);
            }
        }
        states
    }

    /// Tenants whose `AccessLocked` condition, computed for their current generation, says their logins
    /// are locked (or allowed) while ClickHouse has them otherwise: what the dashboard tells a user
    /// about a suspension must be true whenever it is said.
    pub async fn lock_claims_wrong(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        for t in self.tenants().await {
            let Some(claim) = t.status.as_ref().and_then(|s| {
                s.conditions.iter().find(|c| {
                    c.type_ == "AccessLocked" && c.observed_generation == t.metadata.generation
                })
            }) else {
                continue;
            };
            let claimed = match claim.reason.as_str() {
                "LoginsLocked" => true,
                "LoginsAllowed" => false,
                _ => continue,
            };
            let name = t.name_any();
            let actual = self.clickhouse.is_locked(&clickhouse_user(&name));
            if actual != Some(claimed) {
                wrong.push(format!(
                    "{name}: says {} but ClickHouse has {actual:?}",
                    claim.reason
                ));
            }
        }
        wrong
    }

    /// Runs finished and recorded in the tenants' histories.
    pub async fn runs_finished(&self) -> usize {
        self.tenants().await.iter().map(|t| t.history().len()).sum()
    }

    /// RunJobs that still exist (after convergence every run has been cleaned up).
    pub async fn live_runs(&self) -> Vec<String> {
        self.cluster
            .runjobs()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|r| r.name_any())
            .collect()
    }

    /// Tenants whose ClickHouse login lock disagrees with `spec.suspended`.
    pub async fn lock_mismatches(&self) -> Vec<String> {
        self.tenants()
            .await
            .into_iter()
            .filter(|t| {
                self.clickhouse.is_locked(&clickhouse_user(&t.name_any())) != Some(t.spec.suspended)
            })
            .map(|t| t.name_any())
            .collect()
    }
}

/// Writes the operator made, Events not counted (advisory, deduplicated by the recorder).
pub fn is_counted_write(r: &Recorded) -> bool {
    r.is_write() && !r.is_event()
}

/// Names created more than once (successful POSTs) for `resource`.
fn duplicates(log: &[Recorded], resource: &str) -> usize {
    let mut seen = BTreeSet::new();
    log.iter()
        .filter(|r| r.method == Method::POST && r.resource() == resource && r.status < 300)
        .filter_map(|r| r.body["metadata"]["name"].as_str())
        .filter(|name| !seen.insert(name.to_owned()))
        .count()
}
