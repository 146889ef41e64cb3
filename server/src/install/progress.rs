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
        Self::for_stream(std::io::stderr().is_terminal())
    }

    /// A spinner where a person watches a terminal; where nobody does (a CI log, a pipe), lines: a
    /// spinner's output would be hidden there, its ✓ lines with it.
    fn for_stream(is_terminal: bool) -> Self {
        if !is_terminal {
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

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::{ProgressBar, ProgressDrawTarget, TermLike};

    use super::Progress;

    /// A terminal that keeps the lines written to it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.0.lock().unwrap().push(s.to_owned());
            Ok(())
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.0.lock().unwrap().push(s.to_owned());
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_finished_step_stays_on_the_terminal_as_a_tick_line_and_the_spinner_goes() {
        let screen = Screen::default();
        let bar = ProgressBar::with_draw_target(
            None,
            ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        let spinner = Progress::Spinner(bar.clone());
        spinner.done("CRDs established");
        assert!(
            screen
                .0
                .lock()
                .unwrap()
                .iter()
                .any(|l| l == "✓ CRDs established"),
            "{:?}",
            screen.0.lock().unwrap()
        );
        assert!(!bar.is_finished());
        spinner.finish();
        assert!(bar.is_finished());
    }

    #[test]
    fn a_terminal_gets_a_spinner_and_anything_else_plain_lines() {
        assert!(matches!(Progress::for_stream(false), Progress::Lines));
        let terminal = Progress::for_stream(true);
        assert!(matches!(terminal, Progress::Spinner(_)));
        terminal.finish();
    }

    #[test]
    fn a_step_becomes_the_spinners_message() {
        let spinner = Progress::Spinner(ProgressBar::hidden());
        spinner.step("waiting for the CRDs to be established");
        let Progress::Spinner(bar) = &spinner else {
            unreachable!()
        };
        assert_eq!(bar.message(), "waiting for the CRDs to be established");
    }
}
