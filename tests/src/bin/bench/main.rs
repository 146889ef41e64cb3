//! The benchmark runner: `bash scripts/bench.sh` (which builds the release binary and installs `wrk`, then
//! runs this in release). It measures, in one process and one run, each figure next to its own baseline,
//! and writes `BENCHMARKS.md` and `BENCHMARKS.json` at the workspace root.
//!
//! `bench memory-probe <file> <n>` is the memory section's child process (a clean heap to measure).

mod cluster;
mod cpu;
mod dashboard;
mod insights;
mod install;
mod memory;
mod reconcile;
mod report;
mod sizes;
mod sse;
mod static_build;
mod steady;

use std::path::PathBuf;

use report::{Figure, Section};

/// One section (at each of `scales` where it has scales), for `--only`.
fn only(section: &str, scales: &[usize]) -> anyhow::Result<Vec<Section>> {
    let at_scales = |measure: fn(usize) -> std::pin::Pin<Box<dyn Future<Output = Section>>>| {
        sentry_tenants_tests::block_on(async {
            let mut sections = Vec::new();
            for &n in scales {
                sections.push(measure(n).await);
            }
            sections
        })
    };
    Ok(match section {
        "sizes" => vec![sizes::measure(&workspace_root())],
        "static" => vec![static_build::measure(&workspace_root())],
        "insights" => at_scales(|n| {
            Box::pin(async move {
                let fleet = sentry_tenants_tests::fleet::Fleet::with_provision_runs(n).await;
                insights::measure(&fleet.cluster, n).await
            })
        }),
        "dashboard" => at_scales(|n| {
            Box::pin(async move {
                let (_, fleet) = reconcile::measure(n).await;
                fleet.cluster.sync_stores().await;
                dashboard::measure(&fleet.cluster, n).await
            })
        }),
        "steady" => sentry_tenants_tests::block_on(async {
            let n = *scales.last().expect("a scale");
            let (_, fleet) = reconcile::measure(n).await;
            steady_state(fleet, n).await
        }),
        "runs-in-flight" => vec![sentry_tenants_tests::block_on(cluster::cap_sweep())],
        "flood" => vec![sentry_tenants_tests::block_on(cluster::flood())],
        "node" => vec![sentry_tenants_tests::block_on(cluster::measure()).0],
        other => anyhow::bail!(
            "no section {other:?}: sizes, static, insights, dashboard, steady, runs-in-flight, flood, node"
        ),
    })
}

/// The steady state at [`steady::TENANTS`] tenants, copied from `fleet` (converged, `n` tenants), and
/// the dashboard over it; `fleet` is dropped before the pages are loaded.
async fn steady_state(fleet: sentry_tenants_tests::fleet::Fleet, n: usize) -> Vec<Section> {
    if !steady::copies_from(n) {
        return vec![Section::not_measured(
            format!("Steady state, {} tenants", steady::TENANTS),
            format!(
                "copied from the largest scale's fleet, whose size must be a power of ten up to {}; it was {n}",
                steady::TENANTS
            ),
        )];
    }
    eprintln!("bench: steady state at {} tenants", steady::TENANTS);
    let (section, cluster) = steady::measure(&fleet, n).await;
    drop(fleet);
    eprintln!("bench: dashboard at {} tenants", steady::TENANTS);
    let pages = dashboard::measure(&cluster, steady::TENANTS).await;
    vec![section, pages]
}

/// The overview's and tenants page's rendering cost at the largest scale against the smallest, from
/// the dashboard sections already measured (the largest is the steady state's): flat in the number of
/// tenants is the goal.
fn scaling(sections: &[Section], scales: &[usize]) -> Section {
    let (small, large) = (scales[0], *scales.last().unwrap());
    let p50 = |n: usize, page: &str| {
        let title = format!("Dashboard, {n} tenants");
        let name = dashboard::defeated_p50(page);
        sections
            .iter()
            .find(|s| s.title == title)
            .and_then(|s| s.figures.iter().find(|f| f.name == name))
            .map(|f| f.value)
    };
    let figures = ["overview", "tenants page"]
        .iter()
        .filter_map(|page| {
            let (a, b) = (p50(small, page)?, p50(large, page)?);
            Some(
                figure(
                    format!("{page}, page cache defeated: p50 at {large} ÷ p50 at {small}"),
                    b / a,
                    "×",
                )
                .goal(report::Goal::AtMost(dashboard::SCALING_GOAL))
                .note(format!("{b:.2} ms ÷ {a:.2} ms")),
            )
        })
        .collect::<Vec<_>>();
    let title = "Dashboard, flat in the number of tenants";
    if figures.is_empty() {
        return Section::not_measured(
            title,
            "the dashboard sections it reads were not measured (see them)",
        );
    }
    Section::new(title, figures).remark(format!(
        "Read from the dashboard sections above at {small} and {large} tenants."
    ))
}

/// Tenant counts the reconcile and dashboard sections run at.
const SCALES: [usize; 2] = [1_000, 10_000];

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

