//! What the installer tells a person while it works: a spinner on a terminal, plain lines elsewhere
//! (CI logs), nothing in tests.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

pub enum Progress {
    Spinner(ProgressBar),
    Lines,
    Quiet,
}

impl Progress {
    pub fn for_stderr() -> Self {
        if !std::io::stderr().is_terminal() {
            return Self::Lines;
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        Self::Spinner(bar)
    }

    /// Something in progress: replaces the spinner's message (not printed as a line, it changes too often).
    pub fn step(&self, message: &str) {
        if let Self::Spinner(bar) = self {
            bar.set_message(message.to_owned());
        }
    }

    /// Something finished: a permanent ✓ line.
    pub fn done(&self, message: &str) {
        match self {
            Self::Spinner(bar) => bar.println(format!("✓ {message}")),
            Self::Lines => eprintln!("✓ {message}"),
            Self::Quiet => {}
        }
    }

    pub fn finish(&self) {
        if let Self::Spinner(bar) = self {
            bar.finish_and_clear();
        }
    }
}
