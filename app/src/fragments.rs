//! Pieces of a page kept as HTML between renders, each keyed by everything it shows: a tenant's row
//! by the row itself, the account's permissions, the page it posts back to and its age as text; a
//! chart by its series. Any change to the caches makes the whole page render again (the page cache
//! keys on the caches' version), but a change to one tenant changes one row's key: the other rows on
//! the page are copied, not rendered. A key holds the values themselves, not a hash of them, so a
//! kept piece is never shown for anything but what it was rendered from.
//!
//! The server provides one [`Fragments`] to every page it renders; a page rendered without one (the
//! benchmark's "every fragment rendered", a test) renders every piece.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use leptos::prelude::use_context;

use crate::model::{ActionDurations, Allowed, HourBucket, TenantRow};

/// Rows kept: forty pages of fifty, the lists people have open. Up to twice as many are held while
/// the older half ages out.
pub const ROWS_KEPT: usize = 2_000;
/// Charts kept: the overview's two, several versions of each.
const CHARTS_KEPT: usize = 16;

/// Everything a tenant row's HTML is made from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    /// Shared with the server's kept rows: compared by pointer first, so a row kept by both compares
    /// without reading its strings.
    pub row: Arc<TenantRow>,
    pub may: Allowed,
    /// The page the row's forms post back to.
    pub here: Arc<str>,
    /// The row's age as the page shows it ("3m"); the table, not the row, carries the server's time.
    pub age: String,
    /// The session token every form carries.
    pub session: Arc<str>,
}

/// Everything a chart's marks are made from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ChartKey {
    RunsPerHour(Vec<HourBucket>),
    Durations(Vec<ActionDurations>),
}

/// The server's kept pieces, shared by every render (cheap to clone).
#[derive(Clone, Default)]
pub struct Fragments {
    rows: Arc<Kept<RowKey>>,
    charts: Arc<Kept<ChartKey>>,
}

impl Fragments {
    /// The row rendered from `key`: a kept copy, or `render`'s, then kept.
    pub fn row(&self, key: RowKey, render: impl FnOnce(&RowKey) -> String) -> Arc<str> {
        self.rows.get_or_render(key, ROWS_KEPT, render)
    }

    pub fn chart(&self, key: ChartKey, render: impl FnOnce(&ChartKey) -> String) -> Arc<str> {
        self.charts.get_or_render(key, CHARTS_KEPT, render)
    }
}

/// The pieces the server keeps for the page being rendered, if it keeps any.
pub fn of_this_page() -> Option<Fragments> {
    use_context::<Fragments>()
}

/// The row from `kept` ([`of_this_page`]), or rendered if the page keeps none.
pub fn row(
    kept: Option<&Fragments>,
    key: RowKey,
    render: impl FnOnce(&RowKey) -> String,
) -> Arc<str> {
    match kept {
        Some(kept) => kept.row(key, render),
        None => render(&key).into(),
    }
}

/// The chart's marks from the page's [`Fragments`], or rendered if the page has none.
pub fn chart(key: ChartKey, render: impl FnOnce(&ChartKey) -> String) -> Arc<str> {
    match of_this_page() {
        Some(kept) => kept.chart(key, render),
        None => render(&key).into(),
    }
}

/// Two generations of kept pieces: when the newer one is full it becomes the older and the older is
/// dropped; a piece found in the older moves to the newer. What pages still show stays, what none
/// showed for a generation goes, and no more than twice the bound is ever held. The server keeps the
/// rows it builds for the pages in one too.
pub struct Kept<K, V = Arc<str>> {
    generations: Mutex<Generations<K, V>>,
}

/// foldhash, not the standard SipHash: a row's key is a few hundred bytes hashed on every render, and
/// SipHash was a tenth of the tenants page's cost. Its seed is random per process, as SipHash's is.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

struct Generations<K, V> {
    newer: Map<K, V>,
    older: Map<K, V>,
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Self {
            generations: Mutex::new(Generations {
                newer: Map::default(),
                older: Map::default(),
            }),
        }
    }
}

