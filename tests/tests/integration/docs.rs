//! The README and docs/ as a newcomer meets them: every relative link leads to a file that exists (and
//! its `#anchor` to a heading of that file), and every code block is accounted for — run or admitted by a
//! named test, or listed here with the reason it is not. A new block fails this test until it is one or
//! the other; a block that is gone fails it too, so the list cannot rot.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every page of docs/, as paths relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(page: &str) -> String {
    std::fs::read_to_string(repo().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"))
}

/// The lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line);
        }
    }
    out
}

/// GitHub's anchor for a heading: lowercase, punctuation but `-` and `_` dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .iter()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| slug(h.trim_start_matches('#').trim()))
        .collect()
}

/// The targets of the page's inline links `[text](target)`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(slug("Runs in flight"), "runs-in-flight");
    assert_eq!(
        slug("The local cluster (`scripts/cluster.sh`)"),
        "the-local-cluster-scriptsclustersh"
    );
    assert_eq!(
        slug("Quick start: the ClickHouse admin account, a tenant in YAML"),
        "quick-start-the-clickhouse-admin-account-a-tenant-in-yaml"
    );
    assert_eq!(
        slug("Verification status — read before trusting"),
        "verification-status--read-before-trusting"
    );
}

/// Links in prose are found, those in code blocks are not, and headings give their anchors.
#[test]
fn links_and_anchors_are_read_as_github_reads_them() {
    let text = "# Top\nSee [a](docs/a.md#runs-in-flight) and [b](#top), [c](https://x.io).\n```sh\n[no](link.md)\n```\n## Runs in flight\n";
    assert_eq!(
        link_targets(text),
        ["docs/a.md#runs-in-flight", "#top", "https://x.io"]
    );
    assert_eq!(
        anchors(text),
        BTreeSet::from(["top".to_owned(), "runs-in-flight".to_owned()])
    );
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        let dir = Path::new(&page).parent().unwrap().to_path_buf();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if file.is_empty() {
                PathBuf::from(&page)
            } else {
                dir.join(file)
            };
            if !repo().join(&file).exists() {
                broken.push(format!("{page}: {target} (no such file)"));
                continue;
            }
            if let Some(anchor) = anchor {
                let linked = std::fs::read_to_string(repo().join(&file)).unwrap_or_default();
                if !anchors(&linked).contains(anchor) {
                    broken.push(format!("{page}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A fenced block: its page, the heading it is under, its language.
fn blocks() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for page in pages() {
        let mut heading = String::new();
        let mut fenced = false;
        for line in read(&page).lines() {
            if let Some(lang) = line.strip_prefix("```") {
                if !fenced {
                    out.push((page.clone(), heading.clone(), lang.to_owned()));
                }
                fenced = !fenced;
            } else if !fenced && line.starts_with('#') {
                heading = line.trim_start_matches('#').trim().to_owned();
            }
        }
    }
    out
}

/// Each block: (page, heading, language), and what runs it — or why nothing does.
const ACCOUNTED: &[(&str, &str, &str, &str)] = &[
    (
        "README.md",
        "sentry-tenants",
        "sh",
        "`.ci/run` runs `bash scripts/test.sh`; `scripts/try.sh` is the main job",
    ),
    (
        "README.md",
        "In sixty seconds",
        "yaml",
        "cluster::api_rules::the_docs_yaml_is_admitted_under_strict_field_validation",
    ),
    (
        "README.md",
        "In sixty seconds",
        "sh",
        "cluster::readme (runs the block as written)",
    ),
    (
        "docs/clickhouse.md",
        "The provisioner (`sentry-tenants provision-tenant`)",
        "console",
        "not run: a transcript of `provision-tenant --dry-run`; every statement the provisioner can generate is parsed by integration::clickhouse_parser",
    ),
    (
        "docs/concepts.md",
        "What it does",
        "console",
        "not run: `kubectl get tenants` output; its columns are cluster::api_rules::kubectl_get_shows_the_printer_columns_and_short_names",
    ),
    (
        "docs/concepts.md",
        "Deleting a tenant",
        "sh",
        "not run: kubectl one-liners reading a finalizer; the reclaim tests read it through the API",
    ),
    (
        "docs/concepts.md",
        "Copies of the credentials where the applications run",
        "yaml",
        "cluster::api_rules::the_docs_yaml_is_admitted_under_strict_field_validation",
    ),
    (
        "docs/concepts.md",
        "Rotation on a schedule",
        "yaml",
        "cluster::api_rules::the_docs_yaml_is_admitted_under_strict_field_validation",
    ),
    (
        "docs/concepts.md",
        "A deleted credentials Secret",
        "yaml",
        "cluster::api_rules::the_docs_yaml_is_admitted_under_strict_field_validation",
    ),
    (
        "docs/install.md",
        "Install, upgrade, check, uninstall",
        "sh",
        "not run as written (registry.example.com, clickhouse.db): the same commands against the test cluster are cluster::readme",
    ),
    (
        "docs/install.md",
        "Consent to credential copies",
        "sh",
        "not run: prints RoleBindings; cluster::consent applies what grant-credentials prints",
    ),
    (
        "docs/install.md",
        "Quick start: the ClickHouse admin account, a tenant in YAML",
        "sql",
        "integration::clickhouse_parser parses each statement",
    ),
    (
        "docs/install.md",
        "Quick start: the ClickHouse admin account, a tenant in YAML",
        "sh",
        "not run as written (clickhouse.db): cluster::readme runs the same install against the test cluster",
    ),
    (
        "docs/install.md",
        "Quick start: the ClickHouse admin account, a tenant in YAML",
        "yaml",
        "cluster::api_rules::the_docs_yaml_is_admitted_under_strict_field_validation",
    ),
    (
        "docs/testing.md",
        "Rehearsing a red run",
        "sh",
        "not run by the suite (it would fail it on purpose): rehearsed by hand, docs/testing.md says when",
    ),
    (
        "docs/testing.md",
        "The local cluster (`scripts/cluster.sh`)",
        "sh",
        "not run as written: the same steps are scripts/try.sh's (the README's main job), and scripts/test.sh starts the cluster with the same script",
    ),
];

#[test]
fn every_code_block_is_run_or_says_why_not() {
    let found: Vec<(String, String, String)> = blocks();
    let listed: Vec<(String, String, String)> = ACCOUNTED
        .iter()
        .map(|(p, h, l, _)| ((*p).to_owned(), (*h).to_owned(), (*l).to_owned()))
        .collect();
    let unaccounted: Vec<_> = found.iter().filter(|b| !listed.contains(b)).collect();
    assert!(
        unaccounted.is_empty(),
        "code blocks nobody runs and no reason given (add them to ACCOUNTED): {unaccounted:#?}"
    );
    let gone: Vec<_> = listed.iter().filter(|b| !found.contains(b)).collect();
    assert!(gone.is_empty(), "listed blocks no page has: {gone:#?}");
}
