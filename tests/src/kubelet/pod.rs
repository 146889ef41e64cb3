//! One pod's life on the stand-in kubelet: resolve what the spec asks for (env, volumes, the
//! ServiceAccount token), start the containers in the pod's sandbox, probe readiness and liveness,
//! restart per restartPolicy, report status the way a kubelet does, and on deletion stop the processes
//! (SIGTERM, then SIGKILL after the grace period) and remove the pod for good.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, Pod, Probe, Secret, Volume, VolumeProjection,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::Kubelet;
use super::sandbox::{ContainerDir, Launch, PodNetwork, spawn};

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What the kubelet reports for one container.
#[derive(Clone, Debug)]
enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started: Timestamp,
    },
    Terminated {
        code: i32,
        reason: String,
        message: String,
        started: Timestamp,
        finished: Timestamp,
    },
}

#[derive(Clone, Debug)]
struct ContainerReport {
    name: String,
    image: String,
    state: State,
    last: Option<State>,
    ready: bool,
    restarts: u32,
}

fn state_json(s: &State) -> Value {
    match s {
        State::Waiting { reason, message } => {
            json!({"waiting": {"reason": reason, "message": message}})
        }
        State::Running { started } => json!({"running": {"startedAt": started.to_string()}}),
        State::Terminated {
            code,
            reason,
            message,
            started,
            finished,
        } => json!({"terminated": {
            "exitCode": code, "reason": reason, "message": message,
            "startedAt": started.to_string(), "finishedAt": finished.to_string(),
        }}),
    }
}

/// The image's program for `image`, if it is one the stand-in can run.
fn binary_for(k: &Kubelet, image: &str) -> Option<PathBuf> {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    k.images
        .iter()
        .find(|(r, _)| r == repo)
        .map(|(_, b)| b.clone())
}

/// The image's entrypoint and default arguments, as the Dockerfile sets them:
/// `ENTRYPOINT ["sentry-tenants"]`, `CMD ["run"]`.
fn argv(binary: &std::path::Path, c: &Container) -> Vec<String> {
    let program = binary.display().to_string();
    let map = |s: &String| {
        if s == "sentry-tenants" || s.ends_with("/sentry-tenants") {
            program.clone()
        } else {
            s.clone()
        }
    };
    let (entry, args) = match (&c.command, &c.args) {
        (Some(cmd), args) => (
            cmd.iter().map(map).collect::<Vec<_>>(),
            args.clone().unwrap_or_default(),
        ),
        (None, Some(args)) => (vec![program.clone()], args.clone()),
        (None, None) => (vec![program.clone()], vec!["run".to_owned()]),
    };
    entry.into_iter().chain(args).collect()
}

pub struct PodWorker {
    pub k: Arc<Kubelet>,
    /// The pod's number on the bridge (its address's last octet), returned when the pod is gone.
    pub n: u8,
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub updates: watch::Receiver<Pod>,
    pub net: PodNetwork,
    pub dir: PathBuf,
}

struct Running {
    child: tokio::process::Child,
    dir: ContainerDir,
    started: Timestamp,
    started_at: Instant,
    ready: bool,
    liveness_failures: i32,
    readiness_failures: i32,
    readiness_successes: i32,
    /// When each probe last ran: a kubelet probes once per `periodSeconds`, not on every pass.
    liveness_probed: Option<Instant>,
    readiness_probed: Option<Instant>,
}

