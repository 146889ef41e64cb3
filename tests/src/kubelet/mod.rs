//! The **stand-in kubelet** of the real control plane tier (test code only; no kubelet can run on the
//! machines this project is built on). It registers a Node and keeps its Lease, binds pending pods
//! to that node (the scheduler's job), and runs pods whose image is the project's own by executing
//! the project's binary in a sandbox of the pod's own (see `sandbox.rs`). It reports pod status as a
//! kubelet does, serves `/containerLogs` over TLS for `pods/log` through the apiserver, and removes
//! deleted pods after stopping their processes. Pods of any other image wait with `ErrImagePull`.
//! The README lists what a real kubelet does that this one does not.

mod logs;
pub mod pod;
pub mod sandbox;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use pod::PodWorker;
use sandbox::{Network, PodNetwork};

/// Log files of a pod's containers, newest last, for `/containerLogs`.
#[derive(Default, Debug)]
pub struct PodFiles {
    pub logs: BTreeMap<String, Vec<PathBuf>>,
}

pub struct Kubelet {
    pub client: Client,
    pub node: String,
    /// The node's address (the bridge's gateway): where the apiserver reaches this kubelet.
    pub node_ip: String,
    /// The apiserver's port; pods reach it at the node's address (`KUBERNETES_SERVICE_HOST`/`_PORT`).
    pub api_port: u16,
    /// Image repository → the binary that runs it.
    pub images: Vec<(String, PathBuf)>,
    pub network: Network,
    pub state_dir: PathBuf,
    pub files: Mutex<HashMap<(String, String), PodFiles>>,
    ips: Mutex<[bool; 256]>,
}

pub struct Config {
    pub client: Client,
    pub node: String,
    pub api_port: u16,
    pub images: Vec<(String, PathBuf)>,
    pub network: Network,
    pub state_dir: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub client_ca: PathBuf,
    pub port: u16,
}

pub async fn run(config: Config) -> anyhow::Result<()> {
    let node_ip = config.network.gateway();
    let k = Arc::new(Kubelet {
        client: config.client,
        node: config.node,
        node_ip,
        api_port: config.api_port,
        images: config.images,
        network: config.network,
        state_dir: config.state_dir,
        files: Mutex::new(HashMap::new()),
        ips: Mutex::new([false; 256]),
    });
    let listener = tokio::net::TcpListener::bind((k.node_ip.as_str(), config.port)).await?;
    let port = listener.local_addr()?.port();
    register(&k, port).await?;
    tracing::info!(node = %k.node, ip = %k.node_ip, port, "stand-in kubelet registered");
    let server = logs::serve(
        Arc::clone(&k),
        listener,
        &config.serving_cert,
        &config.serving_key,
        &config.client_ca,
    )?;
    tokio::select! {
        r = heartbeat(Arc::clone(&k), port) => r,
        r = schedule(Arc::clone(&k)) => r,
        r = run_pods(Arc::clone(&k)) => r,
        r = server => r,
    }
}

fn node_status(k: &Kubelet, port: u16) -> serde_json::Value {
    let now = jiff::Timestamp::now().to_string();
    json!({
        "capacity": {"cpu": "2", "memory": "24Gi", "pods": "110", "ephemeral-storage": "50Gi"},
        "allocatable": {"cpu": "2", "memory": "23Gi", "pods": "110", "ephemeral-storage": "50Gi"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stand-in kubelet is posting ready status",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure", "lastHeartbeatTime": now, "lastTransitionTime": now},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID", "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "addresses": [{"type": "InternalIP", "address": k.node_ip}, {"type": "Hostname", "address": k.node}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "stand-in",
            "containerRuntimeVersion": "stand-in://0", "kubeletVersion": "v1.36.3", "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": "amd64",
        },
    })
}

