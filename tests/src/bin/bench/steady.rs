//! Steady state at 100,000 tenants. The in-memory API keeps every object as JSON with its managedFields,
//! so a fleet this size does not fit in it on this machine; the operator's caches, which slim what they
//! keep, do. So the fleet of the largest scale above, converged (every tenant Active, its Provision run
//! finished and cleaned up), is listed from its API once and copied under new names — copy `k` of
//! tenant `t-0xxxx` is `t-kxxxx`, in every name derived from it, and every UUID in it (uids, and the
//! names and fields that carry one) starts with `k` — into the caches of one more in-memory cluster,
//! through the steps a watch's first list takes (JSON parsed, slimmed, cached and indexed). That
//! cluster's API holds none of these objects: a reconcile that asked it for one would be answered 404,
//! so the section counts its requests as well as its writes.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use sentry_tenants::crd::{RunJob, SECRET_MARKER_COMPONENT, Tenant};
use sentry_tenants_tests::fleet::{Fleet, is_counted_write};
use sentry_tenants_tests::{Cluster, NS};
use serde::de::DeserializeOwned;

use crate::figure;
use crate::reconcile::noop_pass;
use crate::report::{Goal, Section};

/// The fleet this section measures.
pub const TENANTS: usize = 100_000;
/// Timed no-op passes at each size; the best is kept.
const RUNS: usize = 3;

/// What the API held, as the JSON a watch's list delivers.
struct Listed {
    tenants: Vec<String>,
    runs: Vec<String>,
    jobs: Vec<String>,
    markers: Vec<String>,
}

/// What the caches take in.
struct Objects {
    tenants: Vec<Tenant>,
    runs: Vec<RunJob>,
    jobs: Vec<Job>,
    markers: Vec<ConfigMap>,
}

impl Listed {
    async fn from(c: &Cluster) -> Self {
        async fn texts<K>(api: Api<K>, params: &ListParams) -> Vec<String>
        where
            K: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
        {
            let items = api.list(params).await.expect("list the fleet").items;
            items
                .iter()
                .map(|o| serde_json::to_string(o).unwrap())
                .collect()
        }
        let all = ListParams::default();
        let markers = ListParams::default().labels(&format!(
            "app.kubernetes.io/component={SECRET_MARKER_COMPONENT}"
        ));
        Self {
            tenants: texts(Api::<Tenant>::namespaced(c.admin.clone(), NS), &all).await,
            runs: texts(Api::<RunJob>::namespaced(c.admin.clone(), NS), &all).await,
            jobs: texts(Api::<Job>::namespaced(c.admin.clone(), NS), &all).await,
            markers: texts(Api::<ConfigMap>::namespaced(c.admin.clone(), NS), &markers).await,
        }
    }

    /// "100000 tenants, 0 runs, 0 Jobs, 100000 credentials markers" for `copies` copies.
    fn counts(&self, copies: usize) -> String {
        format!(
            "{} tenants, {} runs, {} Jobs, {} credentials markers",
            self.tenants.len() * copies,
            self.runs.len() * copies,
            self.jobs.len() * copies,
            self.markers.len() * copies
        )
    }

    /// `copies` copies of every object, each under its own names and uids, parsed as a watch would.
    fn parse_copies(&self, names: &Renaming) -> anyhow::Result<Objects> {
        fn parse<K: DeserializeOwned>(
            texts: &[String],
            names: &Renaming,
        ) -> anyhow::Result<Vec<K>> {
            let mut out = Vec::with_capacity(texts.len() * names.copies);
            for k in 0..names.copies {
                for text in texts {
                    out.push(serde_json::from_str(&names.copy(text, k))?);
                }
            }
            Ok(out)
        }
        Ok(Objects {
            tenants: parse(&self.tenants, names)?,
            runs: parse(&self.runs, names)?,
            jobs: parse(&self.jobs, names)?,
            markers: parse(&self.markers, names)?,
        })
    }
}

/// How copy `k` of the source fleet is named. The source's tenants are `t-00000` … (five digits, see
/// `fleet::tenant_names`); with `n` of them (a power of ten) the leading `5 - log10(n)` digits are all
/// zero, and copy `k` writes `k` there instead — in the tenant's name and every name derived from it
/// (runs, Jobs, Secrets, markers; ClickHouse's with `_`).
struct Renaming {
    copies: usize,
    width: usize,
}

/// Whether a converged fleet of `source` tenants can be copied up to [`TENANTS`].
pub fn copies_from(source: usize) -> bool {
    source > 0 && 10usize.pow(source.ilog10()) == source && source <= TENANTS
}

impl Renaming {
    fn new(source: usize) -> Self {
        assert!(
            copies_from(source),
            "the source fleet's size is a power of ten up to {TENANTS}: {source}"
        );
        let width = 5 - source.ilog10() as usize;
        Self {
            copies: TENANTS / source,
            width,
        }
    }

    fn copy(&self, text: &str, k: usize) -> String {
        let zeros = "0".repeat(self.width);
        let width = self.width;
        let renamed = text
            .replace(&format!("t-{zeros}"), &format!("t-{k:0width$}"))
            .replace(&format!("t_{zeros}"), &format!("t_{k:0width$}"));
        stamp_uuids(renamed, k)
    }
}

