//! Memory: what `run`'s caches cost. A child process (a clean heap) builds N tenants and N runs as JSON
//! from templates — taken from the real apiserver of the control plane section when it ran, managedFields
//! and all — feeds them through the same steps `run`'s watches take (deserialize, slim, store) and
//! reports its resident set before and after. Measured with one history record per tenant, and with
//! full histories (20 records, each with a log tail of the largest size kept) against the Deployment's
//! memory limit.

use std::io::Write as _;

use kube::ResourceExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use sentry_tenants::controller::{RunIndex, drop_managed_fields, slim_tenant};
use sentry_tenants::crd::HISTORY_LIMIT;
use sentry_tenants::crd::{RunAction, RunJob, Tenant};
use sentry_tenants_tests::fleet::Fleet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::figure;
use crate::report::{Goal, Section};

/// The template tenant's name: distinctive, so renaming the JSON text cannot touch anything else.
const TEMPLATE: &str = "tmplq";

#[derive(Serialize, Deserialize)]
struct Templates {
    tenant: Value,
    run: Value,
}

#[derive(Serialize, Deserialize, Debug)]
struct ProbeResult {
    json_bytes: usize,
    rss_before_kib: u64,
    rss_after_kib: u64,
    objects: usize,
    had_managed_fields: bool,
}

/// How the probe treats what it caches.
#[derive(Clone, Copy)]
enum Mode {
    /// As `run` does: managedFields dropped, history log tails dropped from tenants.
    Slim,
    /// Everything kept, as the caches would hold the objects without `run`'s slimming.
    Keep,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Self::Slim => "slim",
            Self::Keep => "keep",
        }
    }
}

/// Tenants of the full-histories figures, whatever the scale: the fleet one replica's memory limit is
/// sized for. At 100,000 the JSON alone would be about 9 GiB, and the figure is a share of that limit.
const FULL_HISTORY_TENANTS: usize = 10_000;

/// The share of the memory limit the caches may take: twice that during a relist, and room for the rest.
const RELIST_SHARE: f64 = 0.4;

/// The largest log tail a finished run keeps (the bytes `run` asks the pod log for).
const LOG_TAIL_BYTES: usize = 4096;

pub async fn measure(n: usize, sample: crate::cluster::Sample) -> Section {
    let real = sample.tenant.is_some() && sample.run.is_some();
    let one = templates(sample).await;
    let full = with_full_history(&one);
    let probe = |t: &Templates, tenants: usize, mode: Mode| {
        let path = std::env::temp_dir().join(format!(
            "sentry-tenants-bench-{}-{}.json",
            std::process::id(),
            mode.arg()
        ));
        std::fs::write(&path, serde_json::to_vec(t).unwrap()).unwrap();
        let result = run_probe(&path, tenants, mode);
        let _ = std::fs::remove_file(&path);
        result
    };
    let baseline = probe(&one, n, Mode::Slim);
    let kept = probe(&one, n, Mode::Keep);
    let full_n = n.min(FULL_HISTORY_TENANTS);
    let full_slim = probe(&full, full_n, Mode::Slim);
    let full_kept = probe(&full, full_n, Mode::Keep);
    let ratio = |p: &ProbeResult| p.cache_kib() as f64 * 1024.0 / p.json_bytes as f64;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let json_mib = |p: &ProbeResult| p.json_bytes as f64 / 1024.0 / 1024.0;
    let limit = deployment_memory_limit_mib();
    let source = if real {
        "taken from the real apiserver (control plane section): managedFields as it wrote them"
    } else {
        "from the in-memory API (no managedFields): the control plane section did not run"
    };
    Section::new(
        format!("Memory, {n} tenants + {n} runs in the caches"),
        vec![
            figure("cache RSS / objects' JSON size", ratio(&baseline), "×")
                .goal(Goal::AtMost(3.0))
                .note(format!(
                    "{:.1} MiB resident for {:.1} MiB of JSON; each tenant with one history record",
                    mib(baseline.cache_kib()),
                    json_mib(&baseline)
                )),
            figure("same, keeping managedFields", ratio(&kept), "×").note(format!(
                "{:.1} MiB: what the caches cost without `run`'s slimming (managedFields present: {})",
                mib(kept.cache_kib()),
                kept.had_managed_fields
            )),
            figure("JSON per object", baseline.json_bytes as f64 / baseline.objects as f64, "bytes")
                .note(format!("an Active tenant with one history record and a finished run; {source}")),
            figure(
                format!("full histories: cache RSS, {full_n} tenants × {HISTORY_LIMIT} runs recorded"),
                mib(full_slim.cache_kib()),
                "MiB",
            )
            .goal(Goal::AtMost(limit * RELIST_SHARE))
            .note(format!(
                "Deployment memory limit {limit:.0} MiB; goal {:.0} % of it, since a watch relist holds a \
                 second copy of a cache until it completes and the rest of the process needs room; {:.1} MiB of JSON \
                 ({:.0} bytes per tenant), every record's log tail {LOG_TAIL_BYTES} bytes (the largest kept) \
                 and dropped before caching, the live runs' kept",
                RELIST_SHARE * 100.0,
                json_mib(&full_slim),
                (full_slim.json_bytes as f64 - full_n as f64 * full_run_bytes(&full)) / full_n as f64
            )),
            figure("full histories, nothing slimmed", mib(full_kept.cache_kib()), "MiB").note(format!(
                "{:.0} % of the memory limit: why the caches drop history log tails (the tenant page reads \
                 them from the API) and managedFields",
                100.0 * mib(full_kept.cache_kib()) / limit
            )),
        ],
    )
    .remark(
        "Resident set of a child process before and after filling the caches and the run index; the JSON \
         stays alive throughout, so the difference is the caches plus what the allocator keeps.",
    )
}

