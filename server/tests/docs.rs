//! The README and `docs/` against the repository and the binary, in every run:
//! - every relative link leads to a file and, with a `#fragment`, to one of its headings as GitHub
//!   anchors them: a renamed heading or a moved page fails here;
//! - every `sentry-tenants …` command in a shell block is one this binary takes: parsed by its own
//!   command line (clap), so a renamed flag, a dropped subcommand or a value out of range fails here.
//!   (What the commands then do is the other tests' business; the docs' YAML is applied to the real
//!   apiserver by the cluster tier's `api_rules`.)
//! - every code block is accounted for: run or admitted by a named test, or listed with the reason it
//!   is not. A new block fails until it is one or the other; a listed block that is gone fails too.

use std::path::{Path, PathBuf};

use clap::Parser as _;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pages checked: the README and every page of `docs/`.
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

/// The logical lines of the shell blocks (```sh, ```bash, ```console or unmarked) of a Markdown
/// text: continuations joined, a `$ ` prompt and trailing comments dropped.
fn shell_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fence: Option<String> = None;
    let mut pending = String::new();
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(lang.trim().to_owned()),
            };
            continue;
        }
        let Some(lang) = &fence else { continue };
        if !matches!(lang.as_str(), "sh" | "bash" | "console" | "") {
            continue;
        }
        let line = without_comment(line);
        let line = line.trim().strip_prefix("$ ").unwrap_or(line.trim());
        match line.strip_suffix('\\') {
            Some(start) => {
                pending.push_str(start);
                pending.push(' ');
            }
            None => {
                pending.push_str(line);
                lines.push(std::mem::take(&mut pending));
            }
        }
    }
    lines
}

/// The line up to a `#` that starts a shell comment (after a space, outside quotes).
fn without_comment(line: &str) -> &str {
    let (mut single, mut double, mut previous) = (false, false, ' ');
    for (at, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => return &line[..at],
            _ => {}
        }
        previous = c;
    }
    line
}

/// A shell command's words: quotes removed, `$VAR` kept as written.
fn words(command: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in command.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (_, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(word);
    }
    out
}

/// The `sentry-tenants` invocations of a logical line, split at `|`, `&&`, `||` and `;`: their
/// arguments.
fn invocations(line: &str) -> Vec<Vec<String>> {
    line.split(['|', ';'])
        .flat_map(|part| part.split("&&"))
        .map(words)
        .filter(|w| {
            w.first()
                .is_some_and(|p| p.rsplit('/').next() == Some("sentry-tenants"))
        })
        .map(|w| w[1..].to_vec())
        .collect()
}

#[test]
fn the_reader_finds_commands_as_a_shell_would() {
    let markdown = "\
text `sentry-tenants inline --ignored`
```sh
printf '%s' \"$P\" | sentry-tenants install \\
  --image 'r/x:v1' \\
  --clickhouse-admin-password-stdin    # a comment
$ target/debug/sentry-tenants check -n ns && sentry-tenants version --client
echo '# not a comment' sentry-tenants
```
```yaml
command: sentry-tenants ignored
```
";
    let found: Vec<Vec<String>> = shell_lines(markdown)
        .iter()
        .flat_map(|l| invocations(l))
        .collect();
    let expected: Vec<Vec<&str>> = vec![
        vec![
            "install",
            "--image",
            "r/x:v1",
            "--clickhouse-admin-password-stdin",
        ],
        vec!["check", "-n", "ns"],
        vec!["version", "--client"],
    ];
    assert_eq!(found, expected);
}

#[test]
fn every_sentry_tenants_command_in_the_readme_and_docs_parses() {
    let mut refused = Vec::new();
    let mut checked = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        for line in shell_lines(&text) {
            for args in invocations(&line) {
                let argv = std::iter::once("sentry-tenants".to_owned()).chain(args.iter().cloned());
                match sentry_tenants::cli::Cli::try_parse_from(argv) {
                    Ok(_) => checked.push(format!("{name}: {}", args.join(" "))),
                    Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {}
                    Err(e) => {
                        refused.push(format!("{name}: sentry-tenants {}\n  {e}", args.join(" ")))
                    }
                }
            }
        }
    }
    assert!(
        refused.is_empty(),
        "commands the CLI refuses:\n{}",
        refused.join("\n")
    );
    // The README's install and the install guide's are among them: the reader found the blocks.
    for wanted in [
        "README.md: install --push-image",
        "docs/install.md: install --image",
        "docs/install.md: check --pre",
    ] {
        assert!(
            checked.iter().any(|c| c.starts_with(wanted)),
            "{wanted} not found among:\n{}",
            checked.join("\n")
        );
    }
}

/// A fenced block: its page, the heading it is under, its language.
fn blocks() -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for path in pages() {
        let page = path.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut heading = String::new();
        let mut fenced = false;
        for line in text.lines() {
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
