//! The cap on runs in flight (`--max-concurrent-runs`). A run gets its Job only while fewer than the
//! cap of the operator's Jobs are unfinished; the others stay `Pending` and start oldest first
//! (creation time, then name) as slots free up. 10,000 Tenants applied at once then make at most the
//! cap of pods and of ClickHouse DDL sessions at any moment, instead of 10,000.
//!
//! The count comes from the Jobs cache (the truth after a restart or a change of leader), plus the
//! runs this process admitted whose Jobs the cache has not shown yet: admission checks and records
//! under one lock, so two reconciles running side by side never both take the last slot.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::run_index::{QueueKey, queue_key};
use super::shards::RunsOwned;
use super::wiring::Stores;
use crate::crd::RunJob;
use crate::telemetry::RunsInFlight;

pub struct RunSlots {
    cap: usize,
    /// The runs this operator counts and starts: its shard's (all of them when unsharded).
    owned: Option<RunsOwned>,
    /// Runs admitted by this process whose Job the cache may not show yet.
    admitted: Mutex<HashSet<String>>,
    /// Queued runs to reconcile now that a slot is free (the RunJob controller listens).
    wake: mpsc::UnboundedSender<ObjectRef<RunJob>>,
    woken: Mutex<Option<mpsc::UnboundedReceiver<ObjectRef<RunJob>>>>,
}

/// Whether a run that has no Job yet may create one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Start,
    /// Every slot is taken, or older runs wait for the free ones.
    Wait,
}

impl RunSlots {
    pub fn new(cap: u16) -> Arc<Self> {
        Self::build(cap, None)
    }

    /// The cap of one shard: only its tenants' runs and Jobs count. Unsharded, every one does (a Job
    /// without a tenant label included), as with [`Self::new`].
    pub fn sharded(cap: u16, owned: RunsOwned) -> Arc<Self> {
        Self::build(cap, owned.sharding.is_sharded().then_some(owned))
    }

