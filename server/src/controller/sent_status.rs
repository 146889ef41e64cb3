//! The status each run was last patched to, with the resourceVersion the patch was made over. On a
//! busy apiserver the watch can lag the reconciler's own write: a second reconcile (a Job event, say)
//! still sees the run as it was before the patch and would send the same status again. The real
//! control plane's write budget test saw exactly that (two identical Running patches); a run's status
//! is sent once per version of the run it was computed from.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use serde::Serialize;

#[derive(Default)]
pub struct SentStatus(Mutex<HashMap<String, (String, u64)>>);

fn digest(status: &impl Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(status)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

impl SentStatus {
    /// Whether `status` was already sent over exactly `version` of the object `uid`. A record of an
    /// older version is dropped: the cache has moved past it.
    pub fn already_sent(&self, uid: &str, version: &str, status: &impl Serialize) -> bool {
        let mut sent = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match sent.get(uid) {
            Some((over, d)) if over == version => *d == digest(status),
            Some(_) => {
                sent.remove(uid);
                false
            }
            None => false,
        }
    }

    /// `status` was sent over `version` of the object `uid`.
    pub fn record(&self, uid: &str, version: &str, status: &impl Serialize) {
        let mut sent = self.0.lock().unwrap_or_else(|p| p.into_inner());
        sent.insert(uid.to_owned(), (version.to_owned(), digest(status)));
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
    fn a_status_is_sent_once_per_version_it_was_computed_from() {
        let sent = SentStatus::default();
        assert!(!sent.already_sent("u1", "7", &"Running"));
        sent.record("u1", "7", &"Running");
        assert!(
            sent.already_sent("u1", "7", &"Running"),
            "the cache lags: same version"
        );
        assert!(
            !sent.already_sent("u1", "7", &"Succeeded"),
            "something else to say"
        );
        assert!(!sent.already_sent("u2", "7", &"Running"), "another run");
        assert!(
            !sent.already_sent("u1", "8", &"Running"),
            "the cache moved on"
        );
        assert!(
            !sent.already_sent("u1", "7", &"Running"),
            "and the old record went"
        );
        sent.record("u1", "9", &"Running");
        sent.forget("u1");
        assert!(!sent.already_sent("u1", "9", &"Running"));
    }
}