impl ProbeResult {
    fn cache_kib(&self) -> u64 {
        self.rss_after_kib.saturating_sub(self.rss_before_kib)
    }
}

/// The memory limit of the operator's container in the Deployment this repo installs.
fn deployment_memory_limit_mib() -> f64 {
    let yaml = include_str!("../../../../manifests/deployment.yaml");
    let after_limits = &yaml[yaml.find("limits:").expect("a limits block")..];
    let value = after_limits
        .lines()
        .find_map(|l| l.trim().strip_prefix("memory:"))
        .expect("a memory limit")
        .trim();
    let mib: f64 = value
        .strip_suffix("Mi")
        .expect("the limit is given in Mi")
        .parse()
        .expect("a number");
    mib
}

fn full_run_bytes(t: &Templates) -> f64 {
    serde_json::to_string(&t.run).unwrap().len() as f64
}

/// `n` bytes of `text` repeated: a log tail of the largest kept size, made of real log lines.
fn log_of_size(text: &str, n: usize) -> String {
    let line = if text.is_empty() {
        "{\"level\":\"INFO\",\"message\":\"provisioned\"}\n"
    } else {
        text
    };
    line.chars().cycle().take(n).collect()
}

/// The templates with a full history on the tenant: [`HISTORY_LIMIT`] records like its first one, each
/// with a log tail of [`LOG_TAIL_BYTES`], and the run's log tail as large.
fn with_full_history(one: &Templates) -> Templates {
    let mut tenant = one.tenant.clone();
    let record = match &tenant["status"]["history"][0] {
        Value::Null => {
            let run: RunJob = serde_json::from_value(one.run.clone()).expect("a RunJob");
            serde_json::to_value(sentry_tenants::controller::runjob::run_record(&run)).unwrap()
        }
        recorded => recorded.clone(),
    };
    let tail = log_of_size(
        record["logTail"].as_str().unwrap_or_default(),
        LOG_TAIL_BYTES,
    );
    let history: Vec<Value> = (0..HISTORY_LIMIT)
        .map(|i| {
            let mut r = record.clone();
            r["name"] = format!("{TEMPLATE}-provision-{}", i + 1).into();
            r["uid"] = format!("{i:04}-{}", r["uid"].as_str().unwrap_or_default()).into();
            r["logTail"] = tail.clone().into();
            r
        })
        .collect();
    tenant["status"]["history"] = history.into();
    let mut run = one.run.clone();
    run["status"]["logTail"] = tail.into();
    Templates { tenant, run }
}

/// An Active tenant with its status and a finished Provision run: as the real apiserver returned them
/// when the control plane section ran, else as the in-memory API does.
async fn templates(sample: crate::cluster::Sample) -> Templates {
    if let (Some(tenant), Some(run)) = (sample.tenant, sample.run) {
        let rename = |value: Value, name: &str| {
            let text = serde_json::to_string(&value)
                .unwrap()
                .replace(name, TEMPLATE);
            serde_json::from_str(&text).unwrap()
        };
        let tenant_name = tenant.name_any();
        let run_tenant = run.spec.tenant.clone();
        return Templates {
            tenant: rename(serde_json::to_value(tenant).unwrap(), &tenant_name),
            run: rename(serde_json::to_value(run).unwrap(), &run_tenant),
        };
    }
    in_memory_templates().await
}

