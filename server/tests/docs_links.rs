//! Every relative link in the README and `docs/` leads somewhere: the file exists, and a `#fragment`
//! names a heading of it as GitHub renders its anchor. A renamed heading or a moved page fails here.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pages whose links are checked: the README and every page of `docs/`, plus the reports they
/// link to.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The targets of the inline links `[text](target)` of a Markdown text, outside code blocks.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to '-', punctuation other than '-' and
/// '_' dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    let mut in_code = false;
    markdown
        .lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            }
            !in_code
        })
        .filter_map(|line| line.strip_prefix('#'))
        .map(|h| anchor(h.trim_start_matches('#')))
        .collect()
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor(" The local cluster (`scripts/cluster.sh`)"),
        "the-local-cluster-scriptsclustersh"
    );
    assert_eq!(
        anchor("ClickHouse names: one prefix per install"),
        "clickhouse-names-one-prefix-per-install"
    );
    assert_eq!(anchor("Runs in flight"), "runs-in-flight");
    assert_eq!(
        link_targets("see [a](b.md#c) and [d](https://e) `x`\n```\n[no](code.md)\n```\n"),
        ["b.md#c", "https://e"]
    );
}

#[test]
fn every_relative_link_of_the_readme_and_docs_leads_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let name = page
                .strip_prefix(root())
                .unwrap_or(&page)
                .display()
                .to_string();
            if !file.exists() {
                broken.push(format!("{name}: {target} (no such file)"));
                continue;
            }
            if !fragment.is_empty() {
                let linked = std::fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&linked).iter().any(|a| a == fragment) {
                    broken.push(format!("{name}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} links found: is the reader broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
