//! The status each object was last written to by this replica, with the resourceVersion that write
//! made. The watch can lag our own writes: a reconcile (a Job event, another writer's change) may
//! still see a copy from before the write and would send the same status again. The real control
//! plane's write budget tests saw exactly that (two identical Running patches of a run, the second
//! computed from a copy a person's edit of the run had made in between). A status is not sent again
//! while the copy it was computed from is older than our write of it.
//!
//! "Older" compares resourceVersions as integers: comparable within one resource since Kubernetes
//! 1.35 (KEP-5504), and the etcd revisions they are on every earlier apiserver. A version that is not
//! an integer is never judged older, so nothing is skipped on a server that gives such versions.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use kube::Resource;
use serde::Serialize;

use super::Result;

/// Per object uid: the resourceVersion our last status write made, and a digest of that status.
#[derive(Default)]
pub struct SentStatus(Mutex<HashMap<String, (String, u64)>>);

/// A digest of what `status` says, its conditions' `lastTransitionTime`s apart: a reconcile from an
/// older copy stamps a condition it does not see yet with its own now, a moment later than ours,
/// and says nothing else.
fn digest(status: &impl Serialize) -> u64 {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    without_transition_times(&mut value);
    let mut hasher = DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

fn without_transition_times(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(fields) => {
            fields.remove("lastTransitionTime");
            fields.values_mut().for_each(without_transition_times);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(without_transition_times),
        _ => {}
    }
}

/// Whether resourceVersion `copy` is older than `written` (both integers).
fn older(copy: &str, written: &str) -> bool {
    match (copy.parse::<u64>(), written.parse::<u64>()) {
        (Ok(copy), Ok(written)) => copy < written,
        _ => false,
    }
}

impl SentStatus {
    /// Whether `status` is what we last wrote to the object `uid`, in a write newer than the copy
    /// (`copy_version`) it was computed from. A copy as new as our write, or newer, has it (or what
    /// someone wrote since): the record goes.
    pub fn already_sent(&self, uid: &str, copy_version: &str, status: &impl Serialize) -> bool {
        let mut sent = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match sent.get(uid) {
            Some((written, d)) if older(copy_version, written) => *d == digest(status),
            Some(_) => {
                sent.remove(uid);
                false
            }
            None => false,
        }
    }

    /// `status` was written to the object `uid`, making its resourceVersion `written`.
    pub fn record(&self, uid: &str, written: &str, status: &impl Serialize) {
        let mut sent = self.0.lock().unwrap_or_else(|p| p.into_inner());
        sent.insert(uid.to_owned(), (written.to_owned(), digest(status)));
    }

    /// Sends `status` to `obj` with `send` — which answers the resourceVersion its write made, or
    /// `None` when it had nothing to write — unless `obj` is a copy older than our last write of the
    /// same status; remembers what it wrote. Returns whether it wrote.
    pub async fn send<K: Resource>(
        &self,
        obj: &K,
        status: &impl Serialize,
        send: impl Future<Output = Result<Option<String>>>,
    ) -> Result<bool> {
        let uid = obj.meta().uid.as_deref().unwrap_or_default();
        let copy = obj.meta().resource_version.as_deref().unwrap_or_default();
        if self.already_sent(uid, copy, status) {
            return Ok(false);
        }
        let Some(written) = send.await? else {
            return Ok(false);
        };
        self.record(uid, &written, status);
        Ok(true)
    }

    /// The object is gone: nothing to remember about it.
    pub fn forget(&self, uid: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_not_sent_again_from_a_copy_older_than_its_write() {
        let sent = SentStatus::default();
        assert!(!sent.already_sent("u1", "7", &"Running"), "nothing written");
        // Computed from version 7; someone else's edit made 8; our write made 9.
        sent.record("u1", "9", &"Running");
        assert!(
            sent.already_sent("u1", "7", &"Running"),
            "the copy we computed from"
        );
        assert!(
            sent.already_sent("u1", "8", &"Running"),
            "the edit in between"
        );
        assert!(
            !sent.already_sent("u1", "8", &"Succeeded"),
            "something else to say"
        );
        assert!(!sent.already_sent("u2", "8", &"Running"), "another object");
        assert!(
            !sent.already_sent("u1", "10", &"Running"),
            "a copy newer than the write has it"
        );
        assert!(
            !sent.already_sent("u1", "7", &"Running"),
            "and the record went with it"
        );
    }

    #[test]
    fn a_condition_s_transition_time_alone_is_no_new_status() {
        let condition = |at: &str, reason: &str| {
            serde_json::json!({"phase": "Running", "conditions": [
                {"type": "Finished", "reason": reason, "lastTransitionTime": at}]})
        };
        let sent = SentStatus::default();
        sent.record("u1", "9", &condition("2026-12-05T00:02:48Z", "Running"));
        assert!(sent.already_sent("u1", "8", &condition("2026-12-05T00:02:49Z", "Running")));
        assert!(!sent.already_sent("u1", "8", &condition("2026-12-05T00:02:48Z", "Pending")));
    }

    #[test]
    fn the_copy_of_the_write_itself_ends_the_record() {
        let sent = SentStatus::default();
        sent.record("u1", "9", &"Running");
        assert!(!sent.already_sent("u1", "9", &"Running"));
        assert!(!sent.already_sent("u1", "8", &"Running"), "gone");
    }

    #[test]
    fn versions_are_compared_as_integers_and_never_judged_older_otherwise() {
        let sent = SentStatus::default();
        sent.record("u1", "100", &"Running");
        assert!(
            sent.already_sent("u1", "99", &"Running"),
            "99 < 100, not as text"
        );
        sent.record("u2", "abc", &"Running");
        assert!(!sent.already_sent("u2", "abb", &"Running"));
        sent.record("u3", "9", &"Running");
        assert!(!sent.already_sent("u3", "", &"Running"));
        sent.record("u4", "9", &"Running");
        sent.forget("u4");
        assert!(!sent.already_sent("u4", "8", &"Running"));
    }
}
