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
            "the paragraph above: what the module is made of, and each thing tried with its figure",
        );
    figures.push(bundle);
    remarks.push(TRIED.to_owned());
    Section::new("Sizes", figures).remark(remarks.join(" "))
}

/// The bundle against its goal: what it is made of and what was tried, each measured the same way
/// (the `wasm-release` profile, wasm-bindgen as `server/build.rs` runs it, wasm + JS through gzip -9),
/// on 2026-12-02 at commit 26b8564, when the bundle measured 468 KiB (it was 386 KiB before the charts,
/// the limits forms, the accessibility work and the permission-aware buttons).
const TRIED: &str = "\
**What the module is** (twiggy, by crate, of the code before wasm-bindgen): Leptos' view layer `tachys` 25 % \
(its generic render and hydrate code is instantiated once per view shape: every page's tuple of children is \
its own type), Rust's `core`/`alloc`/`std` 15 %, the reactive runtime `reactive_graph` 11 %, `serde_json` 8 % \
(the server functions' answers and the resources' hydration data), `jiff` 3.5 % (timestamps for ages and \
countdowns), the router 2 %, the app's own functions 1.5 %, wasm-bindgen, js-sys and web-sys 5 %. \
**Tried, wasm + JS gzip -9:** as built (`opt-level = \"z\"`, fat LTO, one codegen unit, `panic = \"abort\"`, \
names and producers stripped) **468 KiB**; `opt-level = \"s\"` 528 KiB (worse, not kept); without \
`console_error_panic_hook` 467 KiB (1 KiB, not worth losing panic messages); Debian's `wasm-opt` 108 `-Oz` \
after wasm-bindgen 508 KiB (worse: that binaryen predates the features rustc's output uses; a current \
binaryen is not packaged here, and the `wasm-opt` crate builds binaryen from C++ on every cold build). \
**Not yet tried, and what it would take:** Leptos islands — only the interactive parts (forms, confirmations, \
the live refresh) become wasm, the pages' views stay on the server; it removes most of the `tachys` share and \
the router, but the live refresh must then re-fetch server-rendered HTML instead of data. A smaller wire \
format (a binary codec for the server functions and the hydration data) would remove most of the \
`serde_json` share. Each is to be measured here before it is claimed.";

fn mib(bytes: u64) -> f64 {
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
