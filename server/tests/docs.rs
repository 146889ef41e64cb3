//! The README and `docs/` against the repository and the binary, in every run:
//! - every relative link leads to a file and, with a `#fragment`, to one of its headings as GitHub
//!   anchors them: a renamed heading or a moved page fails here;
//! - every `sentry-tenants …` command in a shell block is one this binary takes: parsed by its own
//!   command line (clap), so a renamed flag, a dropped subcommand or a value out of range fails here.
//!   (What the commands then do is the other tests' business; the docs' YAML is applied to the real
//!   apiserver by the cluster tier's `api_rules`.)

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
