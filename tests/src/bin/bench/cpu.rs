//! Where a section's CPU time went on this machine: the machine's busy time (`/proc/stat`) and its
//! parts — each process `scripts/cluster.sh` started, containerd with its shims and runc, the operator's
//! pod, the provisioning Jobs' pods (the node's cgroups) and this benchmark — so that a throughput below
//! its ideal reads as a full machine or not.

use std::path::{Path, PathBuf};

use sentry_tenants_tests::control_plane::ControlPlane;

/// CPU seconds spent up to one moment: the machine's, and each part's.
pub struct CpuClock {
    busy: f64,
    idle: f64,
    parts: Vec<(String, f64)>,
}

/// CPU seconds spent between two readings.
pub struct CpuSpent {
    /// Every core's busy time, summed.
    pub busy: f64,
    /// Busy time over busy and idle time: how full the machine was.
    pub share_busy: f64,
    /// The parts, most first, and what no part accounts for last.
    pub parts: Vec<(String, f64)>,
}

/// `/proc`'s clock ticks per second.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the C library; it has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

/// The machine's busy and idle seconds, summed over its cores.
fn machine_seconds() -> (f64, f64) {
    let (busy, idle) = machine_ticks(&std::fs::read_to_string("/proc/stat").expect("/proc/stat"));
    (busy / ticks_per_second(), idle / ticks_per_second())
}

/// Busy and idle ticks from `/proc/stat`'s first line: user nice system idle iowait irq softirq steal
/// (guest time is inside user's already).
fn machine_ticks(stat: &str) -> (f64, f64) {
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .expect("/proc/stat starts with the cpu line")
        .split_whitespace()
        .map(|t| t.parse().expect("a tick count"))
        .collect();
    let busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7];
    (busy, ticks[3] + ticks[4])
}

/// A process's CPU seconds, with those of the children it has waited for; 0 when it is gone.
fn process_seconds(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(0.0, |stat| process_ticks(&stat) / ticks_per_second())
}

/// utime + stime + cutime + cstime of a `/proc/<pid>/stat` line: its 14th to 17th fields.
fn process_ticks(stat: &str) -> f64 {
    sentry_tenants_tests::processes::fields_after_command(stat)
        .expect("(comm)")
        .skip(11)
        .take(4)
        .map(|t| t.parse::<f64>().expect("a tick count"))
        .sum()
}

/// A cgroup's CPU seconds (cgroup v1 `cpuacct.usage`, which keeps what its exited processes and removed
/// child cgroups spent).
fn cgroup_seconds(cgroup: &Path) -> f64 {
    std::fs::read_to_string(cgroup.join("cpuacct.usage"))
        .unwrap_or_else(|e| panic!("{}/cpuacct.usage: {e}", cgroup.display()))
        .trim()
        .parse::<f64>()
        .expect("nanoseconds")
        / 1e9
}

impl CpuClock {
    /// Reads the clock now. `operator` is the operator container's cpuacct cgroup.
    pub fn read(plane: &ControlPlane, operator: &Path) -> Self {
        let (busy, idle) = machine_seconds();
        let node = plane.node_cgroup("cpuacct");
        let pods = cgroup_seconds(&node.join("kubepods"));
        let operator = cgroup_seconds(operator);
        let mut parts = vec![
            ("operator pod".to_owned(), operator),
            ("provisioning pods".to_owned(), pods - operator),
            (
                "containerd, its shims and runc".to_owned(),
                cgroup_seconds(&node.join("containerd")),
            ),
            ("this benchmark".to_owned(), process_seconds("self")),
        ];
        for (name, pid) in started_processes(&plane.dir) {
            // containerd's own time is counted in its cgroup, above.
            if name != "containerd" {
                parts.push((name, process_seconds(&pid)));
            }
        }
        Self { busy, idle, parts }
    }

    /// What was spent from `earlier` to this reading.
    pub fn since(&self, earlier: &Self) -> CpuSpent {
        let busy = self.busy - earlier.busy;
        let idle = self.idle - earlier.idle;
        let mut parts: Vec<(String, f64)> = self
            .parts
            .iter()
            .map(|(name, now)| {
                let then = earlier
                    .parts
                    .iter()
                    .find_map(|(n, s)| (n == name).then_some(*s))
                    .unwrap_or(0.0);
                (name.clone(), now - then)
            })
            .collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let accounted: f64 = parts.iter().map(|(_, s)| s).sum();
        parts.push(("the rest".to_owned(), busy - accounted));
        CpuSpent {
            busy,
            share_busy: busy / (busy + idle),
            parts,
        }
    }
}

impl CpuSpent {
    /// The parts' seconds each divided by `n`, as a note: "kube-apiserver 0.41 s, etcd 0.20 s, …".
    pub fn per(&self, n: usize) -> String {
        self.parts
            .iter()
            .map(|(name, s)| format!("{name} {:.2} s", s / n as f64))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The processes `scripts/cluster.sh` started (its `pids/` directory): name and pid.
fn started_processes(state: &Path) -> Vec<(String, String)> {
    let dir: PathBuf = state.join("pids");
    let mut found: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|entry| {
            let pid = std::fs::read_to_string(entry.path()).expect("a pid file");
            (
                entry.file_name().to_string_lossy().into_owned(),
                pid.trim().to_owned(),
            )
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_s_time_is_its_own_and_its_waited_for_children_s() {
        // A command with a space and a closing parenthesis of its own; utime 1200, stime 300,
        // cutime 40, cstime 5; the start time (22nd field, 777) is not counted.
        let stat = "4242 (kube) proxy) S 1 4242 4242 0 -1 4194560 9 0 0 0 1200 300 40 5 20 0 12 0 777 \
                    1000 200 18446744073709551615";
        assert_eq!(process_ticks(stat), 1545.0);
    }

    #[test]
    fn the_machine_s_busy_time_leaves_out_idle_and_iowait() {
        let stat = "cpu  100 20 30 5000 70 4 6 1 50 0\ncpu0 50 10 15 2500 35 2 3 0 25 0\n";
        // user, nice, system, irq, softirq, steal; idle and iowait; guest (inside user) left out.
        assert_eq!(machine_ticks(stat), (161.0, 5070.0));
    }
}
