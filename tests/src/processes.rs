//! Every process a test starts is owned by an [`Owned`] guard, so that nothing a test starts outlives
//! it: dropped — the test passed, failed or panicked — the guard kills the process and everything it
//! started. "Everything" is found two ways, because neither alone is enough: the process's descendants
//! (by parent pid), and every process that carries the guard's mark in its environment, which catches
//! the ones that left the tree: Chromium's crash handler double-forks into a session of its own, its
//! parent pid 1.
//!
//! `scripts/test.sh` marks the whole `cargo test` run the same way ([`RUN_MARK`]) and fails the run on
//! any marked process still alive when cargo ends, should one escape anyway.

use std::collections::BTreeSet;
use std::io;
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Set on every process an [`Owned`] starts (inherited by all it starts in turn), unique per guard.
pub const MARK: &str = "SENTRY_TENANTS_TEST_OWNER";
/// Set by `scripts/test.sh` on the whole `cargo test` run; the script lists and kills what still
/// carries it when cargo ends.
pub const RUN_MARK: &str = "SENTRY_TENANTS_TEST_RUN";

/// A child process and everything it starts, killed when dropped.
pub struct Owned {
    child: Option<Child>,
    mark: String,
}

impl Owned {
    /// Starts `command` with this guard's mark in its environment.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mark = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let child = command.env(MARK, &mark).spawn()?;
        Ok(Self {
            child: Some(child),
            mark,
        })
    }

    pub fn id(&self) -> u32 {
        self.child().id()
    }

    pub fn child(&self) -> &Child {
        self.child
            .as_ref()
            .expect("the child is owned until the guard goes")
    }

    /// The child itself: its pipes, `try_wait`.
    pub fn child_mut(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .expect("the child is owned until the guard goes")
    }

    /// Every live process this guard started, directly or not: the child, its descendants, and
    /// whatever else carries the mark.
    pub fn processes(&self) -> BTreeSet<u32> {
        let mut found = marked(&format!("{MARK}={}", self.mark));
        if let Some(child) = &self.child {
            found.extend(descendants(child.id()));
            if alive(child.id()) {
                found.insert(child.id());
            }
        }
        found
    }

    /// SIGTERM to the child alone (as a pod's deletion sends it), then waits for it to exit by itself;
    /// whatever it leaves behind is killed when the guard goes.
    pub fn terminate(mut self) -> io::Result<ExitStatus> {
        let child = self.child_mut();
        signal(child.id(), libc::SIGTERM);
        child.wait()
    }

    /// Waits for the child to exit and collects its piped output; what it started is killed after,
    /// when the guard goes at the end of this call.
    pub fn wait_with_output(mut self) -> io::Result<Output> {
        let child = self.child.take().expect("owned");
        child.wait_with_output()
    }

    /// Kills every process found, again until none carries the mark (a process forking while it is
    /// killed leaves an orphan that still does), and reaps the child.
    fn kill_all(&mut self) {
        let mut rounds = 0;
        loop {
            let found = self.processes();
            if found.is_empty() || rounds == 5 {
                break;
            }
            rounds += 1;
            for &pid in &found {
                signal(pid, libc::SIGKILL);
            }
            if let Some(child) = &mut self.child {
                let _ = child.wait();
            }
            wait_gone(&found, Duration::from_secs(10));
        }
        if let Some(child) = &mut self.child {
            let _ = child.wait();
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.kill_all();
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with a pid we found alive; a pid gone since then is ESRCH, ignored.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Whether `pid` runs (a zombie, dead but not yet reaped, does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_fields(&stat).map(|(state, _)| state != 'Z' && state != 'X'))
        .unwrap_or(false)
}

/// `(state, parent pid)` from a `/proc/<pid>/stat` line.
fn stat_fields(stat: &str) -> Option<(char, u32)> {
    let mut fields = fields_after_command(stat)?;
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// The fields of a `/proc/<pid>/stat` line after the command name, from the state (the 3rd field) on:
/// the name in parentheses may hold spaces and parentheses itself, so they are read after the last `)`.
pub fn fields_after_command(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

/// Live processes whose environment holds `entry` (`NAME=value`).
pub fn marked(entry: &str) -> BTreeSet<u32> {
    pids()
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == entry.as_bytes()))
                && alive(pid)
        })
        .collect()
}

/// Live descendants of `root`, children first.
pub fn descendants(root: u32) -> BTreeSet<u32> {
    let parents: Vec<(u32, u32)> = pids()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (state, parent) = stat_fields(&stat)?;
            (state != 'Z' && state != 'X').then_some((pid, parent))
        })
        .collect();
    let mut found = BTreeSet::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, parent) in &parents {
            if parent == p && found.insert(pid) {
                frontier.push(pid);
            }
        }
    }
    found
}

/// Waits on each process's exit (a pidfd, readable once it has exited) for at most `within` in all;
/// returns the ones still running then.
pub fn wait_gone(pids: &BTreeSet<u32>, within: Duration) -> BTreeSet<u32> {
    let deadline = Instant::now() + within;
    pids.iter()
        .copied()
        .filter(|&pid| !wait_exit(pid, deadline.saturating_duration_since(Instant::now())))
        .collect()
}

/// Whether `pid` has exited (or never was) within `within`.
fn wait_exit(pid: u32, within: Duration) -> bool {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return true; // ESRCH: gone (and reaped) already
    }
    let fd = fd as libc::c_int;
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = within.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd; the descriptor is ours and closed right after.
    let ready = unsafe { libc::poll(&mut pollfd, 1, millis) };
    unsafe { libc::close(fd) };
    ready > 0 || !alive(pid)
}
