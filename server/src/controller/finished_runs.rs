//! Finished runs counted as they come and go, for the overview's charts: how many finished in each
//! hour, by outcome, and how long each action's runs took. Fed from the same watch events as the
//! caches — the tenants' histories (which keep a run after its cleanup) and the live RunJobs — and each
//! run counted once, by its uid, while either still shows it. The overview reads 24 hourly counters
//! and one small histogram per action instead of walking every tenant's history on every request.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::crd::{RunAction, RunJob, RunPhase, Tenant};

/// A finished run, from a live RunJob or a tenant's history.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub action: RunAction,
    pub phase: RunPhase,
    pub started: Option<Timestamp>,
    pub finished: Timestamp,
}

impl Finished {
    fn of_run(run: &RunJob) -> Option<Self> {
        let status = run.status.as_ref()?;
        let phase = status.phase.filter(|p| p.is_finished())?;
        Some(Self {
            action: run.spec.action,
            phase,
            started: status.start_time.as_ref().map(|t| t.0),
            finished: status.completion_time.as_ref()?.0,
        })
    }

    fn seconds(&self) -> Option<i64> {
        let started = self.started?;
        Some(self.finished.duration_since(started).as_secs().max(0))
    }
}

/// The first second of the hour `at` falls in.
pub fn hour_of(at: Timestamp) -> i64 {
    at.as_second().div_euclid(3600) * 3600
}

#[derive(Clone, Default)]
pub struct FinishedRuns(Arc<Mutex<Inner>>);

#[derive(Default)]
struct Inner {
    histories: Source,
    runs: Source,
    namespaces: HashMap<String, Totals>,
}

/// The finished runs each object (namespace, name) shows, by uid.
type ByObject = HashMap<(String, String), Vec<(String, Finished)>>;

/// What one kind of object contributes.
#[derive(Default)]
struct Source {
    live: ByObject,
    /// A relist in progress: built aside, swapped in when complete (as the caches do).
    relist: Option<ByObject>,
}

#[derive(Clone, Copy, PartialEq)]
enum From {
    History,
    Run,
}

/// One namespace's counts.
#[derive(Default)]
struct Totals {
    /// Each run counted, as it was first counted, and how many objects show it (a history record
    /// and its live run).
    counted: HashMap<String, (Finished, u8)>,
    /// By the hour of their finish and whether they failed.
    by_hour: BTreeMap<(i64, bool), usize>,
    /// History records alone, by the hour of their finish: runs recorded before their cleanup.
    recorded_by_hour: BTreeMap<i64, usize>,
    /// Per action: how many runs took each number of seconds.
    seconds: HashMap<RunAction, BTreeMap<i64, usize>>,
}

/// One more or one fewer at `key`; a count that reaches zero goes, so hours long past leave no trace.
fn bump<K: Ord + Clone>(map: &mut BTreeMap<K, usize>, key: K, up: bool) {
    let count = map.entry(key.clone()).or_default();
    if up {
        *count += 1;
    } else {
        *count = count.saturating_sub(1);
    }
    if *count == 0 {
        map.remove(&key);
    }
}

impl Totals {
    fn add(&mut self, uid: &str, run: &Finished, from: From) {
        if from == From::History {
            bump(&mut self.recorded_by_hour, hour_of(run.finished), true);
        }
        let (_, shown) = self
            .counted
            .entry(uid.to_owned())
            .or_insert_with(|| (run.clone(), 0));
        *shown += 1;
        if *shown == 1 {
            self.count(run, true);
        }
    }

    fn remove(&mut self, uid: &str, run: &Finished, from: From) {
        if from == From::History {
            bump(&mut self.recorded_by_hour, hour_of(run.finished), false);
        }
        let Some((first, shown)) = self.counted.get_mut(uid) else {
            return;
        };
        *shown -= 1;
        if *shown == 0 {
            let first = first.clone();
            self.counted.remove(uid);
            self.count(&first, false);
        }
    }

    fn count(&mut self, run: &Finished, up: bool) {
        let failed = run.phase == RunPhase::Failed;
        bump(&mut self.by_hour, (hour_of(run.finished), failed), up);
        if let Some(seconds) = run.seconds() {
            let of_action = self.seconds.entry(run.action).or_default();
            bump(of_action, seconds, up);
            if of_action.is_empty() {
                self.seconds.remove(&run.action);
            }
        }
    }
}

