//! Memory: what `run`'s caches cost per byte of the objects they hold. A child process (a clean heap)
//! builds N tenants and N runs as JSON from real templates, then feeds them through the same steps
//! `run`'s watches take (deserialize, drop managedFields, store) and reports its resident set before
//! and after.

use std::io::Write as _;

use kube::ResourceExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use sentry_tenants::controller::{RunIndex, drop_managed_fields};
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

pub async fn measure(n: usize) -> Section {
    let templates = templates().await;
    let path =
        std::env::temp_dir().join(format!("sentry-tenants-bench-{}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(&templates).unwrap()).unwrap();
    let stripped = run_probe(&path, n, false);
    let kept = run_probe(&path, n, true);
    let _ = std::fs::remove_file(&path);
    let ratio = |p: &ProbeResult| {
        (p.rss_after_kib.saturating_sub(p.rss_before_kib) * 1024) as f64 / p.json_bytes as f64
    };
    let mib = |kib: u64| kib as f64 / 1024.0;
    Section::new(
        format!("Memory, {n} tenants + {n} runs in the caches"),
        vec![
            figure("cache RSS / objects' JSON size", ratio(&stripped), "×")
                .goal(Goal::AtMost(3.0))
                .note(format!(
                    "{:.1} MiB resident for {:.1} MiB of JSON",
                    mib(stripped.rss_after_kib - stripped.rss_before_kib),
                    stripped.json_bytes as f64 / 1024.0 / 1024.0
                )),
            figure("same, keeping managedFields", ratio(&kept), "×").note(if kept.had_managed_fields {
                "what the caches cost before `run` dropped managedFields (nothing reads them)"
            } else {
                "the in-memory API sends no managedFields, so the two are equal here; a real apiserver sends \
                 them, and `run` drops them before caching (nothing reads them)"
            }),
            figure("JSON per object", stripped.json_bytes as f64 / stripped.objects as f64, "bytes")
                .note(format!(
                    "an Active tenant with its history and a finished run, as the API returns them (managedFields present: {})",
                    stripped.had_managed_fields
                )),
        ],
    )
    .remark(
        "Resident set of a child process before and after filling the caches and the run index; the JSON \
         stays alive throughout, so the difference is the caches plus what the allocator keeps.",
    )
}

/// An Active tenant with its status and a finished Provision run, as the API returns them.
async fn templates() -> Templates {
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

fn run_probe(templates: &std::path::Path, n: usize, keep_managed_fields: bool) -> ProbeResult {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .arg("memory-probe")
        .arg(templates)
        .arg(n.to_string())
        .arg(if keep_managed_fields { "keep" } else { "drop" })
        .output()
        .expect("memory probe runs");
    assert!(
        out.status.success(),
        "memory probe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("probe prints its result")
}

/// The child: `memory-probe <templates> <n> <keep|drop>`.
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
    fill(&mut tenant_cache, &tenants, keep, |_| {})?;
    fill(&mut run_cache, &runs, keep, |event| run_index.apply(event))?;
    let rss_after_kib = rss_kib();
    assert_eq!(tenant_cache.as_reader().len(), n);
    assert_eq!(run_cache.as_reader().len(), n);
    assert_eq!(run_index.runs_of("t-00000").len(), 1);
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
    keep_managed_fields: bool,
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
        if !keep_managed_fields {
            drop_managed_fields(&mut obj);
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
