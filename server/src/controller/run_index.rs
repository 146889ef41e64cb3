//! Which cached runs belong to which tenant, kept beside the RunJob cache from the same watch events.
//! A tenant's reconcile looks its runs up here instead of scanning every cached run: at 10,000 tenants
//! with 10,000 runs the scan made each reconcile 16 times slower than at 1,000 (see BENCHMARKS.md). It also
//! keeps every run by age (one page of the runs list reads one page of it) and the queue for slots (the
//! cap reads it oldest first and stops as soon as it knows), so neither walks the fleet.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::ControlFlow;

use kube::runtime::reflector::ObjectRef;

use super::follow::{Followed, Follows};
use crate::crd::{RunJob, RunPhase};

pub type RunIndex = Followed<Index>;

/// Where a run stands in the queue for a slot: oldest first, then by name.
pub type QueueKey = (Option<jiff::Timestamp>, String);

pub fn queue_key(run: &RunJob) -> QueueKey {
    (
        run.metadata.creation_timestamp.as_ref().map(|t| t.0),
        run.metadata.name.clone().unwrap_or_default(),
    )
}

#[derive(Default)]
pub struct Index {
    by_tenant: HashMap<String, HashSet<ObjectRef<RunJob>>>,
    tenant_of: HashMap<ObjectRef<RunJob>, String>,
    /// The runs whose latest attempt failed (until their cleanup): the "needs attention" list's.
    failed: HashSet<ObjectRef<RunJob>>,
    /// The runs not finished yet.
    in_flight: HashSet<ObjectRef<RunJob>>,
    /// Per namespace, every run by age (the runs page reads it newest first, one page of it).
    by_age: HashMap<String, BTreeSet<QueueKey>>,
    /// Per namespace, the runs in flight with no Job recorded, in queue order: the ones that may
    /// wait for a slot (`slots.rs` reads them oldest first and stops as soon as it knows).
    queue: HashMap<String, BTreeSet<QueueKey>>,
    /// Each run's place in those two.
    place: HashMap<ObjectRef<RunJob>, QueueKey>,
}

impl Follows<RunJob> for Index {
    fn insert(&mut self, run: &RunJob) {
        let key = ObjectRef::from_obj(run);
        self.forget(&key);
        self.by_tenant
            .entry(run.spec.tenant.clone())
            .or_default()
            .insert(key.clone());
        if run.phase() == Some(RunPhase::Failed) {
            self.failed.insert(key.clone());
        }
        let place = queue_key(run);
        let namespace = key.namespace.clone().unwrap_or_default();
        if run.is_in_flight() {
            self.in_flight.insert(key.clone());
            if run.status.as_ref().is_none_or(|s| s.job_ref.is_none()) {
                let queue = self.queue.entry(namespace.clone()).or_default();
                queue.insert(place.clone());
            }
        }
        let by_age = self.by_age.entry(namespace).or_default();
        by_age.insert(place.clone());
        self.place.insert(key.clone(), place);
        self.tenant_of.insert(key, run.spec.tenant.clone());
    }

    fn remove(&mut self, run: &RunJob) {
        self.forget(&ObjectRef::from_obj(run));
    }
}

impl Index {
    fn forget(&mut self, key: &ObjectRef<RunJob>) {
        self.failed.remove(key);
        self.in_flight.remove(key);
        if let Some(place) = self.place.remove(key) {
            let namespace = key.namespace.as_deref().unwrap_or_default();
            for ordered in [&mut self.queue, &mut self.by_age] {
                if let Some(places) = ordered.get_mut(namespace) {
                    places.remove(&place);
                    if places.is_empty() {
                        ordered.remove(namespace);
                    }
                }
            }
        }
        let Some(tenant) = self.tenant_of.remove(key) else {
            return;
        };
        if let Some(runs) = self.by_tenant.get_mut(&tenant) {
            runs.remove(key);
            if runs.is_empty() {
                self.by_tenant.remove(&tenant);
            }
        }
    }

