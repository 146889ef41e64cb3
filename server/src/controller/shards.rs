//! Shards (`install --shards a,b`): for more tenants than one replica should reconcile. Flux's
//! convention: a label (`sentry.io/shard`) names the shard that reconciles a tenant, each shard is a
//! Deployment of its own with its own Lease, and the main operator reconciles what no shard selects.
//!
//! Here the main operator's part is to give every unlabelled tenant a shard (an FNV-1a hash of its
//! name over the shard list), in one write guarded by the tenant's resourceVersion, so a person
//! labelling it at the same moment wins; a label is never changed by the operator, so growing the
//! shard list moves no tenant. A tenant's runs belong to its shard; runs whose tenant is gone belong
//! to the main operator (they only fail or get cleaned up).
//!
//! Every replica still watches every tenant: the dashboard shows the whole namespace from any of them,
//! and a shard needs the tenant to know a run's shard. Only reconciling is divided.

use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Context, Result, write_params};
use crate::crd::Tenant;
use crate::labels;
use crate::leader::{LEASE_NAME, shard_lease};

/// This operator's place among the shards.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sharding {
    /// Every shard of the install; empty when unsharded.
    shards: Vec<String>,
    /// This operator's shard; `None` for the main operator (or the only one).
    mine: Option<String>,
}

/// Who acts on a tenant, as this operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Duty {
    /// Reconcile it.
    Reconcile,
    /// Label it for this shard (the main operator, for an unlabelled tenant), and nothing more.
    Assign(String),
    /// Say that its label names no shard of the install (the main operator), and nothing more.
    Unknown(String),
    /// Another operator's.
    None,
}

impl Sharding {
    pub fn new(shards: Vec<String>, mine: Option<String>) -> Self {
        Self { shards, mine }
    }

    pub fn is_sharded(&self) -> bool {
        !self.shards.is_empty()
    }

    /// The Lease this operator's replicas elect their leader on: one per shard.
    pub fn lease_name(&self) -> String {
        match &self.mine {
            Some(shard) => shard_lease(shard),
            None => LEASE_NAME.to_owned(),
        }
    }

    /// The shard this operator reconciles, if it is one (for logs and metrics).
    pub fn mine(&self) -> Option<&str> {
        self.mine.as_deref()
    }

    /// What this operator does with a tenant whose shard label is `label`.
    pub fn duty(&self, name: &str, label: Option<&str>) -> Duty {
        if !self.is_sharded() {
            return Duty::Reconcile;
        }
        match (label, &self.mine) {
            (Some(label), Some(mine)) if label == mine => Duty::Reconcile,
            (None, None) => Duty::Assign(self.assigned(name).to_owned()),
            (Some(label), None) if !self.shards.iter().any(|s| s == label) => {
                Duty::Unknown(label.to_owned())
            }
            _ => Duty::None,
        }
    }

    /// [`Self::duty`] for a tenant object.
    pub fn duty_for(&self, tenant: &Tenant) -> Duty {
        self.duty(&tenant.name_any(), shard_label(tenant))
    }

    /// Whether this operator reconciles the runs of tenant `name`: `tenant` is the tenant if it
    /// exists. A run of an unlabelled tenant waits for the label (the RunJob controller is told of
    /// the tenant's change); a run whose tenant is gone is the main operator's.
    pub fn reconciles_runs_of(&self, tenant: Option<&Tenant>) -> bool {
        if !self.is_sharded() {
            return true;
        }
        match tenant {
            Some(t) => self.duty_for(t) == Duty::Reconcile,
            None => self.mine.is_none(),
        }
    }

    /// The shard an unlabelled tenant named `name` is given.
    fn assigned(&self, name: &str) -> &str {
        let index = fnv1a(name.as_bytes()) % self.shards.len() as u64;
        &self.shards[index as usize]
    }
}

/// Which tenants' runs this operator reconciles, judged from the tenant cache (for the cap on runs
/// in flight, which each shard keeps for its own runs).
#[derive(Clone)]
pub struct RunsOwned {
    pub sharding: Sharding,
    pub tenants: Store<Tenant>,
    pub namespace: String,
}

impl RunsOwned {
    pub fn of_tenant(&self, tenant: &str) -> bool {
        if !self.sharding.is_sharded() {
            return true;
        }
        let cached = self
            .tenants
            .get(&ObjectRef::new(tenant).within(&self.namespace));
        self.sharding.reconciles_runs_of(cached.as_deref())
    }
}

