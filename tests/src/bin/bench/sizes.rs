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

/// The bundle against its goal: what it was made of, and each thing tried, every figure measured the
/// same way (the `wasm-release` profile, wasm-bindgen as `server/build.rs` runs it, wasm + JS through
/// gzip -9), on 2026-12-02. The figure above is the bundle as built now.
const TRIED: &str = "\
**Before: the whole app hydrated, 468 KiB** (at 26b8564). What that module was (twiggy, by crate, of the \
code before wasm-bindgen): Leptos' view layer `tachys` 25 % (its generic render and hydrate code is \
instantiated once per view shape: every page's tuple of children is its own type), Rust's `core`/`alloc`/`std` \
15 %, the reactive runtime `reactive_graph` 11 %, `serde_json` 8 % (the server functions' answers and the \
resources' hydration data), `jiff` 3.5 %, the router 2 %, the app's own functions 1.5 %, wasm-bindgen, \
js-sys and web-sys 5 %. \
**Tried on it:** `opt-level = \"s\"` 528 KiB; without `console_error_panic_hook` 467 KiB; Debian's `wasm-opt` \
108 `-Oz` 508 KiB; a current binaryen (132, from npm) `-Oz` 503 KiB, `-Os` 502 KiB, `-O1` 462 KiB (it shrinks the \
raw module but the result compresses worse); **a smaller wire format**: the server functions' answers in \
postcard 468 KiB (−0.5), and the resources' hydration data through `serde-wasm-bindgen` as well 466 KiB \
(−2.4): `serde_json` was only its own 8 %, and the binary codecs bring their own code. None kept. \
**Leptos islands, kept: 147 KiB.** The server renders every page; the browser runs no page view: it loads \
the next page's HTML (or, when the event stream announces a change, the current page's) and puts its \
`<main>` in place, and the new tenant's name fields, checked as typed, are the one island \
(`app/src/browser/`). On top of it: **fewer generic views**, down to none (the name check as plain DOM \
code instead of the island, so no Leptos view and no reactive runtime in the module) 118 KiB; and **a \
smaller wire format** there (the actions' JSON answer read by the browser's `JSON.parse` instead of \
`serde_json`) 105 KiB with no island, 146 KiB with it (the island's props still need `serde_json`); \
binaryen 132 `-Oz` on the islands build 143 KiB. Not kept: the goal is met with room, and 42 KiB is what \
keeps the interactive part a Leptos component rather than hand-written DOM code.";

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