    fn build(cap: u16, owned: Option<RunsOwned>) -> Arc<Self> {
        let (wake, woken) = mpsc::unbounded();
        Arc::new(Self {
            cap: usize::from(cap.max(1)),
            owned,
            admitted: Mutex::default(),
            wake,
            woken: Mutex::new(Some(woken)),
        })
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// The stream of queued runs to reconcile as slots free up; taken once, by the RunJob controller.
    pub fn take_wake_ups(&self) -> Option<mpsc::UnboundedReceiver<ObjectRef<RunJob>>> {
        self.woken.lock().expect("slots lock").take()
    }

    /// Admits `run` (which has no Job yet) when a slot is free and no older run waits for it, and
    /// counts it from then on.
    pub fn admit(&self, run: &RunJob, stores: &Stores) -> Admission {
        let mut admitted = self.admitted.lock().expect("slots lock");
        let name = run.name_any();
        // Admitted before, and its Job create failed (or its Job is not cached yet): it holds its slot.
        if admitted.contains(&name) {
            return Admission::Start;
        }
        let ns = run.namespace().unwrap_or_default();
        let place = queue_key(run);
        // Admitted runs whose Job the cache shows by now are counted twice until forgotten, which
        // reads every admitted run: only worth it when the count as it stands says wait. Counting
        // too many never starts a run too many.
        let start = self.may_start(&place, &ns, stores, &admitted) || {
            self.forget_started(&mut admitted, stores, &ns);
            self.may_start(&place, &ns, stores, &admitted)
        };
        if start {
            admitted.insert(name);
            Admission::Start
        } else {
            Admission::Wait
        }
    }

    /// After a run finished or went away: reconcile the queued runs that may now start.
    pub fn wake_next(&self, namespace: &str, stores: &Stores) {
        let mut admitted = self.admitted.lock().expect("slots lock");
        self.forget_started(&mut admitted, stores, namespace);
        let free = self.free(namespace, stores, &admitted);
        if free == 0 {
            return;
        }
        // Not sized by `free`: with a large cap that would allocate for thousands per finished run.
        let mut oldest = Vec::new();
        stores.run_index.read(|index| {
            index.visit_queue(namespace, |(_, name)| {
                if self.waiting(name, namespace, stores, &admitted) {
                    oldest.push(ObjectRef::new(name).within(namespace));
                }
                if oldest.len() < free {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })
        });
        for run in oldest {
            let _ = self.wake.unbounded_send(run);
        }
    }

    /// Runs in flight as this process counts them now (for metrics and tests).
    pub fn in_flight(&self, namespace: &str, stores: &Stores) -> usize {
        let mut admitted = self.admitted.lock().expect("slots lock");
        self.forget_started(&mut admitted, stores, namespace);
        self.running(namespace, stores) + admitted.len()
    }

    /// The cap's figures for `/metrics`.
    pub fn counted(&self, namespace: &str, stores: &Stores) -> RunsInFlight {
        RunsInFlight {
            in_flight: self.in_flight(namespace, stores),
            waiting: self.waiting_runs(namespace, stores),
            max: self.cap,
        }
    }

    /// Runs waiting for a slot now (for metrics).
    pub fn waiting_runs(&self, namespace: &str, stores: &Stores) -> usize {
        let admitted = self.admitted.lock().expect("slots lock");
        let mut waiting = 0;
        stores.run_index.read(|index| {
            index.visit_queue(namespace, |(_, name)| {
                waiting += usize::from(self.waiting(name, namespace, stores, &admitted));
                ControlFlow::Continue(())
            })
        });
        waiting
    }
}

impl RunSlots {
    /// Whether the run at `place` may start: a slot is free and fewer runs wait ahead of it than
    /// slots are free (read oldest first, and only as far as it takes to know).
    fn may_start(
        &self,
        place: &QueueKey,
        namespace: &str,
        stores: &Stores,
        admitted: &HashSet<String>,
    ) -> bool {
        let free = self.free(namespace, stores, admitted);
        if free == 0 {
            return false;
        }
        let mut older = 0;
        stores.run_index.read(|index| {
            index.visit_queue(namespace, |queued| {
                if queued >= place || older >= free {
                    return ControlFlow::Break(());
                }
                older += usize::from(self.waiting(&queued.1, namespace, stores, admitted));
                ControlFlow::Continue(())
            })
        });
        older < free
    }

    /// The slots not taken: the cap less this shard's unfinished Jobs and the runs admitted.
    fn free(&self, namespace: &str, stores: &Stores, admitted: &HashSet<String>) -> usize {
        self.cap
            .saturating_sub(self.running(namespace, stores) + admitted.len())
    }

    /// This shard's unfinished Jobs.
    fn running(&self, namespace: &str, stores: &Stores) -> usize {
        stores.job_index.read(|jobs| match self.owned {
            None => jobs.count(namespace),
            Some(_) => jobs
                .tenants(namespace)
                .filter(|tenant| self.owns_job(*tenant))
                .count(),
        })
    }

    /// Forgets the admitted runs whose Job the cache shows, and those finished or gone.
    fn forget_started(&self, admitted: &mut HashSet<String>, stores: &Stores, namespace: &str) {
        admitted.retain(|name| {
            let key = ObjectRef::new(name).within(namespace);
            let run_in_flight = stores.runjobs.get(&key).is_some_and(|r| r.is_in_flight());
            run_in_flight
                && stores
                    .jobs
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_none()
        });
    }

    /// A run that waits for a slot: not admitted, this shard's, in flight, no Job made (none
    /// recorded, none cached).
    fn waiting(
        &self,
        name: &str,
        namespace: &str,
        stores: &Stores,
        admitted: &HashSet<String>,
    ) -> bool {
        if admitted.contains(name) {
            return false;
        }
        let Some(run) = stores.runjobs.get(&ObjectRef::new(name).within(namespace)) else {
            return false;
        };
        run.is_in_flight()
            && run.status.as_ref().is_none_or(|s| s.job_ref.is_none())
            && stores
                .jobs
                .get(&ObjectRef::new(name).within(namespace))
                .is_none()
            && self.owns_tenant(&run.spec.tenant)
    }

    /// A Job counts against this shard's cap when its tenant (its `sentry.io/tenant` label) is one
    /// of the shard's.
    fn owns_job(&self, tenant: Option<&str>) -> bool {
        self.owned.is_none() || tenant.is_some_and(|t| self.owns_tenant(t))
    }

    fn owns_tenant(&self, tenant: &str) -> bool {
        self.owned.as_ref().is_none_or(|o| o.of_tenant(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use kube::runtime::{reflector, watcher};

    fn run(name: &str, created: &str) -> RunJob {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"tenant": name, "action": "Provision"},
        }))
        .unwrap()
    }

    /// The caches and their indexes as the watches leave them after listing `runs` and `jobs`.
    fn stores(runs: &[RunJob], jobs: &[Job]) -> Stores {
        let (stores, mut writers) = Stores::shared();
        for run in runs {
            let event = watcher::Event::Apply(run.clone());
            stores.index_run_event(&event);
            writers.runjobs.apply_watcher_event(&event);
        }
        for job in jobs {
            let event = watcher::Event::Apply(job.clone());
            stores.index_job_event(&event);
            writers.jobs.apply_watcher_event(&event);
        }
        stores
    }

    /// The oldest waiting run takes a free slot; a younger one waits even when it is reconciled first.
    #[test]
    fn the_oldest_waiting_run_takes_the_free_slot() {
        let old = run("old", "2026-12-03T10:00:00Z");
        let young = run("young", "2026-12-03T10:00:05Z");
        let stores = stores(&[old.clone(), young.clone()], &[]);
        let slots = RunSlots::new(1);
        assert_eq!(slots.admit(&young, &stores), Admission::Wait);
        assert_eq!(slots.admit(&old, &stores), Admission::Start);
        assert_eq!(
            slots.admit(&young, &stores),
            Admission::Wait,
            "the slot is taken"
        );
        assert_eq!(slots.in_flight("ns", &stores), 1);
        assert_eq!(slots.waiting_runs("ns", &stores), 1, "young waits");
    }

    /// A freed slot wakes the oldest waiting runs, as many as slots are free, oldest first; once every
    /// slot is taken, nobody.
    #[test]
    fn free_slots_wake_the_oldest_waiting_runs() {
        let a = run("a", "2026-12-03T10:00:02Z");
        let b = run("b", "2026-12-03T10:00:00Z");
        let c = run("c", "2026-12-03T10:00:01Z");
        let stores = stores(&[a, b.clone(), c.clone()], &[]);
        let slots = RunSlots::new(2);
        let mut woken = slots.take_wake_ups().unwrap();
        let mut names = || -> Vec<String> {
            std::iter::from_fn(|| woken.try_recv().ok())
                .map(|r| r.name)
                .collect()
        };
        slots.wake_next("ns", &stores);
        assert_eq!(names(), ["b", "c"]);
        assert_eq!(slots.admit(&b, &stores), Admission::Start);
        assert_eq!(slots.admit(&c, &stores), Admission::Start);
        slots.wake_next("ns", &stores);
        assert_eq!(names(), Vec::<String>::new(), "every slot taken");
    }

    /// A run whose Job create failed after it was admitted (an API fault) keeps its slot: its retry is
    /// admitted again, instead of waiting behind the slot it holds itself.
    #[test]
    fn a_run_admitted_before_is_admitted_again() {
        let only = run("only", "2026-12-03T10:00:00Z");
        let stores = stores(std::slice::from_ref(&only), &[]);
        let slots = RunSlots::new(1);
        assert_eq!(slots.admit(&only, &stores), Admission::Start);
        assert_eq!(slots.admit(&only, &stores), Admission::Start);
    }

    /// An admitted run's slot is free again once the cache shows it finished (its Job too): the next
    /// run starts, though the admitted run is still remembered when it asks.
    #[test]
    fn an_admitted_run_that_finished_frees_its_slot() {
        let first = run("first", "2026-12-03T10:00:00Z");
        let next = run("next", "2026-12-03T10:00:05Z");
        let slots = RunSlots::new(1);
        let queued = stores(&[first.clone(), next.clone()], &[]);
        assert_eq!(slots.admit(&first, &queued), Admission::Start);
        assert_eq!(
            slots.admit(&next, &queued),
            Admission::Wait,
            "the slot is taken"
        );
        let mut finished = first.clone();
        finished.status = Some(crate::crd::RunJobStatus {
            phase: Some(crate::crd::RunPhase::Succeeded),
            ..Default::default()
        });
        let later = stores(&[finished, next.clone()], &[]);
        assert_eq!(slots.in_flight("ns", &queued), 1);
        assert_eq!(slots.admit(&next, &later), Admission::Start);
        assert_eq!(slots.in_flight("ns", &later), 1, "next alone");
    }

    fn tenant(name: &str, shard: &str) -> crate::crd::Tenant {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name, "namespace": "ns", "labels": {"sentry.io/shard": shard}},
            "spec": {},
        }))
        .unwrap()
    }

    fn job_of(tenant: &str, name: &str) -> Job {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "labels": {"sentry.io/tenant": tenant}},
        }))
        .unwrap()
    }

    /// Shard a's cap counts shard a's Jobs and queues alone: shard b's running Job takes none of its
    /// slots, and shard b's waiting run is not one of its queue.
    #[test]
    fn a_shard_counts_only_its_own_tenants_runs_and_jobs() {
        let (tenants, mut tenant_writer) = reflector::store();
        tenant_writer.apply_watcher_event(&watcher::Event::Apply(tenant("mine", "a")));
        tenant_writer.apply_watcher_event(&watcher::Event::Apply(tenant("theirs", "b")));
        let runs = [
            run("mine", "2026-12-03T10:00:05Z"),
            run("theirs", "2026-12-03T10:00:00Z"),
        ];
        let without_jobs = stores(&runs, &[]);
        let with_theirs = stores(&runs, &[job_of("theirs", "theirs-other-1")]);
        let owned = |shard: &str| RunsOwned {
            sharding: super::super::shards::Sharding::new(
                vec!["a".into(), "b".into()],
                Some(shard.to_owned()),
            ),
            tenants: tenants.clone(),
            namespace: "ns".into(),
        };
        let a = RunSlots::sharded(1, owned("a"));
        assert_eq!(a.in_flight("ns", &with_theirs), 0, "b's Job");
        assert_eq!(
            a.waiting_runs("ns", &without_jobs),
            1,
            "only its own run waits"
        );
        let mine = run("mine", "2026-12-03T10:00:05Z");
        assert_eq!(
            a.admit(&mine, &with_theirs),
            Admission::Start,
            "b's older waiting run is not ahead of it, b's Job takes no slot"
        );
        let b = RunSlots::sharded(1, owned("b"));
        assert_eq!(b.in_flight("ns", &with_theirs), 1, "its own Job");
        let unsharded = RunSlots::new(1);
        assert_eq!(unsharded.in_flight("ns", &with_theirs), 1);
        assert_eq!(unsharded.waiting_runs("ns", &without_jobs), 2);
    }
}