/// Creates (or takes over) the Node and reports it Ready.
async fn register(k: &Kubelet, port: u16) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(k.client.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": k.node, "labels": {
            "kubernetes.io/hostname": k.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let patch = json!({"status": node_status(k, port)});
    nodes
        .patch_status(&k.node, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Node status and the node Lease every 10 s, as a kubelet's heartbeat.
async fn heartbeat(k: Arc<Kubelet>, port: u16) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(k.client.clone());
    let leases: Api<Lease> = Api::namespaced(k.client.clone(), "kube-node-lease");
    loop {
        let now = jiff::Timestamp::now();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": k.node, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": k.node, "leaseDurationSeconds": 40,
                     "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
        });
        if let Err(e) = leases
            .patch(
                &k.node,
                &PatchParams::apply("stand-in-kubelet").force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            tracing::warn!(error = %e, "node lease");
        }
        let patch = json!({"status": node_status(&k, port)});
        if let Err(e) = nodes
            .patch_status(&k.node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %e, "node status");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Binds every unscheduled pod to this node.
async fn schedule(k: Arc<Kubelet>) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::all(k.client.clone());
    let config = watcher::Config::default().fields("spec.nodeName=");
    // Backing off, as a kubelet does, while the apiserver is away (restarted, say).
    let mut events = watcher::watcher(pods, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(Event::Apply(p) | Event::InitApply(p)) => p,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching unscheduled pods");
                continue;
            }
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Err(e) = pod::bind(&k.client, &pod, &k.node).await {
            tracing::warn!(pod = %pod.name_any(), error = %e, "binding");
        }
    }
    Ok(())
}

/// Keeps one worker per pod bound to this node, fed with every change to its pod.
async fn run_pods(k: Arc<Kubelet>) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::all(k.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", k.node));
    // Backing off, as a kubelet does, while the apiserver is away (restarted, say).
    let mut events = watcher::watcher(pods, config).default_backoff().boxed();
    let mut workers: HashMap<String, watch::Sender<Pod>> = HashMap::new();
    while let Some(event) = events.next().await {
        let pod = match event {
            Ok(Event::Apply(p) | Event::InitApply(p)) => p,
            Ok(Event::Delete(p)) => {
                // Gone from the API (force-deleted): the worker sees a deletion and stops its processes.
                let uid = p.uid().unwrap_or_default();
                if let Some(tx) = workers.remove(&uid) {
                    let mut p = p;
                    p.metadata.deletion_timestamp.get_or_insert(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
                    p.metadata.deletion_grace_period_seconds = Some(0);
                    let _ = tx.send(p);
                }
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching this node's pods");
                continue;
            }
        };
        let uid = pod.uid().unwrap_or_default();
        workers.retain(|_, tx| !tx.is_closed());
        if let Some(tx) = workers.get(&uid) {
            let _ = tx.send(pod);
            continue;
        }
        if is_finished(&pod) && pod.metadata.deletion_timestamp.is_none() {
            continue; // a finished pod from before a restart: nothing to run
        }
        let (tx, rx) = watch::channel(pod.clone());
        workers.insert(uid.clone(), tx);
        let k2 = Arc::clone(&k);
        tokio::spawn(async move {
            let ns = pod.namespace().unwrap_or_default();
            let name = pod.name_any();
            let Some(n) = k2.take_ip() else {
                tracing::error!(pod = %name, "no pod address left");
                return;
            };
            let net = match PodNetwork::create(&k2.network, n).await {
                Ok(net) => net,
                Err(e) => {
                    tracing::error!(pod = %name, error = %e, "sandbox");
                    k2.give_ip(n);
                    return;
                }
            };
            let dir = k2.state_dir.join("pods").join(&uid);
            let worker = PodWorker {
                k: Arc::clone(&k2),
                n,
                ns,
                name,
                uid,
                updates: rx,
                net,
                dir,
            };
            worker.run().await;
        });
    }
    Ok(())
}

fn is_finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

impl Kubelet {
    pub fn take_ip(&self) -> Option<u8> {
        let mut ips = self.ips.lock().expect("ips lock");
        let n = (2..=254).find(|n| !ips[*n])?;
        ips[n] = true;
        Some(n as u8)
    }

    pub fn give_ip(&self, n: u8) {
        self.ips.lock().expect("ips lock")[n as usize] = false;
    }
}
