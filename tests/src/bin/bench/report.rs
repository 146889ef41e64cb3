//! Figures, goals, and the two renderings: Markdown for people, JSON for tools.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

/// A goal a figure must meet: at most or at least `target`.
#[derive(Debug, Clone, Copy, Serialize)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    fn met(self, value: f64) -> bool {
        match self {
            Goal::AtMost(t) => value <= t,
            Goal::AtLeast(t) => value >= t,
        }
    }
    fn describe(self, unit: &str) -> String {
        match self {
            Goal::AtMost(t) => format!("≤ {} {unit}", number(t)),
            Goal::AtLeast(t) => format!("≥ {} {unit}", number(t)),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub goal: Option<Goal>,
    pub met: Option<bool>,
    pub note: String,
}

impl Figure {
    pub fn new(name: impl Into<String>, value: f64, unit: &str) -> Self {
        Self {
            name: name.into(),
            value,
            unit: unit.to_owned(),
            goal: None,
            met: None,
            note: String::new(),
        }
    }
    pub fn goal(mut self, goal: Goal) -> Self {
        self.met = Some(goal.met(self.value));
        self.goal = Some(goal);
        self
    }
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }
    /// Why the goal is out of reach, said in the report only when it was missed.
    pub fn why_missed(mut self, why: &str) -> Self {
        if self.met == Some(false) {
            self.note = if self.note.is_empty() {
                format!("**Missed:** {why}")
            } else {
                format!("{}. **Missed:** {why}", self.note)
            };
        }
        self
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub title: String,
    pub figures: Vec<Figure>,
    /// What to know about the figures.
    pub remark: String,
    /// Why the section has no figures: its goals are neither met nor missed, and the report's
    /// header says so rather than "every goal is met".
    pub not_measured: Option<String>,
}

impl Section {
    pub fn new(title: impl Into<String>, figures: Vec<Figure>) -> Self {
        Self {
            title: title.into(),
            figures,
            remark: String::new(),
            not_measured: None,
        }
    }
    /// A section this run could not measure, and why (a sentence without its full stop).
    pub fn not_measured(title: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            not_measured: Some(why.into()),
            ..Self::new(title, Vec::new())
        }
    }
    pub fn remark(mut self, remark: impl Into<String>) -> Self {
        self.remark = remark.into();
        self
    }
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
    pub rustc: String,
}

/// The cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Machine {
    fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let run = |cmd: &str, arg: &str| {
            std::process::Command::new(cmd)
                .arg(arg)
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        Self {
            cpu,
            cores: cores(),
            memory_gib: (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel: run("uname", "-r"),
            rustc: run("rustc", "--version"),
        }
    }
}

/// The checked-out commit, and whether the tree differs from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown (not a git checkout)".to_owned();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if changes.is_empty() => format!("`{head}`"),
        _ => format!("`{head}` + uncommitted changes"),
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub date: String,
    /// The commit measured, `+ uncommitted changes` when the tree differed from it.
    pub commit: String,
    pub command: &'static str,
    pub machine: Machine,
    pub duration_seconds: f64,
    pub sections: Vec<Section>,
}

impl Report {
    pub fn new(sections: Vec<Section>, took: Duration) -> Self {
        Self {
            date: jiff::Timestamp::now()
                .strftime("%Y-%m-%d %H:%M UTC")
                .to_string(),
            commit: commit(),
            command: "bash scripts/bench.sh",
            machine: Machine::read(),
            duration_seconds: took.as_secs_f64().round(),
            sections,
        }
    }

