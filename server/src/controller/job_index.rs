//! The operator's unfinished Jobs, kept beside the Job cache from the same watch events. The cap on
//! runs in flight counts them at every admission; counting them from the cache read every cached Job,
//! finished ones included (they stay until their run is cleaned up), so each admission cost grew with
//! the fleet instead of with the cap.

use std::collections::HashMap;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use super::follow::{Followed, Follows};

pub type JobIndex = Followed<UnfinishedJobs>;

/// Per namespace, each unfinished Job's name and its tenant (its `sentry.io/tenant` label).
#[derive(Default)]
pub struct UnfinishedJobs(HashMap<String, HashMap<String, Option<String>>>);

impl Follows<Job> for UnfinishedJobs {
    fn insert(&mut self, job: &Job) {
        self.remove(job);
        if super::job::finished(job) {
            return;
        }
        let tenant = job.labels().get(crate::labels::TENANT).cloned();
        self.0
            .entry(job.namespace().unwrap_or_default())
            .or_default()
            .insert(job.name_any(), tenant);
    }

    fn remove(&mut self, job: &Job) {
        let namespace = job.namespace().unwrap_or_default();
        if let Some(jobs) = self.0.get_mut(&namespace) {
            jobs.remove(&job.name_any());
            if jobs.is_empty() {
                self.0.remove(&namespace);
            }
        }
    }
}

impl UnfinishedJobs {
    /// How many of `namespace`'s Jobs are unfinished.
    pub fn count(&self, namespace: &str) -> usize {
        self.0.get(namespace).map_or(0, HashMap::len)
    }

    /// The tenants of `namespace`'s unfinished Jobs, one entry per Job (`None`: a Job without the label).
    pub fn tenants<'a>(&'a self, namespace: &str) -> impl Iterator<Item = Option<&'a str>> + 'a {
        self.0
            .get(namespace)
            .into_iter()
            .flat_map(|jobs| jobs.values().map(Option::as_deref))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn job(name: &str, tenant: Option<&str>, finished: Option<&str>) -> Job {
        let conditions: Vec<_> = finished
            .map(|c| serde_json::json!({"type": c, "status": "True"}))
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns",
                         "labels": tenant.map(|t| serde_json::json!({"sentry.io/tenant": t}))},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn unfinished(index: &JobIndex) -> Vec<Option<String>> {
        let mut tenants: Vec<_> =
            index.read(|i| i.tenants("ns").map(|t| t.map(str::to_owned)).collect());
        tenants.sort();
        tenants
    }

    #[test]
    fn counts_a_job_until_it_finishes_or_goes() {
        let index = JobIndex::default();
        index.apply(&Event::Apply(job("a-provision-1", Some("a"), None)));
        index.apply(&Event::Apply(job("b-provision-1", Some("b"), None)));
        index.apply(&Event::Apply(job("stray", None, None)));
        assert_eq!(
            unfinished(&index),
            [None, Some("a".to_owned()), Some("b".to_owned())]
        );
        assert_eq!(index.read(|i| i.count("ns")), 3);
        assert_eq!(index.read(|i| i.count("elsewhere")), 0);
        index.apply(&Event::Apply(job(
            "a-provision-1",
            Some("a"),
            Some("Complete"),
        )));
        index.apply(&Event::Apply(job(
            "b-provision-1",
            Some("b"),
            Some("Failed"),
        )));
        index.apply(&Event::Delete(job("stray", None, None)));
        assert!(unfinished(&index).is_empty());
        assert!(index.read(|i| i.0.is_empty()), "no empty namespace kept");
    }

    #[test]
    fn a_relist_replaces_everything_once_complete() {
        let index = JobIndex::default();
        index.apply(&Event::Apply(job("a-provision-1", Some("a"), None)));
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(job("b-provision-1", Some("b"), None)));
        assert_eq!(unfinished(&index), [Some("a".to_owned())]);
        index.apply(&Event::InitDone);
        assert_eq!(unfinished(&index), [Some("b".to_owned())]);
    }
}