const USAGE: &str = "usage: bench [--only SECTION] [--scales N,N,…] | memory-probe … | noop-rate …";

/// `--only`'s section and `--scales`' list (the default scales without it). Anything else is refused:
/// the whole report runs for an hour, not something to start by a mistyped flag.
fn options(args: &[String]) -> anyhow::Result<(Option<String>, Vec<usize>)> {
    let (mut only, mut scales) = (None, SCALES.to_vec());
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next();
        match (flag.as_str(), value) {
            ("--only", Some(section)) => only = Some(section.clone()),
            ("--scales", Some(list)) => {
                scales = list
                    .split(',')
                    .map(|n| n.parse::<usize>().ok().filter(|n| *n > 0))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        anyhow::anyhow!("--scales {list}: not a list of tenant counts")
                    })?;
            }
            _ => anyhow::bail!("{flag}: not understood\n{USAGE}"),
        }
    }
    Ok((only, scales))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("memory-probe") {
        return memory::probe(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("noop-rate") {
        return static_build::noop_rate(&args[1..]);
    }
    let (only_section, scales) = options(&args)?;
    // `bench --only <section> [--scales …]`: that section alone, printed (BENCHMARKS.md untouched).
    // The cluster sections (runs-in-flight, flood, node) run on the cluster of
    // $SENTRY_TENANTS_E2E_KUBECONFIG; `scripts/bench.sh` names the static section's two builds.
    if let Some(section) = only_section {
        let sections = only(&section, &scales)?;
        let report = report::Report::new(sections, std::time::Duration::ZERO);
        println!("{}", report.markdown());
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut sections: Vec<Section> = Vec::new();
    sentry_tenants_tests::block_on(async {
        for &n in &scales {
            eprintln!("bench: reconcile at {n} tenants");
            let (figures, fleet) = reconcile::measure(n).await;
            sections.push(Section::new(
                format!("Reconcile cost, {n} tenants + {n} runs"),
                figures,
            ));
            eprintln!("bench: dashboard at {n} tenants");
            fleet.cluster.sync_stores().await;
            sections.push(dashboard::measure(&fleet.cluster, n).await);
            sections.push(insights::measure(&fleet.cluster, n).await);
            if n == *scales.last().unwrap() {
                eprintln!("bench: SSE fan-out");
                sections.push(sse::measure(&fleet.cluster).await);
                sections.extend(steady_state(fleet, n).await);
            }
        }
        let mut page_scales = scales.clone();
        page_scales.push(steady::TENANTS);
        sections.push(scaling(&sections, &page_scales));
        eprintln!("bench: install");
        sections.push(install::measure().await);
        eprintln!("bench: real control plane, {} tenants", cluster::TENANTS);
        let (section, sample) = cluster::measure().await;
        sections.push(section);
        eprintln!("bench: runs in flight, {} tenants at once", cluster::BURST);
        sections.push(cluster::cap_sweep().await);
        eprintln!("bench: {} tenants applied at once", cluster::FLOOD);
        sections.push(cluster::flood().await);
        eprintln!("bench: memory at {} tenants", steady::TENANTS);
        sections.push(memory::measure(steady::TENANTS, sample).await);
    });
    eprintln!("bench: sizes");
    sections.push(sizes::measure(&workspace_root()));
    eprintln!("bench: the static build");
    sections.push(static_build::measure(&workspace_root()));
    let report = report::Report::new(sections, started.elapsed());
    let root = workspace_root();
    std::fs::write(root.join("BENCHMARKS.md"), report.markdown())?;
    std::fs::write(root.join("BENCHMARKS.json"), report.json()?)?;
    eprintln!(
        "bench: wrote BENCHMARKS.md and BENCHMARKS.json in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// The fastest and the slowest of `runs` timings of `f`, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// The least disturbed by the rest of the machine: the figure kept.
    pub best: f64,
    pub worst: f64,
}

impl Timings {
    /// The fastest and the slowest of `values` (durations, or any figure where lower is better).
    pub fn of(values: &[f64]) -> Self {
        Self {
            best: values.iter().copied().fold(f64::INFINITY, f64::min),
            worst: values.iter().copied().fold(0.0, f64::max),
        }
    }

    /// Slowest / fastest: how far one repetition can be from another on this machine now. A baseline
    /// whose spread is wide makes every ratio against it noise.
    pub fn spread(&self) -> f64 {
        self.worst / self.best
    }
}

pub async fn timings<F, Fut>(runs: usize, mut f: F) -> Timings
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (mut best, mut worst) = (f64::INFINITY, 0f64);
    for _ in 0..runs {
        let t = std::time::Instant::now();
        f().await;
        let secs = t.elapsed().as_secs_f64();
        best = best.min(secs);
        worst = worst.max(secs);
    }
    Timings { best, worst }
}

pub fn figure(name: impl Into<String>, value: f64, unit: &str) -> Figure {
    Figure::new(name, value, unit)
}