    pub fn json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(self)? + "\n")
    }

    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(out, "# Benchmarks\n");
        let _ = writeln!(
            out,
            "Generated by `{}` at commit {} on {} in {:.0} s ({} cores of {}, {} GiB, Linux {}, {}). \
             Every timing is set beside a baseline measured in the same run on the same machine; \
             the ratios are the figures to compare across machines. Machine-readable: `BENCHMARKS.json`.\n",
            self.command,
            self.commit,
            self.date,
            self.duration_seconds,
            m.cores,
            m.cpu,
            m.memory_gib,
            m.kernel,
            m.rustc
        );
        let missed: Vec<String> = self
            .sections
            .iter()
            .flat_map(|s| {
                s.figures
                    .iter()
                    .filter(|f| f.met == Some(false))
                    .map(move |f| format!("{} — {}", s.title, f.name))
            })
            .collect();
        let not_measured: Vec<&str> = self
            .sections
            .iter()
            .filter(|s| s.not_measured.is_some())
            .map(|s| s.title.as_str())
            .collect();
        let _ = writeln!(out, "{}\n", verdict(&missed, &not_measured));
        for s in &self.sections {
            let _ = writeln!(out, "## {}\n", s.title);
            if let Some(why) = &s.not_measured {
                let _ = writeln!(out, "Not measured: {why}.\n");
            }
            if !s.remark.is_empty() {
                let _ = writeln!(out, "{}\n", s.remark);
            }
            if s.figures.is_empty() {
                continue;
            }
            let _ = writeln!(out, "| figure | value | goal | note |");
            let _ = writeln!(out, "|---|---:|---|---|");
            for f in &s.figures {
                let goal = match (f.goal, f.met) {
                    (Some(g), Some(true)) => format!("{} ✓", g.describe(&f.unit)),
                    (Some(g), _) => format!("{} ✗ missed", g.describe(&f.unit)),
                    (None, _) => String::new(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {} {} | {} | {} |",
                    f.name,
                    number(f.value),
                    f.unit,
                    goal,
                    f.note
                );
            }
            let _ = writeln!(out);
        }
        out
    }
}

/// The report's first line: the goals missed, else that every goal is met — only of the goals
/// measured when a section was not.
fn verdict(missed: &[String], not_measured: &[&str]) -> String {
    let goals = if !missed.is_empty() {
        format!("**Goals missed:** {}.", missed.join("; "))
    } else if not_measured.is_empty() {
        "**Every goal is met.**".to_owned()
    } else {
        "**Every goal measured is met.**".to_owned()
    };
    if not_measured.is_empty() {
        goals
    } else {
        format!(
            "{goals} **Not measured** (this report is incomplete): {}.",
            not_measured.join("; ")
        )
    }
}

/// A number as people read it: integers without decimals, small values with three significant digits.
pub fn number(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        let s = format!("{}", v as i64);
        group_thousands(&s)
    } else if v.abs() >= 100.0 {
        group_thousands(&format!("{v:.0}"))
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn group_thousands(digits: &str) -> String {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", digits),
    };
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(sections: Vec<Section>) -> String {
        Report::new(sections, Duration::ZERO).markdown()
    }

    #[test]
    fn a_report_with_a_section_not_measured_says_so_above_its_goals() {
        let met = || {
            Section::new(
                "A",
                vec![Figure::new("x", 1.0, "×").goal(Goal::AtMost(5.0))],
            )
        };
        let missed = Section::new(
            "B",
            vec![Figure::new("y", 7.0, "×").goal(Goal::AtMost(5.0))],
        );
        let skipped = || Section::not_measured("C", "`wrk` is not installed");

        let whole = report(vec![met()]);
        assert!(whole.contains("\n**Every goal is met.**\n"), "{whole}");
        assert!(!whole.contains("Not measured"), "{whole}");

        let partial = report(vec![met(), skipped()]);
        assert!(
            partial.contains(
                "\n**Every goal measured is met.** **Not measured** (this report is incomplete): C.\n"
            ),
            "{partial}"
        );
        assert!(!partial.contains("Every goal is met"), "{partial}");
        assert!(
            partial.contains("## C\n\nNot measured: `wrk` is not installed.\n"),
            "{partial}"
        );

        let both = report(vec![missed, skipped()]);
        assert!(
            both.contains(
                "\n**Goals missed:** B — y. **Not measured** (this report is incomplete): C.\n"
            ),
            "{both}"
        );
    }

    #[test]
    fn a_section_not_measured_carries_why_in_the_json() {
        let json = Report::new(
            vec![Section::not_measured("C", "no cluster")],
            Duration::ZERO,
        )
        .json()
        .unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["sections"][0]["not_measured"], "no cluster");
        assert_eq!(value["sections"][0]["figures"], serde_json::json!([]));
    }
}
