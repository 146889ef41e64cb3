//! The Pod Security Standards "restricted" profile, checked on a pod spec: what the namespace label
//! enforces in the cluster, checked here before anything is applied.

use k8s_openapi::api::core::v1::{PodSpec, SecurityContext};

const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Every "restricted" rule `spec` breaks, plus our own: read-only root filesystem and resource limits.
pub fn violations(spec: &PodSpec) -> Vec<String> {
    let mut out = Vec::new();
    let pod = spec.security_context.clone().unwrap_or_default();
    if spec.host_network == Some(true) || spec.host_pid == Some(true) || spec.host_ipc == Some(true)
    {
        out.push("host namespaces must not be shared".to_owned());
    }
    for volume in spec.volumes.iter().flatten() {
        let raw = serde_json::to_value(volume).unwrap_or_default();
        let kinds: Vec<&String> = raw
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .filter(|k| *k != "name")
            .collect();
        if kinds.iter().any(|k| !ALLOWED_VOLUMES.contains(&k.as_str())) {
            out.push(format!(
                "volume {} uses a type restricted forbids: {kinds:?}",
                volume.name
            ));
        }
    }
    let pod_seccomp = pod.seccomp_profile.as_ref().map(|p| p.type_.as_str());
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        let sc: SecurityContext = c.security_context.clone().unwrap_or_default();
        let name = &c.name;
        if sc.privileged == Some(true) {
            out.push(format!("{name}: privileged"));
        }
        if sc.allow_privilege_escalation != Some(false) {
            out.push(format!("{name}: allowPrivilegeEscalation must be false"));
        }
        let non_root = sc.run_as_non_root.or(pod.run_as_non_root);
        if non_root != Some(true) {
            out.push(format!("{name}: runAsNonRoot must be true"));
        }
        if sc.run_as_user.or(pod.run_as_user) == Some(0) {
            out.push(format!("{name}: runAsUser must not be 0"));
        }
        let seccomp = sc
            .seccomp_profile
            .as_ref()
            .map(|p| p.type_.as_str())
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            out.push(format!(
                "{name}: seccompProfile must be RuntimeDefault or Localhost"
            ));
        }
        let caps = sc.capabilities.clone().unwrap_or_default();
        if !caps.drop.iter().flatten().any(|d| d == "ALL") {
            out.push(format!("{name}: capabilities must drop ALL"));
        }
        if caps.add.iter().flatten().any(|a| a != "NET_BIND_SERVICE") {
            out.push(format!("{name}: only NET_BIND_SERVICE may be added"));
        }
        if c.ports.iter().flatten().any(|p| p.host_port.is_some()) {
            out.push(format!("{name}: hostPort is not allowed"));
        }
        if sc.read_only_root_filesystem != Some(true) {
            out.push(format!("{name}: readOnlyRootFilesystem must be true"));
        }
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        if !limits.is_some_and(|l| l.contains_key("memory")) {
            out.push(format!("{name}: a memory limit is required"));
        }
    }
    out
}
