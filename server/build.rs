//! Builds the dashboard's browser half — the `app` crate compiled to wasm with the `hydrate` feature,
//! plus its JS glue (wasm-bindgen as a library) — and gathers it with `assets/` into `$OUT_DIR/site`,
//! which the binary embeds. A plain `cargo build` produces everything; nothing is downloaded.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const APP: &str = "sentry-tenants-app";
const WASM_FILE: &str = "sentry_tenants_app.wasm";
const OUTPUT_NAME: &str = "sentry_tenants_app";
const TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let workspace = manifest_dir.parent().unwrap().to_path_buf();
    for watched in [
        "app/src",
        "app/Cargo.toml",
        "core/src",
        "core/Cargo.toml",
        "assets",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!(
            "cargo::rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let site = out_dir.join("site");
    let _ = std::fs::remove_dir_all(&site);
    std::fs::create_dir_all(site.join("pkg")).unwrap();

    ensure_wasm_target();
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let started = Instant::now();
    let wasm = build_wasm(&workspace, release);
    let built = started.elapsed();
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&wasm)
        .web(true)
        .expect("web target")
        .out_name(OUTPUT_NAME)
        .typescript(false)
        // Function names are half the release module (1.3 of 2.6 MB) and only help a debugger.
        .remove_name_section(release)
        .remove_producers_section(release)
        .generate(site.join("pkg"))
        .unwrap_or_else(|e| panic!("wasm-bindgen failed on {}: {e}", wasm.display()));
    copy_dir(&workspace.join("assets"), &site.join("assets"));

    let size = |f: &str| {
        std::fs::metadata(site.join("pkg").join(f))
            .map(|m| m.len() / 1024)
            .unwrap_or(0)
    };
    println!(
        "cargo::warning=dashboard bundle ({}): wasm {} KiB, js {} KiB; wasm built in {:.0?}, bindgen {:.0?}",
        if release { "wasm-release" } else { "dev" },
        size(&format!("{OUTPUT_NAME}_bg.wasm")),
        size(&format!("{OUTPUT_NAME}.js")),
        built,
        started.elapsed() - built,
    );
}

/// The wasm target must be installed (RUSTUP_AUTO_INSTALL=0 stops rustup doing it on demand).
fn ensure_wasm_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let libdir = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output();
    let installed = libdir
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|dir| dir.exists());
    if !installed {
        panic!(
            "the {TARGET} target is not installed, so the dashboard cannot be built: run `bash scripts/setup.sh` \
             (or `rustup target add {TARGET}`)"
        );
    }
}

/// `cargo build -p sentry-tenants-app --lib --target wasm32-unknown-unknown --features hydrate`, in a
/// target dir of its own (the outer build holds a lock on ours) and without the outer build's flags
/// and wrappers, which are meant for the host.
fn build_wasm(workspace: &Path, release: bool) -> PathBuf {
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("wasm");
    let profile = if release { "wasm-release" } else { "dev" };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--locked",
            "-p",
            APP,
            "--lib",
            "--target",
            TARGET,
            "--features",
            "hydrate",
            "--profile",
            profile,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .expect("running cargo for the wasm build");
    assert!(
        status.success(),
        "building the dashboard's wasm bundle failed (see the errors above)"
    );
    let dir = if release { "wasm-release" } else { "debug" };
    target_dir.join(TARGET).join(dir).join(WASM_FILE)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap();
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()));
        } else if path.file_name().is_some_and(|n| n != "README.md") {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap();
        }
    }
}
