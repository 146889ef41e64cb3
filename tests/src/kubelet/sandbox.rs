//! A pod's sandbox on this machine: a network namespace on the cluster's bridge with the pod's own IP,
//! and, per container, a mount namespace with a read-only root, a private `/dev` carrying the
//! termination-message file, the pod's emptyDir volumes, and the ServiceAccount token where a
//! container expects it. The process runs as the pod's UID/GID with no capabilities and
//! no_new_privs. What it does not do (cgroups, seccomp, image filesystems) is in the README.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::{Child, Command};

/// Device nodes a container sees in its `/dev` (bind-mounted from the host's).
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The pod network: a Linux bridge with the gateway address, pods numbered in its /24.
#[derive(Clone, Debug)]
pub struct Network {
    pub bridge: String,
    /// `10.244.X`: the bridge is `.1`, pods get `.2` to `.254`.
    pub prefix: String,
}

impl Network {
    pub fn gateway(&self) -> String {
        format!("{}.1", self.prefix)
    }
}

/// One pod's network namespace and address; removed by [`PodNetwork::remove`].
#[derive(Debug)]
pub struct PodNetwork {
    pub netns: String,
    pub ip: String,
}

async fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("/usr/sbin/ip").args(args).output().await?;
    anyhow::ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

impl PodNetwork {
    /// Creates netns `<bridge>-<n>` with `eth0` = `<prefix>.<n>/24` on the bridge, default route via
    /// the gateway, and loopback up.
    pub async fn create(net: &Network, n: u8) -> anyhow::Result<Self> {
        let netns = format!("{}-{n}", net.bridge);
        let host_end = format!("{}v{n}", net.bridge);
        let address = format!("{}.{n}", net.prefix);
        // A namespace left by a crashed run is replaced.
        let _ = ip(&["netns", "del", &netns]).await;
        ip(&["netns", "add", &netns]).await?;
        ip(&[
            "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ])
        .await?;
        ip(&["link", "set", &host_end, "master", &net.bridge, "up"]).await?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{address}/24"),
            "dev",
            "eth0",
        ])
        .await?;
        ip(&["-n", &netns, "link", "set", "eth0", "up"]).await?;
        ip(&["-n", &netns, "link", "set", "lo", "up"]).await?;
        ip(&[
            "-n",
            &netns,
            "route",
            "add",
            "default",
            "via",
            &net.gateway(),
        ])
        .await?;
        Ok(Self { netns, ip: address })
    }

    pub async fn remove(&self) {
        // Deleting the namespace deletes its end of the veth pair, and with it the host's end.
        let _ = ip(&["netns", "del", &self.netns]).await;
    }
}

/// Everything one container process needs, already resolved from the pod spec.
pub struct Launch {
    /// The program and its arguments (the image's binary with the container's command/args).
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub uid: u32,
    pub gid: u32,
    /// Host directory → path inside the container.
    pub mounts: Vec<(PathBuf, String)>,
    /// Where the container writes its termination message (a path under `/dev`).
    pub termination_message_path: String,
    pub read_only_root: bool,
}

/// The container's private files on the host: its `/dev`, termination message and log.
pub struct ContainerDir {
    pub root: PathBuf,
}

impl ContainerDir {
    pub fn new(pod_dir: &Path, container: &str, attempt: u32) -> anyhow::Result<Self> {
        let root = pod_dir.join(format!("containers/{container}-{attempt}"));
        std::fs::create_dir_all(root.join("dev"))?;
        for d in DEVICES {
            std::fs::write(root.join("dev").join(d), b"")?;
        }
        Ok(Self { root })
    }

    pub fn termination_message(&self) -> PathBuf {
        self.root.join("termination-message")
    }

    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }
}

/// The shell that builds the container's mount namespace and then becomes the container's process.
/// Arguments: container dir, termination message path, read-only root (1/0), uid, gid, the number of
/// mounts, then (host path, container path) pairs, then the program and its arguments.
const ENTER: &str = r#"
set -eu
dir=$1 tm=$2 ro=$3 uid=$4 gid=$5 n=$6
shift 6
mount --make-rprivate /
for d in null zero full random urandom tty; do mount --bind "/dev/$d" "$dir/dev/$d"; done
: >"$dir/termination-message"
chown "$uid:$gid" "$dir/termination-message"
touch "$dir/dev/${tm#/dev/}"
mount --bind "$dir/termination-message" "$dir/dev/${tm#/dev/}"
# Every volume is first staged under a fresh /run, while all host paths still resolve: a volume mounted
# at /tmp would otherwise hide the sources of the ones after it when the state directory is under /tmp.
mount -t tmpfs -o mode=755 tmpfs /run
mkdir /run/.stage /run/.image
# The image's program too (the stand-in's image filesystem): a volume at /tmp must not hide it either.
eval "program=\${$((2 * n + 1))}"
: >"/run/.image/${program##*/}"
mount --bind "$program" "/run/.image/${program##*/}"
i=0
while [ "$i" -lt "$n" ]; do
  eval "src=\${$((2 * i + 1))}"
  mkdir "/run/.stage/$i"
  mount --bind "$src" "/run/.stage/$i"
  i=$((i + 1))
done
mount --bind "$dir/dev" /dev
i=0
while [ "$i" -lt "$n" ]; do
  dst=$2
  shift 2
  mkdir -p "$dst" 2>/dev/null || true
  mount --bind "/run/.stage/$i" "$dst"
  umount "/run/.stage/$i"
  i=$((i + 1))
done
rm -rf /run/.stage
shift
if [ "$ro" = 1 ]; then mount -o remount,bind,ro /; fi
exec setpriv --reuid="$uid" --regid="$gid" --clear-groups --no-new-privs \
  --inh-caps=-all --bounding-set=-all -- "/run/.image/${program##*/}" "$@"
"#;

/// Starts the container's process inside the pod's network namespace; stdout and stderr go to the
/// container's log file.
pub fn spawn(net: &PodNetwork, dir: &ContainerDir, launch: &Launch) -> anyhow::Result<Child> {
    anyhow::ensure!(
        launch.termination_message_path.starts_with("/dev/"),
        "the stand-in kubelet supports terminationMessagePath only under /dev/ (got {})",
        launch.termination_message_path
    );
    let log = std::fs::File::create(dir.log())?;
    let mut cmd = Command::new("/usr/sbin/ip");
    cmd.args([
        "netns",
        "exec",
        &net.netns,
        "/usr/bin/unshare",
        "--mount",
        "--",
    ])
    .args(["/bin/sh", "-c", ENTER, "enter"])
    .arg(&dir.root)
    .arg(&launch.termination_message_path)
    .arg(if launch.read_only_root { "1" } else { "0" })
    .arg(launch.uid.to_string())
    .arg(launch.gid.to_string())
    .arg(launch.mounts.len().to_string());
    for (src, dst) in &launch.mounts {
        cmd.arg(src).arg(dst);
    }
    cmd.args(&launch.argv)
        .env_clear()
        .envs(&launch.env)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    Ok(cmd.spawn()?)
}