impl PodWorker {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.k.client.clone(), &self.ns)
    }

    fn pod(&self) -> Pod {
        self.updates.borrow().clone()
    }

    pub async fn run(mut self) {
        let pod = self.pod();
        let spec = pod.spec.clone().unwrap_or_default();
        let restart = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let started_pod = Timestamp::now();
        let containers = spec.containers.clone();
        let mut reports: Vec<ContainerReport> = containers
            .iter()
            .map(|c| ContainerReport {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                state: State::Waiting {
                    reason: "ContainerCreating".into(),
                    message: String::new(),
                },
                last: None,
                ready: false,
                restarts: 0,
            })
            .collect();
        let mut running: Vec<Option<Running>> = containers.iter().map(|_| None).collect();
        let mut next_start: Vec<Instant> = containers.iter().map(|_| Instant::now()).collect();
        let mut done: Vec<bool> = containers.iter().map(|_| false).collect();
        let mut last_reported = Value::Null;
        let mut torn_down = false;
        let tick = Duration::from_millis(250);
        if spec.init_containers.as_ref().is_some_and(|i| !i.is_empty()) {
            for r in &mut reports {
                r.state = State::Waiting {
                    reason: "CreateContainerConfigError".into(),
                    message: "the stand-in kubelet does not run init containers".into(),
                };
            }
        }
        if let Some(message) = unsupported_volume(&pod) {
            for r in &mut reports {
                r.state = State::Waiting {
                    reason: "CreateContainerConfigError".into(),
                    message: message.clone(),
                };
            }
        }
        let mut volumes = None;
        let mut next_mount = Instant::now();

        loop {
            let pod = self.pod();
            if pod.metadata.deletion_timestamp.is_some() {
                let grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .unwrap_or(30)
                    .max(0) as u64;
                self.stop_all(&mut running, Duration::from_secs(grace))
                    .await;
                break;
            }
            // As a real kubelet: a volume that cannot be set up yet (a ConfigMap or Secret not there
            // yet, such as `kube-root-ca.crt` in a namespace the controller-manager has not reached)
            // keeps the pod ContainerCreating and is tried again.
            if volumes.is_none()
                && Instant::now() >= next_mount
                && unsupported_volume(&pod).is_none()
            {
                match self.prepare_volumes(&pod).await {
                    Ok(v) => volumes = Some(v),
                    Err(e) => {
                        tracing::warn!(pod = %self.name, error = %e, "MountVolume.SetUp failed; trying again");
                        next_mount = Instant::now() + Duration::from_secs(2);
                    }
                }
            }
            for (i, c) in containers.iter().enumerate() {
                if done[i] || spec.init_containers.as_ref().is_some_and(|v| !v.is_empty()) {
                    continue;
                }
                let Some(volumes) = &volumes else { continue };
                // Exited?
                if let Some(r) = running[i].as_mut()
                    && let Ok(Some(status)) = r.child.try_wait()
                {
                    let r = running[i].take().expect("running");
                    let code = status.code().unwrap_or(137);
                    let message = termination_message(c, &r.dir, code);
                    let ended = State::Terminated {
                        code,
                        reason: if code == 0 {
                            "Completed".into()
                        } else {
                            "Error".into()
                        },
                        message,
                        started: r.started,
                        finished: Timestamp::now(),
                    };
                    let restart_it = match restart.as_str() {
                        "Always" => true,
                        "OnFailure" => code != 0,
                        _ => false,
                    };
                    reports[i].ready = false;
                    if restart_it {
                        reports[i].last = Some(ended);
                        reports[i].restarts += 1;
                        let backoff = Duration::from_secs(1u64 << reports[i].restarts.min(5))
                            .min(Duration::from_secs(30));
                        next_start[i] = Instant::now() + backoff;
                        reports[i].state = State::Waiting {
                            reason: "CrashLoopBackOff".into(),
                            message: format!(
                                "back-off {backoff:?} restarting failed container {}",
                                c.name
                            ),
                        };
                    } else {
                        reports[i].state = ended;
                        done[i] = true;
                    }
                }
                // Start (or restart after back-off)?
                if running[i].is_none() && !done[i] && Instant::now() >= next_start[i] {
                    match self.start(c, &pod, volumes, reports[i].restarts).await {
                        Ok(r) => {
                            reports[i].state = State::Running { started: r.started };
                            reports[i].ready = c.readiness_probe.is_none();
                            running[i] = Some(r);
                        }
                        Err(Unrunnable { reason, message }) => {
                            reports[i].state = State::Waiting { reason, message };
                            next_start[i] = Instant::now() + Duration::from_secs(2);
                        }
                    }
                }
                // Probes.
                if let Some(r) = running[i].as_mut() {
                    if let Some(p) = &c.readiness_probe
                        && due(p, r.started_at, &mut r.readiness_probed)
                    {
                        let ok = probe(p, c, &self.net.ip).await;
                        tally(ok, &mut r.readiness_successes, &mut r.readiness_failures);
                        if ok && r.readiness_successes >= p.success_threshold.unwrap_or(1) {
                            r.ready = true;
                        }
                        if !ok && r.readiness_failures >= p.failure_threshold.unwrap_or(3) {
                            r.ready = false;
                        }
                        reports[i].ready = r.ready;
                    }
                    if let Some(p) = &c.liveness_probe
                        && due(p, r.started_at, &mut r.liveness_probed)
                    {
                        let ok = probe(p, c, &self.net.ip).await;
                        let mut successes = 0;
                        tally(ok, &mut successes, &mut r.liveness_failures);
                        if r.liveness_failures >= p.failure_threshold.unwrap_or(3) {
                            tracing::info!(pod = %self.name, container = %c.name, "liveness probe failed: restarting");
                            stop(&mut r.child, Duration::from_secs(30)).await;
                        }
                    }
                }
            }
            let finished = restart != "Always" && done.iter().all(|d| *d);
            if finished && !torn_down {
                // A finished pod keeps its status, not its sandbox.
                self.net.remove().await;
                torn_down = true;
            }
            let status = self.status(&pod, &reports, &done, &restart, started_pod);
            if status != last_reported {
                let patch = json!({ "status": status });
                match self
                    .pods()
                    .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => last_reported = status,
                    Err(kube::Error::Api(e)) if e.code == 404 => break,
                    Err(e) => {
                        tracing::warn!(pod = %self.name, error = %e, "could not report pod status")
                    }
                }
            }
            // Wait for a change to the pod or the next tick (exits and probes are polled).
            let _ = tokio::time::timeout(tick, self.updates.changed()).await;
        }
        if !torn_down {
            self.net.remove().await;
        }
        self.k.give_ip(self.n);
        self.k
            .files
            .lock()
            .expect("files lock")
            .remove(&(self.ns.clone(), self.name.clone()));
        // The kubelet's last word: the pod is gone once its containers are.
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = self.pods().delete(&self.name, &dp).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    fn status(
        &self,
        pod: &Pod,
        reports: &[ContainerReport],
        done: &[bool],
        restart: &str,
        started: Timestamp,
    ) -> Value {
        let all_done = done.iter().all(|d| *d);
        let any_failed = reports
            .iter()
            .any(|r| matches!(r.state, State::Terminated { code, .. } if code != 0));
        let any_started = reports
            .iter()
            .any(|r| !matches!(r.state, State::Waiting { .. }) || r.last.is_some());
        let phase = if all_done && restart != "Always" {
            if any_failed { "Failed" } else { "Succeeded" }
        } else if any_started {
            "Running"
        } else {
            "Pending"
        };
        let ready = !all_done && reports.iter().all(|r| r.ready);
        let condition = |type_: &str, ok: bool| {
            let previous = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == type_ && c.status == if ok { "True" } else { "False" })
                        .and_then(|c| c.last_transition_time.clone())
                });
            let at = previous.map(|t| t.0).unwrap_or_else(Timestamp::now);
            json!({"type": type_, "status": if ok { "True" } else { "False" }, "lastTransitionTime": at.to_string()})
        };
        let statuses: Vec<Value> = reports
            .iter()
            .map(|r| {
                let mut s = json!({
                    "name": r.name, "image": r.image, "imageID": "", "ready": r.ready,
                    "restartCount": r.restarts, "started": matches!(r.state, State::Running { .. }),
                    "state": state_json(&r.state),
                });
                if let Some(last) = &r.last {
                    s["lastState"] = state_json(last);
                }
                if !matches!(r.state, State::Waiting { .. }) {
                    s["containerID"] = json!(format!("stand-in://{}/{}", self.uid, r.name));
                }
                s
            })
            .collect();
        json!({
            "phase": phase,
            "conditions": [
                condition("PodScheduled", true),
                condition("Initialized", true),
                condition("ContainersReady", ready),
                condition("Ready", ready),
            ],
            "hostIP": self.k.node_ip, "hostIPs": [{"ip": self.k.node_ip}],
            "podIP": self.net.ip, "podIPs": [{"ip": self.net.ip}],
            "startTime": started.to_string(),
            "containerStatuses": statuses,
            // No qosClass: the API server set it when the pod was created, and it cannot change.
        })
    }

    async fn stop_all(&self, running: &mut [Option<Running>], grace: Duration) {
        let stops = running
            .iter_mut()
            .flatten()
            .map(|r| stop(&mut r.child, grace));
        futures::future::join_all(stops).await;
    }

    async fn start(
        &self,
        c: &Container,
        pod: &Pod,
        volumes: &BTreeMap<String, PathBuf>,
        attempt: u32,
    ) -> Result<Running, Unrunnable> {
        let image = c.image.clone().unwrap_or_default();
        let Some(binary) = binary_for(&self.k, &image) else {
            return Err(Unrunnable {
                reason: "ErrImagePull".into(),
                message: format!(
                    "the stand-in kubelet cannot pull {image:?}: it runs only the project's own image ({})",
                    self.k
                        .images
                        .iter()
                        .map(|(r, _)| r.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        };
        let config_error = |message: String| Unrunnable {
            reason: "CreateContainerConfigError".into(),
            message,
        };
        let env = self
            .env(c, pod)
            .await
            .map_err(|e| config_error(e.to_string()))?;
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_sc = spec.security_context.clone().unwrap_or_default();
        let sc = c.security_context.clone().unwrap_or_default();
        let uid = sc.run_as_user.or(pod_sc.run_as_user).unwrap_or(65532);
        let gid = sc.run_as_group.or(pod_sc.run_as_group).unwrap_or(uid);
        let mut mounts = Vec::new();
        for m in c.volume_mounts.clone().unwrap_or_default() {
            let src = volumes
                .get(&m.name)
                .ok_or_else(|| config_error(format!("volume {} is not defined", m.name)))?;
            mounts.push((src.clone(), m.mount_path.clone()));
        }
        let dir = ContainerDir::new(&self.dir, &c.name, attempt)
            .map_err(|e| config_error(e.to_string()))?;
        let launch = Launch {
            argv: argv(&binary, c),
            env,
            uid: u32::try_from(uid).unwrap_or(65532),
            gid: u32::try_from(gid).unwrap_or(65532),
            mounts,
            termination_message_path: c
                .termination_message_path
                .clone()
                .unwrap_or_else(|| "/dev/termination-log".into()),
            read_only_root: sc.read_only_root_filesystem.unwrap_or(false),
        };
        self.k
            .files
            .lock()
            .expect("files lock")
            .entry((self.ns.clone(), self.name.clone()))
            .or_default()
            .logs
            .entry(c.name.clone())
            .or_default()
            .push(dir.log());
        let child = spawn(&self.net, &dir, &launch).map_err(|e| Unrunnable {
            reason: "RunContainerError".into(),
            message: e.to_string(),
        })?;
        tracing::info!(pod = %format!("{}/{}", self.ns, self.name), container = %c.name, pid = ?child.id(), "started");
        Ok(Running {
            child,
            dir,
            started: Timestamp::now(),
            started_at: Instant::now(),
            ready: false,
            liveness_failures: 0,
            readiness_failures: 0,
            readiness_successes: 0,
            liveness_probed: None,
            readiness_probed: None,
        })
    }

    /// The container's environment: the service variables a kubelet sets, then `envFrom`, then `env`.
    async fn env(&self, c: &Container, pod: &Pod) -> anyhow::Result<BTreeMap<String, String>> {
        let mut env = BTreeMap::from([
            ("PATH".to_owned(), PATH.to_owned()),
            ("HOME".to_owned(), "/".to_owned()),
            ("HOSTNAME".to_owned(), self.name.clone()),
            ("KUBERNETES_SERVICE_HOST".to_owned(), self.k.node_ip.clone()),
            (
                "KUBERNETES_SERVICE_PORT".to_owned(),
                self.k.api_port.to_string(),
            ),
        ]);
        for from in c.env_from.clone().unwrap_or_default() {
            let prefix = from.prefix.clone().unwrap_or_default();
            let data = if let Some(r) = &from.config_map_ref {
                self.config_map(&r.name, r.optional.unwrap_or(false))
                    .await?
            } else if let Some(r) = &from.secret_ref {
                self.secret(&r.name, r.optional.unwrap_or(false)).await?
            } else {
                BTreeMap::new()
            };
            env.extend(data.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v)));
        }
        for var in c.env.clone().unwrap_or_default() {
            if let Some(v) = self.env_value(&var, pod).await? {
                env.insert(var.name.clone(), v);
            }
        }
        Ok(env)
    }

    async fn env_value(&self, var: &EnvVar, pod: &Pod) -> anyhow::Result<Option<String>> {
        let Some(from) = &var.value_from else {
            return Ok(Some(var.value.clone().unwrap_or_default()));
        };
        if let Some(f) = &from.field_ref {
            return Ok(Some(self.field(pod, &f.field_path)?));
        }
        if let Some(r) = &from.secret_key_ref {
            let data = self.secret(&r.name, r.optional.unwrap_or(false)).await?;
            return match data.get(&r.key) {
                Some(v) => Ok(Some(v.clone())),
                None if r.optional.unwrap_or(false) => Ok(None),
                None => anyhow::bail!(
                    "couldn't find key {} in Secret {}/{}",
                    r.key,
                    self.ns,
                    r.name
                ),
            };
        }
        if let Some(r) = &from.config_map_key_ref {
            let data = self
                .config_map(&r.name, r.optional.unwrap_or(false))
                .await?;
            return match data.get(&r.key) {
                Some(v) => Ok(Some(v.clone())),
                None if r.optional.unwrap_or(false) => Ok(None),
                None => anyhow::bail!(
                    "couldn't find key {} in ConfigMap {}/{}",
                    r.key,
                    self.ns,
                    r.name
                ),
            };
        }
        anyhow::bail!(
            "env {}: the stand-in kubelet supports fieldRef, secretKeyRef and configMapKeyRef",
            var.name
        )
    }

    fn field(&self, pod: &Pod, path: &str) -> anyhow::Result<String> {
        Ok(match path {
            "metadata.name" => self.name.clone(),
            "metadata.namespace" => self.ns.clone(),
            "metadata.uid" => self.uid.clone(),
            "spec.nodeName" => self.k.node.clone(),
            "spec.serviceAccountName" => pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default(),
            "status.podIP" => self.net.ip.clone(),
            "status.hostIP" => self.k.node_ip.clone(),
            other => anyhow::bail!("fieldRef {other} is not supported by the stand-in kubelet"),
        })
    }

    async fn secret(&self, name: &str, optional: bool) -> anyhow::Result<BTreeMap<String, String>> {
        let api: Api<Secret> = Api::namespaced(self.k.client.clone(), &self.ns);
        match api.get_opt(name).await? {
            Some(s) => Ok(s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect()),
            None if optional => Ok(BTreeMap::new()),
            None => anyhow::bail!("secret \"{name}\" not found"),
        }
    }

    async fn config_map(
        &self,
        name: &str,
        optional: bool,
    ) -> anyhow::Result<BTreeMap<String, String>> {
        let api: Api<ConfigMap> = Api::namespaced(self.k.client.clone(), &self.ns);
        match api.get_opt(name).await? {
            Some(c) => Ok(c.data.unwrap_or_default()),
            None if optional => Ok(BTreeMap::new()),
            None => anyhow::bail!("configmap \"{name}\" not found"),
        }
    }

    /// Host directories for the pod's volumes: emptyDir, secret, configMap, and projected
    /// (ServiceAccount token, configMap, downward API — what ServiceAccount admission adds).
    async fn prepare_volumes(&self, pod: &Pod) -> anyhow::Result<BTreeMap<String, PathBuf>> {
        let mut out = BTreeMap::new();
        for v in pod
            .spec
            .clone()
            .unwrap_or_default()
            .volumes
            .unwrap_or_default()
        {
            let dir = self.dir.join("volumes").join(&v.name);
            std::fs::create_dir_all(&dir)?;
            set_mode(&dir, 0o777)?;
            self.fill_volume(&v, &dir, pod).await?;
            out.insert(v.name.clone(), dir);
        }
        Ok(out)
    }

    async fn fill_volume(
        &self,
        v: &Volume,
        dir: &std::path::Path,
        pod: &Pod,
    ) -> anyhow::Result<()> {
        let write = |name: &str, content: &[u8]| -> anyhow::Result<()> {
            let path = dir.join(name);
            std::fs::write(&path, content)?;
            set_mode(&path, 0o644)
        };
        if v.empty_dir.is_some() {
            return Ok(());
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            for (k, val) in self.secret(&name, s.optional.unwrap_or(false)).await? {
                write(&k, val.as_bytes())?;
            }
            return Ok(());
        }
        if let Some(c) = &v.config_map {
            for (k, val) in self
                .config_map(&c.name, c.optional.unwrap_or(false))
                .await?
            {
                write(&k, val.as_bytes())?;
            }
            return Ok(());
        }
        if let Some(p) = &v.projected {
            for source in p.sources.clone().unwrap_or_default() {
                self.project(&source, &write, pod).await?;
            }
            return Ok(());
        }
        anyhow::bail!("{}", unsupported(&v.name))
    }

    async fn project(
        &self,
        source: &VolumeProjection,
        write: &impl Fn(&str, &[u8]) -> anyhow::Result<()>,
        pod: &Pod,
    ) -> anyhow::Result<()> {
        if let Some(t) = &source.service_account_token {
            let account = pod
                .spec
                .as_ref()
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_else(|| "default".into());
            let token = self
                .token(&account, t.expiration_seconds, t.audience.clone())
                .await?;
            write(&t.path, token.as_bytes())?;
        }
        if let Some(c) = &source.config_map {
            let data = self
                .config_map(&c.name, c.optional.unwrap_or(false))
                .await?;
            for item in c.items.clone().unwrap_or_default() {
                if let Some(v) = data.get(&item.key) {
                    write(&item.path, v.as_bytes())?;
                }
            }
        }
        if let Some(d) = &source.downward_api {
            for item in d.items.clone().unwrap_or_default() {
                if let Some(f) = &item.field_ref {
                    write(&item.path, self.field(pod, &f.field_path)?.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// A token bound to this pod, from the TokenRequest API, as the kubelet projects it.
    async fn token(
        &self,
        account: &str,
        expiration: Option<i64>,
        audience: Option<String>,
    ) -> anyhow::Result<String> {
        use k8s_openapi::api::authentication::v1::{
            BoundObjectReference, TokenRequest, TokenRequestSpec,
        };
        use k8s_openapi::api::core::v1::ServiceAccount;
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.into_iter().collect(),
                expiration_seconds: Some(expiration.unwrap_or(3607).max(600)),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(self.name.clone()),
                    uid: Some(self.uid.clone()),
                }),
            },
            ..TokenRequest::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.k.client.clone(), &self.ns);
        let answer: TokenRequest = api
            .create_subresource("token", account, &PostParams::default(), &request)
            .await?;
        Ok(answer.status.map(|s| s.token).unwrap_or_default())
    }
}

/// Why the stand-in cannot run this pod's volumes at all (it knows fewer kinds than a kubelet).
fn unsupported_volume(pod: &Pod) -> Option<String> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes
        .iter()
        .find(|v| {
            v.empty_dir.is_none()
                && v.secret.is_none()
                && v.config_map.is_none()
                && v.projected.is_none()
        })
        .map(|v| unsupported(&v.name))
}

fn unsupported(volume: &str) -> String {
    format!(
        "volume {volume}: the stand-in kubelet supports emptyDir, secret, configMap and projected volumes"
    )
}

struct Unrunnable {
    reason: String,
    message: String,
}

fn set_mode(path: &std::path::Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// The termination message a kubelet reports: the file's content; with FallbackToLogsOnError and an
/// empty file after a failure, the end of the log (80 lines, 2 KiB at most).
fn termination_message(c: &Container, dir: &ContainerDir, code: i32) -> String {
    let file = std::fs::read_to_string(dir.termination_message()).unwrap_or_default();
    if !file.is_empty()
        || code == 0
        || c.termination_message_policy.as_deref() != Some("FallbackToLogsOnError")
    {
        return file.chars().take(4096).collect();
    }
    let log = std::fs::read_to_string(dir.log()).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    let start = tail.len().saturating_sub(2048);
    tail[tail.ceil_char_boundary(start)..].to_owned()
}

/// SIGTERM, then SIGKILL if the process outlives `grace`.
async fn stop(child: &mut tokio::process::Child, grace: Duration) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// Whether the probe runs now, as a kubelet schedules it: first after `initialDelaySeconds`, then
/// once per `periodSeconds` (default 10); marks it run. Probing on every pass of the loop would fail
/// `failureThreshold` times within a second of a start, while the program is still coming up.
fn due(p: &Probe, started: Instant, last: &mut Option<Instant>) -> bool {
    let seconds =
        |s: Option<i32>, default: i32| Duration::from_secs(s.unwrap_or(default).max(0) as u64);
    let ready = started.elapsed() >= seconds(p.initial_delay_seconds, 0)
        && last.is_none_or(|at| at.elapsed() >= seconds(p.period_seconds, 10));
    if ready {
        *last = Some(Instant::now());
    }
    ready
}

fn tally(ok: bool, successes: &mut i32, failures: &mut i32) {
    if ok {
        *successes += 1;
        *failures = 0;
    } else {
        *failures += 1;
        *successes = 0;
    }
}

/// An HTTP GET probe against the pod's IP, as a kubelet sends it (other probe kinds: unsupported, so
/// they pass).
async fn probe(p: &Probe, c: &Container, pod_ip: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(get) = &p.http_get else { return true };
    let port = match &get.port {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => *n,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => {
            match c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
            {
                Some(p) => p.container_port,
                None => return false,
            }
        }
    };
    let path = get.path.clone().unwrap_or_else(|| "/".into());
    let timeout = Duration::from_secs(p.timeout_seconds.unwrap_or(1).max(1) as u64);
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect((pod_ip, port as u16))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {pod_ip}:{port}\r\nUser-Agent: kube-probe/1.36\r\n\r\n").as_bytes()).await.ok()?;
        let mut head = [0u8; 16];
        let n = s.read(&mut head).await.ok()?;
        let line = String::from_utf8_lossy(&head[..n]).into_owned();
        let code: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some((200..400).contains(&code))
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Pending pods not yet scheduled get a Binding to this node, as kube-scheduler would give them.
pub async fn bind(client: &Client, pod: &Pod, node: &str) -> anyhow::Result<()> {
    let ns = pod.namespace().unwrap_or_default();
    let body = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod.name_any(), "namespace": ns, "uid": pod.uid()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let _: Value = api
        .create_subresource("binding", &pod.name_any(), &PostParams::default(), &body)
        .await?;
    Ok(())
}
