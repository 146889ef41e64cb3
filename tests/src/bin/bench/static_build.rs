//! What the static release build costs (`scripts/release.sh`: the musl target, so the binary alone
//! is a whole image): its size and its image's beside the glibc release build's, and the no-op
//! reconcile rate of this bench's own code compiled both ways. With musl's own allocator and copy it
//! ran at under half the glibc rate (0.47× on 2026-12-04; 0.75× with mimalloc, where musl's
//! `memcpy` took a quarter of the time; 0.88× with the copy replaced, where musl's byte-at-a-time
//! `memcmp` was most of the rest), so the `sentry-tenants` library declares mimalloc as the global
//! allocator (of every build since) and `memcopy.rs` for the musl build, and this bench links them
//! too. The rates come from child processes (`bench noop-rate N`), glibc and musl alternating,
//! so the machine's drift falls on both alike; the best of each is kept.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::figure;
use crate::report::{Goal, Section};
use crate::sizes::mib;

/// Tenants (and as many runs) in each child's fleet.
const N: usize = 1000;
/// Children of each build, alternating.
const ROUNDS: usize = 3;
/// No-op passes in each child, the best kept: one pass is a few milliseconds, too short to time once.
const PASSES: usize = 40;
/// The static build keeps at least this share of the glibc build's reconcile rate.
const RATE_GOAL: f64 = 0.95;

/// `bench noop-rate N`: the no-op reconcile rate at N tenants + N runs, printed alone.
pub fn noop_rate(args: &[String]) -> anyhow::Result<()> {
    let n: usize = args.first().map(|a| a.parse()).transpose()?.unwrap_or(N);
    let rate = sentry_tenants_tests::block_on(crate::reconcile::noop_rate(n, PASSES));
    println!("{rate}");
    Ok(())
}

/// The binaries to compare, as `scripts/bench.sh` names them: the static release binary and this
/// bench compiled for the same musl target.
struct Static {
    binary: PathBuf,
    bench: PathBuf,
}

fn from_env() -> Result<Static, String> {
    let path = |var: &str| -> Result<PathBuf, String> {
        let path = std::env::var_os(var)
            .map(PathBuf::from)
            .ok_or_else(|| format!("{var} is not set (`bash scripts/bench.sh` sets it)"))?;
        path.exists()
            .then_some(path.clone())
            .ok_or_else(|| format!("{var}={} does not exist", path.display()))
    };
    Ok(Static {
        binary: path("SENTRY_TENANTS_STATIC_BINARY")?,
        bench: path("SENTRY_TENANTS_STATIC_BENCH")?,
    })
}

pub fn measure(root: &Path) -> Section {
    let title = "Static build (musl) against the glibc release build";
    let built = match from_env() {
        Ok(built) => built,
        Err(why) => {
            return Section::not_measured(title, why);
        }
    };
    let glibc_binary = root.join("target/release/sentry-tenants");
    let glibc_bench = std::env::current_exe().expect("this bench");
    let (mut glibc, mut musl) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        glibc.push(rate_of(&glibc_bench));
        musl.push(rate_of(&built.bench));
    }
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    let spread = |rates: &[f64]| {
        let (lo, hi) = (rates.iter().copied().fold(f64::MAX, f64::min), best(rates));
        100.0 * (hi - lo) / hi
    };
    let (glibc_rate, musl_rate) = (best(&glibc), best(&musl));
    let figures = vec![
        figure("static binary", mib(size(&built.binary)), "MiB")
            .note(format!("glibc release binary {:.1} MiB", mib(size(&glibc_binary)))),
        figure(
            "static binary's image, compressed layer",
            mib(image_layer_bytes(&built.binary)),
            "MiB",
        )
        .note("`image export`: the binary, CA bundle, passwd; nothing else"),
        figure(
            "glibc binary's image, compressed layer",
            mib(image_layer_bytes(&glibc_binary)),
            "MiB",
        )
        .note("`image export`: the binary plus its loader and C libraries from this machine"),
        figure(
            format!("no-op reconciles per second, musl, {N} tenants + {N} runs"),
            musl_rate,
            "/s",
        )
        .note(format!("best of {ROUNDS} processes of {PASSES} passes; spread {:.1} %", spread(&musl))),
        figure(
            format!("no-op reconciles per second, glibc, {N} tenants + {N} runs"),
            glibc_rate,
            "/s",
        )
        .note(format!("best of {ROUNDS} processes of {PASSES} passes; spread {:.1} %", spread(&glibc))),
        figure("musl rate / glibc rate", musl_rate / glibc_rate, "×")
            .goal(Goal::AtLeast(RATE_GOAL))
            .note("the same bench code compiled for both targets, both allocating with mimalloc: our memcpy and memcmp on musl, glibc's on glibc")
            .why_missed("profile both children (`perf record … bench noop-rate 1000`): a libc function musl does slower"),
    ];
    Section::new(title, figures)
}

fn rate_of(bench: &Path) -> f64 {
    let out = Command::new(bench)
        .args(["noop-rate", &N.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bench.display()));
    assert!(
        out.status.success(),
        "{} noop-rate: {}",
        bench.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("noop-rate prints a number")
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The compressed layer of `binary image export`: the archive less its few JSON documents.
fn image_layer_bytes(binary: &Path) -> u64 {
    let archive = std::env::temp_dir().join(format!("st-bench-image-{}.tar", std::process::id()));
    let out = Command::new(binary)
        .args(["image", "export", "-o"])
        .arg(&archive)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let largest = tar_entries(&archive).into_iter().max().unwrap_or(0);
    let _ = std::fs::remove_file(&archive);
    largest
}

/// The sizes of the archive's files (the layer is by far the largest).
fn tar_entries(archive: &Path) -> Vec<u64> {
    let out = Command::new("tar")
        .arg("-tvf")
        .arg(archive)
        .output()
        .expect("tar");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect()
}
