//! The layers point one way. Read from the source: every `crate::…` and `super::…` path in a file
//! (its test module left out) is resolved to the file that defines it, and the rules below are
//! checked on those edges. A new edge against a rule, or a new circle, fails here with its files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The files under `server/src`, as paths relative to it (`controller/tenant.rs`).
fn source_files() -> BTreeSet<String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap();
                out.insert(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeSet::new();
    walk(&root, &root, &mut out);
    out
}

/// The file that defines the longest prefix of `path` (module segments) that names one.
fn resolve(files: &BTreeSet<String>, path: &[&str]) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let stem = path[..n].join("/");
        [format!("{stem}.rs"), format!("{stem}/mod.rs")]
            .into_iter()
            .find(|f| files.contains(f))
    })
}

/// Lowercase path segments following `prefix` (`crate::` or `super::`) in `code`, one list per use;
/// a braced group (`super::{a, b::c}`) gives one list per name in it.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let is_segment = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The items of the group at its own depth: `{a, b::{c, d}, e}` → a, b, e.
            let (mut depth, mut start) = (0usize, 0usize);
            let mut items = Vec::new();
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        items.push(&group[start..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            for item in items {
                let segs: Vec<&str> = item
                    .trim()
                    .split("::")
                    .take_while(|s| !s.is_empty() && s.chars().all(is_segment))
                    .collect();
                if !segs.is_empty() {
                    out.push(segs);
                }
            }
            continue;
        }
        let mut segs = Vec::new();
        let mut tail = rest;
        loop {
            let end = tail.find(|c: char| !is_segment(c)).unwrap_or(tail.len());
            if end == 0 {
                break;
            }
            segs.push(&tail[..end]);
            match tail[end..].strip_prefix("::") {
                Some(next) => tail = next,
                None => break,
            }
        }
        if !segs.is_empty() {
            out.push(segs);
        }
    }
    out
}

/// file → the files it uses.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let files = source_files();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        // The module path of the file's parent (`controller/tenant.rs` → ["controller"]).
        let module: Vec<&str> = file
            .trim_end_matches(".rs")
            .split('/')
            .filter(|s| *s != "mod" && *s != "lib" && *s != "main")
            .collect();
        let parent = &module[..module.len().saturating_sub(1)];
        let mut used = BTreeSet::new();
        for segs in paths_after(code, "crate::") {
            used.extend(resolve(&files, &segs));
        }
        for segs in paths_after(code, "super::") {
            let full: Vec<&str> = parent.iter().copied().chain(segs).collect();
            used.extend(resolve(&files, &full));
        }
        used.remove(file);
        out.insert(file.clone(), used);
    }
    out
}

fn top(file: &str) -> &str {
    file.split('/').next().unwrap().trim_end_matches(".rs")
}

#[test]
fn the_reader_finds_what_a_file_uses() {
    let code = "use super::{Context, reclaim::{self}, attempts};\nlet x = crate::names::TenantName::parse(a);\nfoo::crate::no;";
    assert_eq!(
        paths_after(code, "super::"),
        [vec!["reclaim"], vec!["attempts"]]
    );
    assert_eq!(paths_after(code, "crate::"), [vec!["names"]]);
    let e = edges();
    assert!(e["controller/tenant/next_run.rs"].contains("controller/attempts.rs"));
    assert!(e["install/apply.rs"].contains("install/rollout.rs"));
    assert!(e["cli/commands.rs"].contains("web/local.rs"));
}

#[test]
fn no_two_files_use_each_other() {
    let e = edges();
    let circles: Vec<String> = e
        .iter()
        .flat_map(|(a, used)| {
            used.iter()
                .filter(|b| *a < **b && e.get(*b).is_some_and(|u| u.contains(a)))
                .map(move |b| format!("{a} <-> {b}"))
        })
        .collect();
    assert!(circles.is_empty(), "{circles:#?}");
}

#[test]
fn the_layers_point_down() {
    // Each top-level module, and the modules it must never use.
    let rules: &[(&str, &[&str])] = &[
        (
            "crd",
            &[
                "controller",
                "install",
                "web",
                "provision",
                "cli",
                "operator",
                "config",
            ],
        ),
        ("install", &["web", "cli", "operator"]),
        ("web", &["install", "cli"]),
        (
            "controller",
            &["install", "web", "cli", "operator", "provision"],
        ),
        (
            "provision",
            &["install", "web", "cli", "operator", "controller"],
        ),
        (
            "flags",
            &[
                "install",
                "web",
                "cli",
                "operator",
                "controller",
                "provision",
                "config",
            ],
        ),
        (
            "telemetry",
            &["controller", "web", "install", "cli", "operator"],
        ),
        (
            "config",
            &["controller", "install", "web", "cli", "operator"],
        ),
        // The image is made from the binary alone: nothing of the cluster's or the operator's.
        (
            "image",
            &[
                "controller",
                "install",
                "web",
                "cli",
                "operator",
                "provision",
                "config",
                "cluster",
            ],
        ),
        (
            "tls",
            &[
                "controller",
                "install",
                "web",
                "cli",
                "operator",
                "provision",
                "config",
                "image",
                "cluster",
            ],
        ),
    ];
    let e = edges();
    let mut wrong = Vec::new();
    let mut between: BTreeSet<(String, String)> = BTreeSet::new();
    for (file, used) in &e {
        for u in used {
            let (from, to) = (top(file), top(u));
            if from != to {
                between.insert((from.to_owned(), to.to_owned()));
            }
            if let Some((_, never)) = rules.iter().find(|(m, _)| *m == from)
                && never.contains(&to)
            {
                wrong.push(format!("{file} uses {u}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    let circles: Vec<String> = between
        .iter()
        .filter(|(a, b)| a < b && between.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    assert!(
        circles.is_empty(),
        "modules that use each other: {circles:#?}"
    );
}

/// Wall-clock time decides behaviour (retry delays, TTLs, Lease expiry, rotation grace), so it comes
/// from `clock::Clock`, which tests move instead of sleeping. Only the clock itself and the command
/// line (a person's command happens now, and hands that instant down) may read it directly.
#[test]
fn wall_clock_time_comes_from_the_clock_or_the_command_line() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let reads = [
        "Timestamp::now()",
        "SystemTime::now()",
        "Utc::now()",
        "Zoned::now()",
    ];
    let mut direct = Vec::new();
    for file in source_files() {
        if file == "clock.rs" || file.starts_with("cli/") {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if reads.iter().any(|r| line.contains(r)) && !line.trim_start().starts_with("//") {
                direct.push(format!("{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        direct.is_empty(),
        "read the time from the Clock:\n{}",
        direct.join("\n")
    );
}

/// The dashboard's crate is the web layer's: the CRDs, the reconcilers, the provisioner and the
/// installer never reach up into the UI (the rules they share with it live in the core crate). Only
/// `web/` and the process wiring (`operator.rs`, which starts the dashboard) use it.
#[test]
fn only_the_web_layer_uses_the_dashboard_crate() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let users: Vec<String> = source_files()
        .into_iter()
        .filter(|file| {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            text.contains("sentry_tenants_app")
        })
        .filter(|file| !file.starts_with("web/") && file != "operator.rs")
        .collect();
    assert!(users.is_empty(), "the dashboard crate used by {users:?}");
}
