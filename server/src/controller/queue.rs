//! How many objects wait for a reconcile, for `sentry_tenants_reconcile_queue_depth`.
//!
//! kube-runtime's scheduler does not expose its queue, so each controller keeps this mirror of it: an
//! object is queued from the trigger that names it (its watch event, a related object's, a wake-up,
//! leadership gained) until its reconcile starts, or until the controller finds it gone. A set of
//! keys, not a count, because the scheduler also merges the triggers of an object already queued.
//! Retries scheduled by a reconcile's own `Action` are not triggers here: they wait for their time,
//! not for a worker.

use std::collections::HashSet;
use std::sync::Mutex;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

#[derive(Default)]
pub struct Queue(Mutex<HashSet<Key>>);

/// Namespace and name: the same for an object and for any `ObjectRef` to it, whatever its kind's type.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Key {
    namespace: Option<String>,
    name: String,
}

impl Key {
    pub fn of<K: kube::Resource>(obj: &K) -> Self {
        Self {
            namespace: obj.namespace(),
            name: obj.name_any(),
        }
    }

    pub fn of_ref<K: kube::Resource>(obj: &ObjectRef<K>) -> Self {
        Self {
            namespace: obj.namespace.clone(),
            name: obj.name.clone(),
        }
    }
}

impl Queue {
    /// A trigger named `key`: it waits for a reconcile now (once, however often it is named).
    pub fn queued(&self, key: Key) {
        self.lock().insert(key);
    }

    pub fn queued_all(&self, keys: impl IntoIterator<Item = Key>) {
        self.lock().extend(keys);
    }

    /// `key`'s reconcile starts: it leaves the queue. Returns how many others still wait.
    pub fn started(&self, key: &Key) -> usize {
        let mut queued = self.lock();
        queued.remove(key);
        queued.len()
    }

    /// The controller found `key` gone when its turn came: it leaves the queue without a reconcile.
    pub fn dropped(&self, key: &Key) {
        self.lock().remove(key);
    }

    /// How many objects wait now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    #[test]
    fn an_object_named_by_several_triggers_waits_once() {
        let queue = Queue::default();
        assert!(queue.is_empty());
        queue.queued(key("a"));
        queue.queued(key("a"));
        queue.queued(key("b"));
        assert_eq!(queue.len(), 2);
        assert!(!queue.is_empty());
        assert_eq!(queue.started(&key("a")), 1, "b still waits");
        assert_eq!(queue.started(&key("b")), 0);
    }

    #[test]
    fn a_reconcile_no_trigger_named_leaves_the_others_waiting() {
        let queue = Queue::default();
        queue.queued_all([key("a"), key("b")]);
        assert_eq!(queue.started(&key("requeued-by-its-own-action")), 2);
    }

    #[test]
    fn an_object_found_gone_leaves_the_queue() {
        let queue = Queue::default();
        queue.queued_all([key("gone"), key("b")]);
        queue.dropped(&key("gone"));
        assert_eq!(queue.started(&key("b")), 0);
    }

    #[test]
    fn a_key_is_the_same_for_an_object_and_a_reference_to_it() {
        let run: crate::crd::RunJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"tenant": "t", "action": "Provision"},
        }))
        .unwrap();
        let reference = ObjectRef::<crate::crd::RunJob>::new("r").within("ns");
        assert_eq!(Key::of(&run), Key::of_ref(&reference));
        assert_eq!(Key::of(&run), key("r"));
        assert_ne!(Key::of_ref(&reference.clone().within("other")), key("r"));
    }
}