/// An Active tenant with its status and a finished Provision run, as the in-memory API returns them.
async fn in_memory_templates() -> Templates {
    let fleet = Fleet::new().await;
    let c = &fleet.cluster;
    fleet.create_tenants(&[TEMPLATE.to_owned()]).await;
    c.create_run(
        TEMPLATE,
        RunAction::Provision,
        &format!("{TEMPLATE}-provision-1"),
    )
    .await;
    // Job created and run; then the run's status records the outcome (cleanup comes a round later).
    fleet.round().await;
    fleet.reconcile_pass().await;
    let tenant = c.tenants().get(TEMPLATE).await.unwrap();
    let run = c
        .runjobs()
        .get(&format!("{TEMPLATE}-provision-1"))
        .await
        .unwrap();
    assert!(run.is_finished(), "template run finished: {:?}", run.status);
    Templates {
        tenant: serde_json::to_value(tenant).unwrap(),
        run: serde_json::to_value(run).unwrap(),
    }
}

fn run_probe(templates: &std::path::Path, n: usize, mode: Mode) -> ProbeResult {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("memory-probe")
        .arg(templates)
        .arg(n.to_string())
        .arg(mode.arg())
        .output()
        .expect("memory probe runs");
    assert!(
        out.status.success(),
        "memory probe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("probe prints its result")
}

/// The child: `memory-probe <templates> <n> <slim|keep>`.
pub fn probe(args: &[String]) -> anyhow::Result<()> {
    let templates: Templates = serde_json::from_slice(&std::fs::read(&args[0])?)?;
    let n: usize = args[1].parse()?;
    let keep = args.get(2).map(String::as_str) == Some("keep");
    let tenant_text = serde_json::to_string(&templates.tenant)?;
    let run_text = serde_json::to_string(&templates.run)?;
    let had_managed_fields = templates.tenant["metadata"]["managedFields"].is_array();
    let copies = |text: &str| -> Vec<String> {
        (0..n)
            .map(|i| {
                text.replace(TEMPLATE, &format!("t-{i:05}"))
                    .replace("\"uid\":\"", &format!("\"uid\":\"{i:05}-"))
            })
            .collect()
    };
    let tenants = copies(&tenant_text);
    let runs = copies(&run_text);
    let json_bytes: usize = tenants.iter().chain(&runs).map(String::len).sum();

    let rss_before_kib = rss_kib();
    let mut tenant_cache: Writer<Tenant> = Writer::default();
    let mut run_cache: Writer<RunJob> = Writer::default();
    let run_index = RunIndex::default();
    fill(&mut tenant_cache, &tenants, keep, slim_tenant, |_| {})?;
    fill(&mut run_cache, &runs, keep, drop_managed_fields, |event| {
        run_index.apply(event)
    })?;
    let rss_after_kib = rss_kib();
    assert_eq!(tenant_cache.as_reader().len(), n);
    assert_eq!(run_cache.as_reader().len(), n);
    assert_eq!(run_index.read(|i| i.runs_of("t-00000")).len(), 1);
    std::hint::black_box((&tenants, &runs));

    let result = ProbeResult {
        json_bytes,
        rss_before_kib,
        rss_after_kib,
        objects: 2 * n,
        had_managed_fields,
    };
    std::io::stdout().write_all(&serde_json::to_vec(&result)?)?;
    Ok(())
}

/// What a watch does with each object before `run`'s caches hold it; `also` sees every event too (the
/// run index follows the RunJob watch).
fn fill<K>(
    cache: &mut Writer<K>,
    texts: &[String],
    keep_everything: bool,
    slim: impl Fn(&mut K),
    also: impl Fn(&Event<K>),
) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + ResourceExt,
{
    let mut apply = |event: Event<K>| {
        also(&event);
        cache.apply_watcher_event(&event);
    };
    apply(Event::Init);
    for text in texts {
        let mut obj: K = serde_json::from_str(text)?;
        if !keep_everything {
            slim(&mut obj);
        }
        apply(Event::InitApply(obj));
    }
    apply(Event::InitDone);
    Ok(())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
