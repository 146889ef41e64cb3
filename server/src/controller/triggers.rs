//! The controllers' trigger streams: every object a watch brings into its cache or deletes from it,
//! handed to each subscriber as the object itself.
//!
//! Not kube's shared-store subscriptions (`Writer::subscribe`): the `ReflectHandle` they give hands
//! out a reference that it looks up in the cache only when polled, and when the object was deleted in
//! between it answers `Pending` without arranging to be woken (kube-runtime 4.2.0,
//! `reflector/dispatcher.rs`). Its controller then hears nothing more from that stream until another
//! of its streams wakes it. On the real cluster a tenant deleted right after it was provisioned stayed
//! Terminating for minutes: its Provision run was cleaned up between an update and the Tenant
//! controller's poll, and the Deprovision run's success after it reached nobody until an apiserver
//! restart made the watches list everything again. A subscriber here holds the objects, so a deletion
//! in between cannot swallow what follows.

use std::sync::{Arc, Mutex, PoisonError};

use futures::Stream;
use futures::channel::mpsc;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// One watch's subscribers.
pub struct Triggers<K>(Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>);

impl<K> Default for Triggers<K> {
    fn default() -> Self {
        Self(Mutex::default())
    }
}

impl<K> Triggers<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// Every object the watch brings into its cache from now on. Unbounded: a controller moves each
    /// trigger into its queue at once (where triggers for one object become one reconcile), so the
    /// backlog is at most one (re)list.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (sender, receiver) = mpsc::unbounded();
        self.lock().push(sender);
        receiver
    }

    /// Tells every subscriber what `event` brought into `cache`, which already holds it: the object
    /// applied, or after a complete (re)list every cached object, so that what a watch missed while
    /// it was down is looked at again. A deletion brings the deleted object, which the cache no longer
    /// holds: its own controller finds it gone and does nothing, but whoever it names (the RunJob
    /// that owned a Job, the Tenant of a run) must hear that it is gone — a run waits for its Job's
    /// pods to be gone, a deleted tenant for its runs.
    pub fn announce(&self, event: &watcher::Event<K>, cache: &Store<K>) {
        let objects = match event {
            watcher::Event::Apply(object) => cache
                .get(&ObjectRef::from_obj(object))
                .into_iter()
                .collect(),
            watcher::Event::Delete(object) => vec![Arc::new(object.clone())],
            watcher::Event::InitDone => cache.state(),
            watcher::Event::Init | watcher::Event::InitApply(_) => return,
        };
        // A subscriber whose controller ended is dropped.
        self.lock().retain(|subscriber| {
            objects
                .iter()
                .all(|object| subscriber.unbounded_send(Arc::clone(object)).is_ok())
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<mpsc::UnboundedSender<Arc<K>>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use futures::{FutureExt, Stream, StreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::{self, ObjectRef};
    use kube::runtime::watcher::Event;

    use super::Triggers;

    fn config_map(name: &str, version: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("ns".to_owned()),
                resource_version: Some(version.to_owned()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// What a subscriber has received so far, as name@resourceVersion.
    fn received(
        stream: &mut (impl Stream<Item = std::sync::Arc<ConfigMap>> + Unpin),
    ) -> Vec<String> {
        std::iter::from_fn(|| stream.next().now_or_never().flatten())
            .map(|o| {
                let m = &o.metadata;
                format!(
                    "{}@{}",
                    m.name.as_deref().unwrap_or_default(),
                    m.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect()
    }

    #[test]
    fn an_object_deleted_before_its_trigger_is_read_does_not_hold_up_the_next() {
        let (cache, mut writer) = reflector::store::<ConfigMap>();
        let triggers = Triggers::default();
        let mut subscriber = pin!(triggers.subscribe());
        let feed = |writer: &mut reflector::store::Writer<ConfigMap>, event: Event<ConfigMap>| {
            writer.apply_watcher_event(&event);
            triggers.announce(&event, &cache);
        };
        feed(&mut writer, Event::Apply(config_map("a", "1")));
        feed(&mut writer, Event::Delete(config_map("a", "2")));
        feed(&mut writer, Event::Apply(config_map("b", "3")));
        assert_eq!(received(&mut subscriber), ["a@1", "a@2", "b@3"]);
        feed(&mut writer, Event::Apply(config_map("b", "4")));
        assert_eq!(received(&mut subscriber), ["b@4"], "and it goes on");
    }

    #[test]
    fn a_relist_announces_every_cached_object_and_a_deletion_the_deleted_one() {
        let (cache, mut writer) = reflector::store::<ConfigMap>();
        let triggers = Triggers::default();
        let mut subscriber = pin!(triggers.subscribe());
        let relist = [
            Event::Init,
            Event::InitApply(config_map("a", "1")),
            Event::InitApply(config_map("b", "2")),
            Event::InitDone,
        ];
        for event in &relist {
            writer.apply_watcher_event(event);
            triggers.announce(event, &cache);
        }
        let mut after_relist = received(&mut subscriber);
        after_relist.sort();
        assert_eq!(
            after_relist,
            ["a@1", "b@2"],
            "once each, at the end of the list"
        );
        let delete = Event::Delete(config_map("a", "3"));
        writer.apply_watcher_event(&delete);
        triggers.announce(&delete, &cache);
        assert_eq!(received(&mut subscriber), ["a@3"], "as the deletion saw it");
        assert!(cache.get(&ObjectRef::new("a").within("ns")).is_none());
    }

    #[test]
    fn every_subscriber_gets_every_object_and_one_that_ended_is_dropped() {
        let (cache, mut writer) = reflector::store::<ConfigMap>();
        let triggers = Triggers::default();
        let mut first = pin!(triggers.subscribe());
        let mut second = pin!(triggers.subscribe());
        let ended = triggers.subscribe();
        drop(ended);
        for event in [
            Event::Apply(config_map("a", "1")),
            Event::Apply(config_map("b", "2")),
        ] {
            writer.apply_watcher_event(&event);
            triggers.announce(&event, &cache);
        }
        assert_eq!(received(&mut first), ["a@1", "b@2"]);
        assert_eq!(received(&mut second), ["a@1", "b@2"]);
        assert_eq!(triggers.lock().len(), 2, "the ended subscriber is gone");
    }

    /// Why this module exists: kube's own subscription, given the same events, answers `Pending` for
    /// the deleted object and is never woken for the one queued behind it. When a kube upgrade fixes
    /// that, this fails, and the shared streams may be used again.
    #[test]
    fn kube_s_shared_subscription_stalls_behind_a_deleted_object() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Context, Wake, Waker};

        #[derive(Default)]
        struct Wakes(AtomicUsize);
        impl Wake for Wakes {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (_cache, writer) = reflector::store_shared::<ConfigMap>(16);
        let mut subscriber = pin!(writer.subscribe().expect("a shared store"));
        let wakes = Arc::new(Wakes::default());
        let waker = Waker::from(Arc::clone(&wakes));
        let mut cx = Context::from_waker(&waker);
        let events = futures::stream::iter([
            Ok::<_, kube::runtime::watcher::Error>(Event::Apply(config_map("a", "1"))),
            Ok(Event::Delete(config_map("a", "2"))),
            Ok(Event::Apply(config_map("b", "3"))),
        ]);
        let mut reflected = pin!(reflector::reflector(writer, events));
        while let Some(Some(event)) = reflected.next().now_or_never() {
            event.expect("no watch error");
        }
        assert!(
            subscriber.as_mut().poll_next(&mut cx).is_pending(),
            "a is gone"
        );
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "b is queued, yet nothing wakes the task to read it"
        );
        assert!(
            subscriber.as_mut().poll_next(&mut cx).is_ready(),
            "b is read only when something else polls again"
        );
    }
}
