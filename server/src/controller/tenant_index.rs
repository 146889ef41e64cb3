//! The cached tenants in the order the dashboard's pages list them, by phase too, kept beside the Tenant
//! cache from the same watch events: a page of 50 rows reads 50 entries and the phase counts are
//! counters, instead of every request cloning, sorting and filtering the whole fleet (153 ms a page at
//! 10,000 tenants; see BENCHMARKS.md). A text search still reads every entry's name and display name:
//! a substring has no index, but the entries are small and already in order.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use super::concerns::may_concern;
use super::follow::{Followed, Follows};
use crate::crd::{Tenant, TenantPhase};

#[derive(Clone, Default)]
pub struct TenantIndex(Followed<Namespaces>);

/// Each namespace's tenants.
#[derive(Default)]
struct Namespaces(HashMap<String, Index>);

/// One namespace's tenants.
#[derive(Default)]
struct Index {
    by_name: BTreeMap<String, Entry>,
    by_phase: HashMap<TenantPhase, BTreeSet<String>>,
    /// The tenants that may need attention ([`may_concern`]).
    concerned: BTreeSet<String>,
}

/// What the pages' filters read of a tenant, and the version of it they read.
struct Entry {
    phase: TenantPhase,
    /// Lower-cased, as searches are.
    display_name: Option<String>,
    resource_version: String,
}

/// Which tenants a page asks for: a phase, and a lower-cased substring of the name or display name.
#[derive(Clone, Copy, Debug, Default)]
pub struct Filter<'a> {
    pub phase: Option<TenantPhase>,
    pub text: Option<&'a str>,
}

/// One page of a listing: the tenants on it, in order, and how many tenants the filter matched.
#[derive(Debug, PartialEq, Eq)]
pub struct Listing {
    pub tenants: Vec<Listed>,
    pub matched: usize,
    pub total: usize,
}

/// A tenant on a page: its name, and the `resourceVersion` it was indexed at (what a row built from
/// the cached object at that version may be kept by).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub resource_version: String,
}

impl Entry {
    fn matches(&self, name: &str, filter: Filter<'_>) -> bool {
        filter.phase.is_none_or(|p| p == self.phase)
            && filter.text.is_none_or(|q| {
                name.contains(q) || self.display_name.as_deref().is_some_and(|d| d.contains(q))
            })
    }
}

impl Follows<Tenant> for Namespaces {
    fn insert(&mut self, tenant: &Tenant) {
        let namespaces = &mut self.0;
        let namespace = tenant.namespace().unwrap_or_default();
        let index = namespaces.entry(namespace).or_default();
        let name = tenant.name_any();
        index.remove(&name);
        let phase = tenant.phase().unwrap_or(TenantPhase::Pending);
        index
            .by_phase
            .entry(phase)
            .or_default()
            .insert(name.clone());
        if may_concern(tenant) {
            index.concerned.insert(name.clone());
        }
        let display_name = tenant.spec.display_name.as_deref().map(str::to_lowercase);
        index.by_name.insert(
            name,
            Entry {
                phase,
                display_name,
                resource_version: tenant.resource_version().unwrap_or_default(),
            },
        );
    }

    fn remove(&mut self, tenant: &Tenant) {
        let namespaces = &mut self.0;
        let namespace = tenant.namespace().unwrap_or_default();
        if let Some(index) = namespaces.get_mut(&namespace) {
            index.remove(&tenant.name_any());
            if index.by_name.is_empty() {
                namespaces.remove(&namespace);
            }
        }
    }
}

impl Index {
    fn remove(&mut self, name: &str) {
        let Some(entry) = self.by_name.remove(name) else {
            return;
        };
        self.concerned.remove(name);
        if let Some(names) = self.by_phase.get_mut(&entry.phase) {
            names.remove(name);
            if names.is_empty() {
                self.by_phase.remove(&entry.phase);
            }
        }
    }

    fn count(&self, phase: TenantPhase) -> usize {
        self.by_phase.get(&phase).map_or(0, BTreeSet::len)
    }

    /// The tenants `filter` matches, in name order, `window` (given how many match) choosing which.
    fn list(&self, filter: Filter<'_>, window: impl FnOnce(usize) -> (usize, usize)) -> Listing {
        let total = self.by_name.len();
        let (names, matched): (Vec<&String>, usize) = match (filter.phase, filter.text) {
            (_, Some(_)) => {
                let matching: Vec<&String> = self
                    .by_name
                    .iter()
                    .filter(|(name, entry)| entry.matches(name, filter))
                    .map(|(name, _)| name)
                    .collect();
                let matched = matching.len();
                let (skip, take) = window(matched);
                (
                    matching.into_iter().skip(skip).take(take).collect(),
                    matched,
                )
            }
            (Some(phase), None) => {
                let matched = self.count(phase);
                let (skip, take) = window(matched);
                let names = self.by_phase.get(&phase).into_iter().flatten();
                (names.skip(skip).take(take).collect(), matched)
            }
            (None, None) => {
                let (skip, take) = window(total);
                (self.by_name.keys().skip(skip).take(take).collect(), total)
            }
        };
        let tenants = names.into_iter().map(|name| Listed {
            name: name.clone(),
            resource_version: self.by_name[name].resource_version.clone(),
        });
        Listing {
            tenants: tenants.collect(),
            matched,
            total,
        }
    }
}

