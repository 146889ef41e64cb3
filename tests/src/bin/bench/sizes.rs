//! Sizes: the release binary (as built, and stripped), and the dashboard's wasm and JS as the binary
//! embeds them, raw and gzip-compressed.

use std::path::Path;
use std::process::Command;

use sentry_tenants::web::assets::Site;

use crate::figure;
use crate::report::{Figure, Goal, Section};

/// The browser bundle goal, gzip-compressed (wasm + JS).
const BUNDLE_GOAL_KIB: f64 = 250.0;

pub fn measure(root: &Path) -> Section {
    let mut figures = Vec::new();
    let mut remarks = Vec::new();
    let binary = root.join("target/release/sentry-tenants");
    match std::fs::metadata(&binary) {
        Ok(meta) => {
            figures.push(figure("release binary", mib(meta.len()), "MiB"));
            if let Some(stripped) = stripped_size(&binary) {
                figures.push(figure("release binary, stripped", mib(stripped), "MiB"));
            }
        }
        Err(_) => remarks.push(format!(
            "No release binary at {} (`bash scripts/bench.sh` builds it first).",
            binary.display()
        )),
    }
    let (mut raw, mut gzipped) = (0u64, 0u64);
    for path in Site::iter().filter(|p| p.starts_with("pkg/")) {
        let file = Site::get(&path).expect("listed file");
        let size = file.data.len() as u64;
        let gz = gzip_size(&file.data);
        raw += size;
        gzipped += gz;
        figures.push(
            figure(format!("{path}"), kib(size), "KiB")
                .note(format!("gzip -9: {:.1} KiB", kib(gz))),
        );
    }
    let bundle: Figure = figure("wasm + JS, gzip -9", kib(gzipped), "KiB")
        .goal(Goal::AtMost(BUNDLE_GOAL_KIB))
        .note(format!("raw {:.1} KiB", kib(raw)))
        .why_missed(
            "docs/benchmarks.md: what the module is made of, and each thing tried with its figure",
        );
    figures.push(bundle);
    remarks.push(TRIED.to_owned());
    Section::new("Sizes", figures).remark(remarks.join(" "))
}

/// Where the bundle's history is told: what it was made of, and what was tried with its figure (a
/// record of past measurements, so it lives in the docs, not in every new report).
const TRIED: &str = "What the module is made of and what was tried to shrink it, each with the figure it \
measured then: [docs/benchmarks.md](docs/benchmarks.md#the-dashboards-browser-bundle).";

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0 / 1024.0
}

fn kib(bytes: u64) -> f64 {
    bytes as f64 / 1024.0
}

fn stripped_size(binary: &Path) -> Option<u64> {
    let out = std::env::temp_dir().join(format!("sentry-tenants-stripped-{}", std::process::id()));
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(binary)
        .status()
        .ok()?
        .success();
    let size = std::fs::metadata(&out).ok().map(|m| m.len());
    let _ = std::fs::remove_file(&out);
    ok.then_some(size).flatten()
}

fn gzip_size(data: &[u8]) -> u64 {
    use std::io::Write as _;
    let mut child = Command::new("gzip")
        .args(["-9", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip runs");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().expect("gzip output");
    writer.join().unwrap().expect("gzip input");
    out.stdout.len() as u64
}