impl<K: Hash + Eq> Kept<K> {
    fn get_or_render(&self, key: K, bound: usize, render: impl FnOnce(&K) -> String) -> Arc<str> {
        if let Some(html) = self.find(&key, bound) {
            return html;
        }
        // Rendered without the lock: two renders of one piece at once cost a render, not a wait.
        let html: Arc<str> = render(&key).into();
        self.put(key, html.clone(), bound);
        html
    }
}

impl<K: Hash + Eq, V: Clone> Kept<K, V> {
    /// The value kept for `key`, if any (moved to the newer generation while it has room).
    pub fn find(&self, key: &K, bound: usize) -> Option<V> {
        let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = g.newer.get(key) {
            return Some(value.clone());
        }
        if g.newer.len() >= bound {
            // No room to move it: it stays in the older generation, which goes at the next rotation.
            return g.older.get(key).cloned();
        }
        let (key, value) = g.older.remove_entry(key)?;
        g.newer.insert(key, value.clone());
        Some(value)
    }

    /// Keeps `value` for `key`, starting a new generation if the newer one holds `bound` already.
    pub fn put(&self, key: K, value: V, bound: usize) {
        let mut g = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if g.newer.len() >= bound {
            g.older = std::mem::take(&mut g.newer);
        }
        g.newer.insert(key, value);
    }

    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let g = self.generations.lock().unwrap();
        (g.newer.len(), g.older.len())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::Kept;

    #[test]
    fn a_piece_is_rendered_once_per_key_and_again_for_another_key() {
        let kept = Kept::<&str>::default();
        let renders = Cell::new(0);
        let render = |html: &'static str| {
            renders.set(renders.get() + 1);
            html.to_owned()
        };
        assert_eq!(
            &*kept.get_or_render("acme", 10, |_| render("<tr>acme</tr>")),
            "<tr>acme</tr>"
        );
        assert_eq!(
            &*kept.get_or_render("acme", 10, |_| render("stale")),
            "<tr>acme</tr>"
        );
        assert_eq!(renders.get(), 1, "the second is a kept copy");
        assert_eq!(
            &*kept.get_or_render("globex", 10, |_| render("<tr>globex</tr>")),
            "<tr>globex</tr>"
        );
        assert_eq!(renders.get(), 2);
    }

    #[test]
    fn at_most_twice_the_bound_is_held_and_what_is_still_shown_stays() {
        let kept = Kept::<u32>::default();
        let bound = 3;
        for key in 0..3 {
            kept.get_or_render(key, bound, |_| format!("{key}"));
        }
        // The fourth starts a generation: 0..3 become the older one.
        kept.get_or_render(3, bound, |_| "3".into());
        // 0 is still shown: it moves to the newer generation.
        assert_eq!(
            &*kept.get_or_render(0, bound, |_| "rendered again".into()),
            "0"
        );
        // Filling the newer generation drops the older one, but not 0.
        kept.get_or_render(4, bound, |_| "4".into());
        kept.get_or_render(5, bound, |_| "5".into());
        let (newer, older) = kept.held();
        assert!(newer <= bound && older <= bound, "held {newer} and {older}");
        assert_eq!(
            &*kept.get_or_render(0, bound, |_| "rendered again".into()),
            "0"
        );
        assert_eq!(
            &*kept.get_or_render(1, bound, |_| "rendered again".into()),
            "rendered again"
        );
    }

    #[test]
    fn pieces_found_again_never_grow_a_generation_past_the_bound() {
        let kept = Kept::<u32>::default();
        let bound = 4;
        // A working set larger than the bound, read over and over with a new piece now and then.
        for round in 0..200u32 {
            for key in (0..7).chain([100 + round / 5]) {
                kept.get_or_render(key, bound, |_| format!("{key}"));
                let (newer, older) = kept.held();
                assert!(
                    newer <= bound && older <= bound,
                    "round {round}: {newer} and {older}"
                );
            }
        }
        assert_eq!(&*kept.get_or_render(3, bound, |_| "3".into()), "3");
    }
}