/// The main operator's one write to an unlabelled tenant: its shard label. The tenant's
/// resourceVersion goes with it, so a label someone set meanwhile is never overwritten (a 409); the
/// watch brings the tenant back either way, to the shard that now owns it.
pub async fn assign(tenant: &Tenant, shard: &str, ctx: &Context) -> Result<Action> {
    let patch = serde_json::json!({
        "metadata": {
            "labels": {labels::SHARD: shard},
            "resourceVersion": tenant.resource_version(),
        }
    });
    let name = tenant.name_any();
    match (ctx.tenants())
        .patch(&name, &write_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(tenant = %name, shard, "tenant assigned to a shard");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

/// The main operator's word on a tenant whose label names no shard: nobody reconciles it until the
/// label is fixed or the shard is added. A Warning Event, once per change of the tenant.
pub async fn report_unknown(tenant: &Tenant, shard: &str, ctx: &Context) -> Result<Action> {
    let note = format!(
        "label {}={shard} names no shard of this install ({}): nobody reconciles this tenant; fix the label or add the shard (install --shards)",
        labels::SHARD,
        ctx.sharding.shards.join(",")
    );
    ctx.event(tenant, EventType::Warning, "UnknownShard", note)
        .await;
    Ok(Action::await_change())
}

/// A tenant's shard label, if it has one.
pub fn shard_label(tenant: &Tenant) -> Option<&str> {
    tenant.labels().get(labels::SHARD).map(String::as_str)
}

/// 64-bit FNV-1a: stable across versions and platforms (a std hasher is neither), so every
/// replica and every release assigns a tenant the same shard.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sharded(mine: Option<&str>) -> Sharding {
        Sharding::new(vec!["a".into(), "b".into()], mine.map(str::to_owned))
    }

    /// Known answers of 64-bit FNV-1a (from its authors' test vectors).
    #[test]
    fn fnv1a_gives_the_published_hashes() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn unsharded_the_one_operator_reconciles_every_tenant_and_run() {
        let one = Sharding::default();
        assert_eq!(one.duty("acme", None), Duty::Reconcile);
        assert_eq!(one.duty("acme", Some("a")), Duty::Reconcile);
        assert!(one.reconciles_runs_of(None));
        assert_eq!(one.lease_name(), "sentry-tenants-leader");
    }

    #[test]
    fn a_shard_reconciles_only_the_tenants_labelled_for_it() {
        let a = sharded(Some("a"));
        assert_eq!(a.duty("acme", Some("a")), Duty::Reconcile);
        assert_eq!(a.duty("acme", Some("b")), Duty::None);
        assert_eq!(a.duty("acme", None), Duty::None, "unlabelled: the main's");
        assert_eq!(
            a.duty("acme", Some("gone")),
            Duty::None,
            "a shard nobody runs"
        );
        assert!(!a.reconciles_runs_of(None), "a run whose tenant is gone");
        assert_eq!(a.lease_name(), "sentry-tenants-leader-a");
    }

    #[test]
    fn the_main_operator_assigns_unlabelled_tenants_by_their_names_hash() {
        let main = sharded(None);
        // fnv1a("a") and fnv1a("b") (0xaf63df4c8601f1a5) are even and odd: shards a and b of two.
        assert_eq!(main.duty("a", None), Duty::Assign("a".into()));
        assert_eq!(main.duty("b", None), Duty::Assign("b".into()));
        assert_eq!(main.duty("a", Some("a")), Duty::None);
        assert_eq!(
            main.duty("a", Some("c")),
            Duty::Unknown("c".into()),
            "a label naming no shard"
        );
        assert_eq!(
            sharded(Some("a")).duty("a", Some("c")),
            Duty::None,
            "the main operator says so, not a shard"
        );
        assert!(main.reconciles_runs_of(None), "a run whose tenant is gone");
        assert_eq!(main.lease_name(), "sentry-tenants-leader");
    }

    /// Over many names each of three shards gets about a third.
    #[test]
    fn assignment_spreads_tenants_evenly() {
        let main = Sharding::new(vec!["x".into(), "y".into(), "z".into()], None);
        let mut counts = std::collections::HashMap::<String, usize>::new();
        for i in 0..3000 {
            if let Duty::Assign(shard) = main.duty(&format!("tenant-{i}"), None) {
                *counts.entry(shard).or_default() += 1;
            }
        }
        assert_eq!(counts.len(), 3);
        assert!(
            counts.values().all(|&n| (900..=1100).contains(&n)),
            "{counts:?}"
        );
    }

    fn tenant(name: &str, shard: Option<&str>) -> Tenant {
        let mut t: Tenant = serde_json::from_value(serde_json::json!({
            "apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {},
        }))
        .unwrap();
        if let Some(shard) = shard {
            t.labels_mut()
                .insert("sentry.io/shard".into(), shard.into());
        }
        t
    }

    /// The tenant object's label decides, and its runs go with it; a run whose tenant is not cached
    /// is the main operator's.
    #[test]
    fn a_tenants_label_decides_for_it_and_its_runs() {
        let a = sharded(Some("a"));
        assert_eq!(shard_label(&tenant("acme", Some("a"))), Some("a"));
        assert_eq!(shard_label(&tenant("acme", None)), None);
        assert_eq!(a.duty_for(&tenant("acme", Some("a"))), Duty::Reconcile);
        assert_eq!(a.duty_for(&tenant("acme", Some("b"))), Duty::None);
        assert_eq!(
            sharded(None).duty_for(&tenant("b", None)),
            Duty::Assign("b".into())
        );
        assert_eq!(a.mine(), Some("a"));
        assert_eq!(sharded(None).mine(), None);

        let (tenants, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(tenant(
            "acme",
            Some("a"),
        )));
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(tenant(
            "globex", None,
        )));
        let owned = |sharding: Sharding| RunsOwned {
            sharding,
            tenants: tenants.clone(),
            namespace: "ns".into(),
        };
        let a = owned(sharded(Some("a")));
        assert!(a.of_tenant("acme"));
        assert!(!a.of_tenant("globex"), "unlabelled: waits for its label");
        assert!(!a.of_tenant("gone"));
        let main = owned(sharded(None));
        assert!(!main.of_tenant("acme") && !main.of_tenant("globex"));
        assert!(main.of_tenant("gone"), "a run whose tenant is gone");
        let one = owned(Sharding::default());
        assert!(one.of_tenant("acme") && one.of_tenant("globex") && one.of_tenant("gone"));
    }
}