impl Inner {
    fn source(&mut self, from: From) -> &mut Source {
        match from {
            From::History => &mut self.histories,
            From::Run => &mut self.runs,
        }
    }

    fn set(&mut self, from: From, key: (String, String), runs: Vec<(String, Finished)>) {
        let old = if runs.is_empty() {
            self.source(from).live.remove(&key)
        } else {
            self.source(from).live.insert(key.clone(), runs.clone())
        };
        if old.is_none() && runs.is_empty() {
            // Nothing counted before, nothing to count now: no namespace gets an empty entry.
            return;
        }
        let totals = self.namespaces.entry(key.0.clone()).or_default();
        for (uid, run) in old.unwrap_or_default() {
            totals.remove(&uid, &run, from);
        }
        for (uid, run) in &runs {
            totals.add(uid, run, from);
        }
        if totals.counted.is_empty() {
            // Every run a history shows is counted too: nothing counted, nothing recorded either.
            self.namespaces.remove(&key.0);
        }
    }

    /// Follows one watch event of an object whose finished runs are `runs_of` it.
    fn apply<K: ResourceExt>(
        &mut self,
        from: From,
        event: &Event<K>,
        runs_of: impl Fn(&K) -> Vec<(String, Finished)>,
    ) {
        let key = |obj: &K| (obj.namespace().unwrap_or_default(), obj.name_any());
        match event {
            Event::Apply(obj) => self.set(from, key(obj), runs_of(obj)),
            Event::Delete(obj) => self.set(from, key(obj), Vec::new()),
            Event::Init => self.source(from).relist = Some(HashMap::new()),
            Event::InitApply(obj) => {
                let runs = runs_of(obj);
                if let Some(relist) = self.source(from).relist.as_mut()
                    && !runs.is_empty()
                {
                    relist.insert(key(obj), runs);
                }
            }
            Event::InitDone => {
                let Some(relist) = self.source(from).relist.take() else {
                    return;
                };
                let old: Vec<_> = self.source(from).live.keys().cloned().collect();
                for key in old {
                    self.set(from, key, Vec::new());
                }
                for (key, runs) in relist {
                    self.set(from, key, runs);
                }
            }
        }
    }
}

fn recorded_runs(tenant: &Tenant) -> Vec<(String, Finished)> {
    tenant
        .history()
        .iter()
        .map(|h| {
            let run = Finished {
                action: h.action,
                phase: h.phase,
                started: h.started_at.as_ref().map(|t| t.0),
                finished: h.finished_at.0,
            };
            (h.uid.clone(), run)
        })
        .collect()
}

fn live_run(run: &RunJob) -> Vec<(String, Finished)> {
    Finished::of_run(run)
        .map(|f| (run.uid().unwrap_or_default(), f))
        .into_iter()
        .collect()
}

/// Per action, in [`RunAction::ALL`] order, how many runs took each number of seconds.
pub type Durations = Vec<(RunAction, Vec<(i64, usize)>)>;