impl TenantIndex {
    /// Follows one watch event, exactly as the Tenant cache does.
    pub fn apply(&self, event: &Event<Tenant>) {
        self.0.apply(event);
    }

    /// The tenants of `namespace` that `filter` matches, in name order; `window` is told how many
    /// match and says which to return (how many to skip, how many to take).
    pub fn list(
        &self,
        namespace: &str,
        filter: Filter<'_>,
        window: impl FnOnce(usize) -> (usize, usize),
    ) -> Listing {
        self.0.read(|namespaces| match namespaces.0.get(namespace) {
            Some(index) => index.list(filter, window),
            None => Index::default().list(filter, window),
        })
    }

    /// The tenants of `namespace` that have a concern now or will have one if nothing changes: the
    /// only ones the "needs attention" list need look at.
    pub fn concerned(&self, namespace: &str) -> Vec<String> {
        self.0.read(|namespaces| {
            namespaces
                .0
                .get(namespace)
                .map(|index| index.concerned.iter().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// How many tenants of `namespace` are in each phase, and in all.
    pub fn counts(&self, namespace: &str) -> (HashMap<TenantPhase, usize>, usize) {
        self.0.read(|namespaces| {
            let Some(index) = namespaces.0.get(namespace) else {
                return (HashMap::new(), 0);
            };
            let by_phase = TenantPhase::ALL
                .iter()
                .map(|p| (*p, index.count(*p)))
                .collect();
            (by_phase, index.by_name.len())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{TenantSpec, TenantStatus};
    use kube::api::ObjectMeta;

    fn tenant(name: &str, phase: TenantPhase, display_name: Option<&str>) -> Tenant {
        Tenant {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: TenantSpec {
                display_name: display_name.map(str::to_owned),
                ..TenantSpec::default()
            },
            status: Some(TenantStatus {
                phase: Some(phase),
                ..TenantStatus::default()
            }),
        }
    }

    fn all(index: &TenantIndex, filter: Filter<'_>) -> Listing {
        index.list("ns", filter, |n| (0, n))
    }

    fn names(listing: Listing) -> Vec<String> {
        listing.tenants.into_iter().map(|t| t.name).collect()
    }

    fn phase(p: TenantPhase) -> Filter<'static> {
        Filter {
            phase: Some(p),
            text: None,
        }
    }

    #[test]
    fn lists_by_name_and_phase_and_follows_a_phase_change_and_a_deletion() {
        let index = TenantIndex::default();
        index.apply(&Event::Apply(tenant("globex", TenantPhase::Active, None)));
        index.apply(&Event::Apply(tenant("acme", TenantPhase::Pending, None)));
        index.apply(&Event::Apply(tenant("initech", TenantPhase::Active, None)));
        assert_eq!(
            names(all(&index, Filter::default())),
            ["acme", "globex", "initech"]
        );
        assert_eq!(
            names(all(&index, phase(TenantPhase::Active))),
            ["globex", "initech"]
        );
        index.apply(&Event::Apply(tenant("acme", TenantPhase::Active, None)));
        index.apply(&Event::Apply(tenant(
            "globex",
            TenantPhase::Suspended,
            None,
        )));
        assert_eq!(
            names(all(&index, phase(TenantPhase::Active))),
            ["acme", "initech"]
        );
        assert!(names(all(&index, phase(TenantPhase::Pending))).is_empty());
        index.apply(&Event::Delete(tenant("initech", TenantPhase::Active, None)));
        assert_eq!(names(all(&index, phase(TenantPhase::Active))), ["acme"]);
        let (by_phase, total) = index.counts("ns");
        assert_eq!(total, 2);
        assert_eq!(by_phase[&TenantPhase::Active], 1);
        assert_eq!(by_phase[&TenantPhase::Suspended], 1);
        assert_eq!(by_phase[&TenantPhase::Pending], 0);
        assert_eq!(index.counts("elsewhere"), (HashMap::new(), 0));
    }

    #[test]
    fn keeps_the_tenants_that_may_need_attention_as_their_phase_changes() {
        let index = TenantIndex::default();
        index.apply(&Event::Apply(tenant("acme", TenantPhase::Failed, None)));
        index.apply(&Event::Apply(tenant(
            "beta",
            TenantPhase::Provisioning,
            None,
        )));
        index.apply(&Event::Apply(tenant("globex", TenantPhase::Active, None)));
        assert_eq!(
            index.concerned("ns"),
            ["acme"],
            "Provisioning without a Ready time never gets stuck"
        );
        index.apply(&Event::Apply(tenant("acme", TenantPhase::Active, None)));
        assert!(index.concerned("ns").is_empty());
        index.apply(&Event::Apply(tenant("globex", TenantPhase::Failed, None)));
        assert_eq!(index.concerned("ns"), ["globex"]);
        index.apply(&Event::Delete(tenant("globex", TenantPhase::Failed, None)));
        assert!(index.concerned("ns").is_empty());
    }

    #[test]
    fn a_window_picks_the_rows_of_one_page_and_counts_every_match() {
        let index = TenantIndex::default();
        for i in 0..7 {
            let p = if i % 2 == 0 {
                TenantPhase::Active
            } else {
                TenantPhase::Failed
            };
            index.apply(&Event::Apply(tenant(&format!("t{i}"), p, None)));
        }
        let mut told = None;
        let listing = index.list("ns", phase(TenantPhase::Active), |n| {
            told = Some(n);
            (1, 2)
        });
        assert_eq!(told, Some(4), "t0, t2, t4, t6 match");
        assert_eq!((listing.matched, listing.total), (4, 7));
        assert_eq!(names(listing), ["t2", "t4"]);
        let listing = index.list("ns", Filter::default(), |_| (5, 50));
        assert_eq!(listing.matched, 7);
        assert_eq!(names(listing), ["t5", "t6"]);
    }

    #[test]
    fn a_listed_tenant_carries_the_resource_version_it_was_indexed_at() {
        let index = TenantIndex::default();
        let at = |version: &str| {
            let mut t = tenant("acme", TenantPhase::Active, None);
            t.metadata.resource_version = Some(version.into());
            t
        };
        index.apply(&Event::Apply(at("7")));
        index.apply(&Event::Apply(tenant("globex", TenantPhase::Failed, None)));
        let versions = |filter| {
            let listing = all(&index, filter);
            let listed = listing.tenants.into_iter();
            listed
                .map(|t| (t.name, t.resource_version))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            versions(Filter::default()),
            [
                ("acme".into(), "7".into()),
                ("globex".into(), String::new())
            ]
        );
        index.apply(&Event::Apply(at("9")));
        assert_eq!(
            versions(phase(TenantPhase::Active)),
            [("acme".to_owned(), "9".to_owned())]
        );
        let text = Filter {
            phase: None,
            text: Some("acm"),
        };
        assert_eq!(versions(text), [("acme".to_owned(), "9".to_owned())]);
    }

    #[test]
    fn a_search_matches_a_substring_of_the_name_or_the_display_name_within_the_phase() {
        let index = TenantIndex::default();
        index.apply(&Event::Apply(tenant(
            "acme",
            TenantPhase::Active,
            Some("Road Runner Inc"),
        )));
        index.apply(&Event::Apply(tenant("runner", TenantPhase::Failed, None)));
        index.apply(&Event::Apply(tenant("globex", TenantPhase::Active, None)));
        let text = |q| Filter {
            phase: None,
            text: Some(q),
        };
        assert_eq!(names(all(&index, text("runner"))), ["acme", "runner"]);
        let active_runners = Filter {
            phase: Some(TenantPhase::Active),
            text: Some("runner"),
        };
        let listing = all(&index, active_runners);
        assert_eq!((listing.matched, listing.total), (1, 3));
        assert_eq!(names(listing), ["acme"]);
        assert!(names(all(&index, text("initech"))).is_empty());
    }

    #[test]
    fn a_relist_replaces_everything_only_once_complete_and_namespaces_stay_apart() {
        let index = TenantIndex::default();
        index.apply(&Event::Apply(tenant("acme", TenantPhase::Active, None)));
        let mut other = tenant("acme", TenantPhase::Failed, None);
        other.metadata.namespace = Some("other".into());
        index.apply(&Event::Apply(other));
        assert_eq!(names(all(&index, phase(TenantPhase::Active))), ["acme"]);
        assert_eq!(index.counts("other").1, 1);
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(tenant(
            "beta",
            TenantPhase::Pending,
            None,
        )));
        assert_eq!(names(all(&index, Filter::default())), ["acme"], "not yet");
        index.apply(&Event::InitDone);
        assert_eq!(names(all(&index, Filter::default())), ["beta"]);
        assert_eq!(index.counts("other"), (HashMap::new(), 0));
    }
}
