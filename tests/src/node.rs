//! The node's containers as this host sees them: the cluster's node runs here (`scripts/cluster.sh`), so a
//! test can read a container's cgroup and its processes' `/proc` files, the ground truth of what the
//! kubelet, containerd and runc made of a pod spec.

use k8s_openapi::api::core::v1::Pod;

/// The container's cgroup directory in `controller`'s hierarchy on this host (the kubelet's cgroupfs
/// layout: `<root>/kubepods/<qos>/pod<uid>/<container id>`), found by the container's id.
pub fn container_cgroup(pod: &Pod, controller: &str) -> std::path::PathBuf {
    let id = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .as_deref()
        .expect("a running container has an id")
        .trim_start_matches("containerd://")
        .to_owned();
    let uid = pod.metadata.uid.as_deref().unwrap();
    let root = std::path::Path::new("/sys/fs/cgroup").join(controller);
    find_dir(&root, &id, &format!("pod{uid}"))
        .unwrap_or_else(|| panic!("no cgroup {id} of pod {uid} under {}", root.display()))
}

fn find_dir(dir: &std::path::Path, name: &str, parent: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if !entry.file_type().ok()?.is_dir() {
            continue;
        }
        let parent_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if entry.file_name() == name && parent_name == parent {
            return Some(path);
        }
        if let Some(found) = find_dir(&path, name, parent) {
            return Some(found);
        }
    }
    None
}

/// The pids in a cgroup, the container's main process first.
pub fn cgroup_pids(cgroup: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// A field of `/proc/<pid>/status`, e.g. `Uid`.
pub fn proc_status(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The mount options of the process's root, as its own mount namespace sees it.
pub fn root_mount_options(pid: u32) -> String {
    let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    info.lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .rfind(|f| f[4] == "/")
        .map(|f| f[5].to_owned())
        .expect("a root mount")
}

/// The environment a process runs with, as `NAME=value` strings.
pub fn proc_environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/environ: {e}"))
        .split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}