/// Every UUID in `text` (uids, owners' uids, the Secret uid in a tenant's status and in its marker's
/// name) with its first five hex digits replaced by `k`: copies of one object get uids of their own, and
/// every reference to a uid follows it.
fn stamp_uuids(text: String, k: usize) -> String {
    const LEN: usize = 36;
    let is_uuid = |b: &[u8]| {
        b.iter().enumerate().all(|(j, c)| match j {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
    };
    let stamp = format!("{k:05x}");
    let mut bytes = text.into_bytes();
    let mut i = 0;
    while i + LEN <= bytes.len() {
        if is_uuid(&bytes[i..i + LEN]) {
            bytes[i..i + stamp.len()].copy_from_slice(stamp.as_bytes());
            i += LEN;
        } else {
            i += 1;
        }
    }
    String::from_utf8(bytes).expect("ASCII replaced by ASCII")
}

/// The steady-state section, and the cluster it filled (for the dashboard's section at this size).
pub async fn measure(source: &Fleet, n: usize) -> (Section, Cluster) {
    let s = &source.cluster;
    s.sync_stores().await;
    let listed = Listed::from(s).await;
    let names = Renaming::new(n);

    // The same state at the source's size, for the ratios.
    s.log.clear();
    let (small_reconciles, small) = noop_pass(s, RUNS).await;
    let small_rate = small_reconciles / small.best;

    let c = Cluster::starting_at(s.clock.now()).await;
    let started = std::time::Instant::now();
    let objects = listed.parse_copies(&names).expect("the copies parse");
    let cached = objects.tenants.len();
    fill(&c, objects);
    let filled_secs = started.elapsed().as_secs_f64();
    noop_pass(&c, 1).await;
    let restart_secs = started.elapsed().as_secs_f64();
    assert_eq!(
        c.ctx.stores.tenants.state().len(),
        TENANTS,
        "every copy has a name of its own"
    );
    assert_eq!(cached, TENANTS);

    c.log.clear();
    let (reconciles, large) = noop_pass(&c, RUNS).await;
    let writes = c.log.count(is_counted_write) as f64 / RUNS as f64;
    let requests = c.log.len() as f64 / RUNS as f64;
    let rate = reconciles / large.best;

    let figures = vec![
        figure("writes per no-op reconcile", writes / reconciles, "writes")
            .goal(Goal::AtMost(0.0))
            .note(format!("{writes} writes in a pass of {reconciles} reconciles")),
        figure("API requests per no-op reconcile", requests / reconciles, "requests")
            .goal(Goal::AtMost(0.0))
            .note("the steady state is decided from the caches alone"),
        figure("no-op reconciles per second", rate, "/s").note(format!(
            "best of {RUNS} passes; spread {:.2}×",
            large.spread()
        )),
        figure(
            format!("no-op reconciles per second: {TENANTS} ÷ {n} tenants"),
            rate / small_rate,
            "×",
        )
        .note(format!(
            "{small_rate:.0}/s at {n} (the source fleet, same state, best of {RUNS}; spread {:.2}×): \
             1.0 is a cost per reconcile flat in the fleet's size",
            small.spread()
        )),
        figure("restart: empty caches to every object reconciled", restart_secs, "s").note(format!(
            "the JSON of {} parsed, slimmed, cached and indexed ({filled_secs:.2} s), then one reconcile of \
             each; the apiserver's list itself not included",
            listed.counts(names.copies)
        )),
    ];
    let section = Section::new(format!("Steady state, {TENANTS} tenants"), figures).remark(format!(
        "{} copies of the {n}-tenant fleet above, converged (every tenant Active, its Provision run finished \
         and cleaned up), in the caches of an in-memory cluster whose API holds none of them (see \
         `tests/src/bin/bench/steady.rs` for why and how). The dashboard's section at this size reads \
         these caches; the memory section measures caches of this size in a process of their own.",
        names.copies
    ));
    (section, c)
}

/// The caches filled with `objects` as the four watches' first lists fill them.
fn fill(c: &Cluster, objects: Objects) {
    c.fill_stores(objects.tenants, objects.runs, objects.jobs);
    c.fill_markers(objects.markers);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_renames_the_tenant_everywhere_and_stamps_every_uuid() {
        let names = Renaming::new(10_000);
        assert_eq!(names.copies, 10);
        let text = r#"{"name":"t-00042-provision-1","db":"tenant_t_00042","uid":"4d2960f2-fd4f-4ef8-b12c-4a6241df69de","marker":"t-00042-clickhouse.4d2960f2-fd4f-4ef8-b12c-4a6241df69de","hash":"5ec99ad402ca2b133bfdcf6a57f9c94e1329fc731a32484d98d328f2f17011cf"}"#;
        assert_eq!(
            names.copy(text, 7),
            r#"{"name":"t-70042-provision-1","db":"tenant_t_70042","uid":"000070f2-fd4f-4ef8-b12c-4a6241df69de","marker":"t-70042-clickhouse.000070f2-fd4f-4ef8-b12c-4a6241df69de","hash":"5ec99ad402ca2b133bfdcf6a57f9c94e1329fc731a32484d98d328f2f17011cf"}"#
        );
        let small = Renaming::new(100);
        assert_eq!(
            (small.copies, small.copy("t-00099", 999)),
            (1000, "t-99999".to_owned())
        );
        assert!(!copies_from(2_000) && !copies_from(0) && !copies_from(1_000_000));
    }
}