impl FinishedRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn tenant_event(&self, event: &Event<Tenant>) {
        self.lock().apply(From::History, event, recorded_runs);
    }

    pub fn run_event(&self, event: &Event<RunJob>) {
        self.lock().apply(From::Run, event, live_run);
    }

    /// Runs of `namespace` that finished in each of the `hours` hours from `first` (an hour's first
    /// second): succeeded, failed.
    pub fn per_hour(&self, namespace: &str, first: i64, hours: i64) -> Vec<[usize; 2]> {
        let inner = self.lock();
        let totals = inner.namespaces.get(namespace);
        let count = |hour: i64, failed: bool| {
            totals
                .and_then(|t| t.by_hour.get(&(hour, failed)).copied())
                .unwrap_or(0)
        };
        (0..hours)
            .map(|i| first + i * 3600)
            .map(|hour| [count(hour, false), count(hour, true)])
            .collect()
    }

    /// History records of `namespace` whose run finished in the `hours` hours from `first`.
    pub fn recorded(&self, namespace: &str, first: i64, hours: i64) -> usize {
        let inner = self.lock();
        let Some(totals) = inner.namespaces.get(namespace) else {
            return 0;
        };
        let end = first + hours * 3600;
        totals
            .recorded_by_hour
            .range(first..end)
            .map(|(_, n)| n)
            .sum()
    }

    /// How long `namespace`'s runs took, per action that has any.
    pub fn durations(&self, namespace: &str) -> Durations {
        let inner = self.lock();
        let Some(totals) = inner.namespaces.get(namespace) else {
            return Vec::new();
        };
        RunAction::ALL
            .iter()
            .filter_map(|action| {
                let seconds = totals.seconds.get(action)?;
                let taken: Vec<(i64, usize)> = seconds.iter().map(|(s, n)| (*s, *n)).collect();
                (!taken.is_empty()).then_some((*action, taken))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{RunJobSpec, RunJobStatus, RunRecord, TenantSpec, TenantStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::api::ObjectMeta;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn record(uid: &str, phase: RunPhase, started: &str, finished: &str) -> RunRecord {
        RunRecord {
            name: format!("run-{uid}"),
            uid: uid.into(),
            action: RunAction::Provision,
            phase,
            message: String::new(),
            started_at: Some(Time(at(started))),
            finished_at: Time(at(finished)),
            log_tail: None,
            generation: None,
        }
    }

    fn tenant(name: &str, history: Vec<RunRecord>) -> Tenant {
        Tenant {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: TenantSpec::default(),
            status: Some(TenantStatus {
                history,
                ..TenantStatus::default()
            }),
        }
    }

    fn run(uid: &str, phase: Option<RunPhase>, started: &str, finished: &str) -> RunJob {
        RunJob {
            metadata: ObjectMeta {
                name: Some(format!("run-{uid}")),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            spec: RunJobSpec::new("acme", RunAction::Provision),
            status: Some(RunJobStatus {
                phase,
                start_time: Some(Time(at(started))),
                completion_time: Some(Time(at(finished))),
                ..RunJobStatus::default()
            }),
        }
    }

    const TEN: &str = "2026-12-02T10:00:00Z";

    fn hours(f: &FinishedRuns) -> Vec<[usize; 2]> {
        f.per_hour("ns", at(TEN).as_second(), 3)
    }

    #[test]
    fn a_run_is_counted_once_while_its_run_or_its_record_shows_it() {
        let f = FinishedRuns::default();
        let done = run(
            "u1",
            Some(RunPhase::Succeeded),
            "2026-12-02T10:05:00Z",
            "2026-12-02T10:06:30Z",
        );
        f.run_event(&Event::Apply(done.clone()));
        assert_eq!(hours(&f), [[1, 0], [0, 0], [0, 0]]);
        assert_eq!(
            f.recorded("ns", at(TEN).as_second(), 3),
            0,
            "a live run is no history record"
        );
        let recorded = record(
            "u1",
            RunPhase::Succeeded,
            "2026-12-02T10:05:00Z",
            "2026-12-02T10:06:30Z",
        );
        f.tenant_event(&Event::Apply(tenant("acme", vec![recorded.clone()])));
        assert_eq!(hours(&f), [[1, 0], [0, 0], [0, 0]], "the same run, once");
        assert_eq!(f.recorded("ns", at(TEN).as_second(), 3), 1);
        f.run_event(&Event::Delete(done));
        assert_eq!(
            hours(&f),
            [[1, 0], [0, 0], [0, 0]],
            "cleaned up: its record keeps it"
        );
        assert_eq!(
            f.recorded("ns", at(TEN).as_second(), 3),
            1,
            "the run's cleanup leaves its record recorded"
        );
        assert_eq!(f.durations("ns"), [(RunAction::Provision, vec![(90, 1)])]);
        f.tenant_event(&Event::Apply(tenant("acme", Vec::new())));
        assert_eq!(
            hours(&f),
            [[0, 0], [0, 0], [0, 0]],
            "trimmed from the history"
        );
        assert!(f.durations("ns").is_empty());
        assert_eq!(f.recorded("ns", at(TEN).as_second(), 3), 0);
    }

    #[test]
    fn counts_by_hour_and_outcome_and_ignores_unfinished_runs() {
        let f = FinishedRuns::default();
        f.run_event(&Event::Apply(run(
            "u1",
            Some(RunPhase::Failed),
            "2026-12-02T11:00:00Z",
            "2026-12-02T11:59:59Z",
        )));
        f.run_event(&Event::Apply(run(
            "u2",
            Some(RunPhase::Running),
            "2026-12-02T11:00:00Z",
            "2026-12-02T11:30:00Z",
        )));
        f.run_event(&Event::Apply(run(
            "u3",
            None,
            "2026-12-02T11:00:00Z",
            "2026-12-02T11:30:00Z",
        )));
        f.tenant_event(&Event::Apply(tenant(
            "acme",
            vec![
                record(
                    "u4",
                    RunPhase::Succeeded,
                    "2026-12-02T12:00:00Z",
                    "2026-12-02T12:00:10Z",
                ),
                record(
                    "u5",
                    RunPhase::Succeeded,
                    "2026-12-02T09:00:00Z",
                    "2026-12-02T09:59:59Z",
                ),
            ],
        )));
        assert_eq!(hours(&f), [[0, 0], [0, 1], [1, 0]]);
        assert_eq!(f.per_hour("elsewhere", at(TEN).as_second(), 1), [[0, 0]]);
        // The run still going becomes Failed: counted once it finished.
        f.run_event(&Event::Apply(run(
            "u2",
            Some(RunPhase::Failed),
            "2026-12-02T11:00:00Z",
            "2026-12-02T11:30:00Z",
        )));
        assert_eq!(hours(&f), [[0, 0], [0, 2], [1, 0]]);
        let provision = &f.durations("ns")[0].1;
        assert_eq!(provision, &vec![(10, 1), (1800, 1), (3599, 2)]);
    }

    #[test]
    fn recorded_counts_the_records_that_finished_inside_the_hours_asked() {
        let f = FinishedRuns::default();
        let r = |uid: &str, finished: &str| {
            record(uid, RunPhase::Succeeded, "2026-12-02T09:00:00Z", finished)
        };
        let history = vec![
            r("before", "2026-12-02T09:59:59Z"),
            r("first", "2026-12-02T10:00:00Z"),
            r("last", "2026-12-02T12:59:59Z"),
            r("after", "2026-12-02T13:00:00Z"),
        ];
        f.tenant_event(&Event::Apply(tenant("acme", history)));
        assert_eq!(f.recorded("ns", at(TEN).as_second(), 3), 2);
        assert_eq!(f.recorded("ns", at(TEN).as_second(), 4), 3);
    }

    #[test]
    fn a_relist_replaces_a_source_whole_once_complete() {
        let f = FinishedRuns::default();
        let r = |uid: &str| {
            record(
                uid,
                RunPhase::Succeeded,
                "2026-12-02T10:00:00Z",
                "2026-12-02T10:00:05Z",
            )
        };
        f.tenant_event(&Event::Apply(tenant("acme", vec![r("u1")])));
        f.tenant_event(&Event::Apply(tenant("beta", vec![r("u2")])));
        f.tenant_event(&Event::Init);
        f.tenant_event(&Event::InitApply(tenant(
            "beta",
            vec![r("u2"), r("u3"), r("u4")],
        )));
        f.tenant_event(&Event::InitApply(tenant("fresh", Vec::new())));
        assert_eq!(
            f.lock().histories.relist.as_ref().map(HashMap::len),
            Some(1),
            "a relist holds only the objects that show finished runs (a fleet's worth of empty entries otherwise)"
        );
        assert_eq!(hours(&f)[0], [2, 0], "not yet");
        f.tenant_event(&Event::InitDone);
        assert_eq!(hours(&f)[0], [3, 0], "acme gone, beta has three");
        f.tenant_event(&Event::Delete(tenant("beta", Vec::new())));
        assert_eq!(hours(&f)[0], [0, 0]);
    }

    #[test]
    fn a_namespace_is_kept_only_while_it_has_something_counted() {
        let f = FinishedRuns::default();
        let held = |f: &FinishedRuns| {
            let inner = f.lock();
            let mut held: Vec<(String, usize)> = (inner.namespaces.iter())
                .map(|(ns, t)| (ns.clone(), t.seconds.len()))
                .collect();
            held.sort();
            held
        };
        f.tenant_event(&Event::Apply(tenant("fresh", Vec::new())));
        f.run_event(&Event::Apply(run("u0", Some(RunPhase::Running), TEN, TEN)));
        assert_eq!(held(&f), [], "a tenant and a run with nothing finished");
        let done = || {
            record(
                "u1",
                RunPhase::Succeeded,
                "2026-12-02T10:00:00Z",
                "2026-12-02T10:00:05Z",
            )
        };
        f.tenant_event(&Event::Apply(tenant("acme", vec![done()])));
        assert_eq!(held(&f), [("ns".to_owned(), 1)], "one action's durations");
        f.tenant_event(&Event::Apply(tenant("acme", Vec::new())));
        assert_eq!(held(&f), [], "its record went: so did the namespace");
    }
}
