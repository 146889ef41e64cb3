//! An index kept beside a reflector cache from the same watch events. A relist is built aside and
//! swapped in whole once complete, as the cache itself does, so a page or a reconcile never reads a
//! half-listed index.

use std::sync::{Arc, RwLock};

use kube::runtime::watcher::Event;

/// What an index does with one object of kind `K` as the watch reports it.
pub trait Follows<K>: Default {
    /// The object as it is now (it may have been in the index before: replace it).
    fn insert(&mut self, object: &K);
    fn remove(&mut self, object: &K);
}

/// An index `I` shared between the watch that feeds it and its readers.
pub struct Followed<I>(Arc<RwLock<Inner<I>>>);

#[derive(Default)]
struct Inner<I> {
    live: I,
    relist: Option<I>,
}

impl<I> Clone for Followed<I> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<I: Default> Default for Followed<I> {
    fn default() -> Self {
        Self(Arc::new(RwLock::new(Inner {
            live: I::default(),
            relist: None,
        })))
    }
}

impl<I> Followed<I> {
    /// Follows one watch event, exactly as the cache does.
    pub fn apply<K>(&self, event: &Event<K>)
    where
        I: Follows<K>,
    {
        let mut inner = self.0.write().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Apply(object) => inner.live.insert(object),
            Event::Delete(object) => inner.live.remove(object),
            Event::Init => inner.relist = Some(I::default()),
            Event::InitApply(object) => {
                if let Some(relist) = inner.relist.as_mut() {
                    relist.insert(object);
                }
            }
            Event::InitDone => {
                if let Some(relist) = inner.relist.take() {
                    inner.live = relist;
                }
            }
        }
    }

    /// Reads the live index (under its lock: keep `read` short and do not write to it meanwhile).
    pub fn read<R>(&self, read: impl FnOnce(&I) -> R) -> R {
        read(&self.0.read().unwrap_or_else(|p| p.into_inner()).live)
    }
}