    /// The keys of the runs that failed and are not cleaned up yet.
    pub fn failed(&self) -> Vec<ObjectRef<RunJob>> {
        self.failed.iter().cloned().collect()
    }

    /// How many runs of `namespace` are not finished yet.
    pub fn in_flight(&self, namespace: &str) -> usize {
        let of_namespace = |key: &&ObjectRef<RunJob>| key.namespace.as_deref() == Some(namespace);
        self.in_flight.iter().filter(of_namespace).count()
    }

    /// The keys of `tenant`'s runs (any namespace; the caller resolves and checks them in the cache).
    pub fn runs_of(&self, tenant: &str) -> Vec<ObjectRef<RunJob>> {
        self.by_tenant
            .get(tenant)
            .map(|runs| runs.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// `namespace`'s runs newest first (creation time, then name, both descending), `window` (told
    /// how many there are) choosing which (how many to skip, how many to take); and how many in all.
    pub fn newest(
        &self,
        namespace: &str,
        window: impl FnOnce(usize) -> (usize, usize),
    ) -> (Vec<ObjectRef<RunJob>>, usize) {
        let empty = BTreeSet::new();
        let places = self.by_age.get(namespace).unwrap_or(&empty);
        let (skip, take) = window(places.len());
        let runs = places.iter().rev().skip(skip).take(take);
        let runs = runs.map(|(_, name)| ObjectRef::new(name).within(namespace));
        (runs.collect(), places.len())
    }

    /// The places of `namespace`'s runs in flight with no Job recorded (the run's name is the second
    /// part), oldest first, until `visit` breaks.
    pub fn visit_queue(
        &self,
        namespace: &str,
        mut visit: impl FnMut(&QueueKey) -> ControlFlow<()>,
    ) {
        for place in self.queue.get(namespace).into_iter().flatten() {
            if visit(place).is_break() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{RunAction, RunJobSpec, RunJobStatus};
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;

    fn run(name: &str, tenant: &str) -> RunJob {
        RunJob {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: RunJobSpec::new(tenant, RunAction::Provision),
            status: None,
        }
    }

    fn names(index: &RunIndex, tenant: &str) -> Vec<String> {
        let mut names: Vec<String> = index
            .read(|i| i.runs_of(tenant))
            .into_iter()
            .map(|r| r.name)
            .collect();
        names.sort();
        names
    }

    #[test]
    fn follows_applies_deletes_and_relists() {
        let index = RunIndex::default();
        index.apply(&Event::Apply(run("a-provision-1", "a")));
        index.apply(&Event::Apply(run("a-suspend-21", "a")));
        index.apply(&Event::Apply(run("b-provision-1", "b")));
        assert_eq!(names(&index, "a"), ["a-provision-1", "a-suspend-21"]);
        index.apply(&Event::Delete(run("a-provision-1", "a")));
        assert_eq!(names(&index, "a"), ["a-suspend-21"]);
        // A relist replaces everything only once it is complete.
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(run("b-provision-2", "b")));
        assert_eq!(names(&index, "a"), ["a-suspend-21"]);
        index.apply(&Event::InitDone);
        assert!(names(&index, "a").is_empty());
        assert_eq!(names(&index, "b"), ["b-provision-2"]);
        assert!(names(&index, "nobody").is_empty());
    }

    #[test]
    fn keeps_the_failed_and_the_unfinished_runs_until_they_go() {
        let index = RunIndex::default();
        let mut failed = run("a-provision-1", "a");
        failed.status = Some(crate::crd::RunJobStatus {
            phase: Some(RunPhase::Failed),
            ..Default::default()
        });
        index.apply(&Event::Apply(run("b-provision-1", "b")));
        index.apply(&Event::Apply(failed.clone()));
        let failed_names = |i: &RunIndex| -> Vec<String> {
            i.read(Index::failed).into_iter().map(|r| r.name).collect()
        };
        assert_eq!(failed_names(&index), ["a-provision-1"]);
        index.apply(&Event::Apply(run("a-provision-1", "a")));
        assert!(
            failed_names(&index).is_empty(),
            "a retried run that no longer reads Failed"
        );
        assert_eq!(index.read(|i| i.in_flight("ns")), 2, "both unfinished");
        assert_eq!(index.read(|i| i.in_flight("elsewhere")), 0);
        index.apply(&Event::Apply(failed.clone()));
        assert_eq!(
            index.read(|i| i.in_flight("ns")),
            1,
            "a failed run has finished"
        );
        index.apply(&Event::Delete(failed));
        assert!(failed_names(&index).is_empty());
    }

    fn queue(index: &RunIndex) -> Vec<String> {
        let mut names = Vec::new();
        index.read(|i| {
            i.visit_queue("ns", |(_, name)| {
                names.push(name.clone());
                ControlFlow::Continue(())
            })
        });
        names
    }

    fn created(mut run: RunJob, at: &str) -> RunJob {
        run.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at.parse().unwrap()),
        );
        run
    }

    /// The queue holds the runs in flight with no Job recorded, oldest first then by name; a run
    /// leaves it when its Job is recorded, when it finishes and when it goes.
    #[test]
    fn queues_the_runs_without_a_job_oldest_first() {
        let index = RunIndex::default();
        let young = created(run("young", "a"), "2026-12-03T10:00:05Z");
        let old_b = created(run("old-b", "b"), "2026-12-03T10:00:00Z");
        let old_a = created(run("old-a", "c"), "2026-12-03T10:00:00Z");
        for r in [&young, &old_b, &old_a] {
            index.apply(&Event::Apply(r.clone()));
        }
        assert_eq!(queue(&index), ["old-a", "old-b", "young"]);
        let mut started = old_a.clone();
        started.status = Some(RunJobStatus {
            job_ref: Some(Default::default()),
            ..Default::default()
        });
        index.apply(&Event::Apply(started));
        let mut finished = old_b.clone();
        finished.status = Some(RunJobStatus {
            phase: Some(RunPhase::Succeeded),
            ..Default::default()
        });
        index.apply(&Event::Apply(finished));
        assert_eq!(queue(&index), ["young"]);
        index.apply(&Event::Delete(young));
        assert!(queue(&index).is_empty());
        assert!(
            index.read(|i| i.queue.is_empty()),
            "no empty namespace kept"
        );
        let mut stopped_early = Vec::new();
        index.apply(&Event::Apply(old_a));
        index.apply(&Event::Apply(old_b));
        index.read(|i| {
            i.visit_queue("ns", |(_, name)| {
                stopped_early.push(name.clone());
                ControlFlow::Break(())
            })
        });
        assert_eq!(stopped_early, ["old-a"], "the visit stops when told");
    }

    /// The runs page's order: newest first, then by name descending; a window of it, and the total.
    #[test]
    fn lists_the_runs_newest_first_one_window_at_a_time() {
        let index = RunIndex::default();
        for (name, at) in [
            ("a", "2026-12-03T10:00:00Z"),
            ("b", "2026-12-03T10:00:05Z"),
            ("c", "2026-12-03T10:00:05Z"),
        ] {
            index.apply(&Event::Apply(created(run(name, "t"), at)));
        }
        let page = |skip, take| {
            let (runs, total) = index.read(|i| i.newest("ns", |_| (skip, take)));
            (runs.into_iter().map(|r| r.name).collect::<Vec<_>>(), total)
        };
        assert_eq!(page(0, 10), (vec!["c".into(), "b".into(), "a".into()], 3));
        assert_eq!(page(1, 1), (vec!["b".into()], 3));
        index.apply(&Event::Delete(created(
            run("c", "t"),
            "2026-12-03T10:00:05Z",
        )));
        assert_eq!(page(0, 10), (vec!["b".into(), "a".into()], 2));
        assert_eq!(index.read(|i| i.newest("elsewhere", |n| (0, n))).1, 0);
    }
}
