//! The Kubernetes Job a RunJob controls: the operator's own image running `provision-tenant`, under
//! the provisioner ServiceAccount, hardened to Pod Security "restricted".

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    KeyToPath, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecretKeySelector, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::config::OperatorConfig;
use crate::crd::RunJob;

/// Non-root UID/GID of every pod we run (distroless "nonroot").
pub const RUN_AS_USER: i64 = 65_532;
const TMP_VOLUME: &str = "tmp";
const TMP_PATH: &str = "/tmp";

/// Environment the provisioner reads; the names are its CLI's `env` bindings.
pub mod env {
    pub const RUN_ID: &str = "SENTRY_TENANTS_RUN_ID";
    pub const TENANT: &str = "SENTRY_TENANTS_TENANT";
    pub const ACTION: &str = "SENTRY_TENANTS_ACTION";
    pub const NAMESPACE: &str = "SENTRY_TENANTS_NAMESPACE";
    pub const CLICKHOUSE_URL: &str = "SENTRY_TENANTS_CLICKHOUSE_URL";
    pub const CLICKHOUSE_USER: &str = "SENTRY_TENANTS_CLICKHOUSE_USER";
    pub const CLICKHOUSE_PASSWORD: &str = "SENTRY_TENANTS_CLICKHOUSE_PASSWORD";
    pub const TANTIVY_ROOT: &str = "SENTRY_TENANTS_TANTIVY_ROOT";
    pub const CLICKHOUSE_CLUSTER: &str = "SENTRY_TENANTS_CLICKHOUSE_CLUSTER";
    pub const CLICKHOUSE_PREFIX: &str = "SENTRY_TENANTS_CLICKHOUSE_PREFIX";
    pub const CLICKHOUSE_CA_FILE: &str = "SENTRY_TENANTS_CLICKHOUSE_CA_FILE";
}

const CA_VOLUME: &str = "clickhouse-ca";
const CA_DIR: &str = "/etc/sentry-tenants/clickhouse-ca";
/// The key of the CA ConfigMap, as cert-manager's trust-manager and `kubectl create configmap
/// --from-file=ca.crt` name it.
pub const CA_KEY: &str = "ca.crt";

/// Builds the Job for `run`. Its name is the RunJob's, so get-or-create can find it again.
pub fn build_job(run: &RunJob, config: &OperatorConfig) -> Job {
    let name = run.name_any();
    let owner = run.controller_owner_ref(&()).map(|mut o| {
        o.block_owner_deletion = Some(true);
        o
    });
    let mut labels = crate::labels::for_tenant("provisioner", &run.spec.tenant);
    labels.insert("sentry.io/runjob".to_owned(), name.clone());

    Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: run.namespace(),
            labels: Some(labels.clone()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(run.spec.backoff_limit),
            active_deadline_seconds: Some(run.spec.active_deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(run, config)),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

fn pod_spec(run: &RunJob, config: &OperatorConfig) -> PodSpec {
    PodSpec {
        restart_policy: Some("Never".into()),
        service_account_name: Some(config.provisioner_service_account.clone()),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_USER),
            run_as_group: Some(RUN_AS_USER),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..PodSecurityContext::default()
        }),
        containers: vec![Container {
            name: "provision".into(),
            image: Some(config.image.clone()),
            // As the operator's Deployment: an image loaded onto the node is used as it is.
            image_pull_policy: Some("IfNotPresent".into()),
            args: Some(vec!["provision-tenant".into()]),
            env: Some(job_env(run, config)),
            security_context: Some(restricted_container_security_context()),
            volume_mounts: Some(dedup_volume_mounts(
                default_volume_mounts(),
                ca_volume_mounts(config),
            )),
            resources: Some(ResourceRequirements {
                requests: Some(
                    [
                        ("cpu".into(), Quantity("50m".into())),
                        ("memory".into(), Quantity("32Mi".into())),
                    ]
                    .into(),
                ),
                limits: Some([("memory".into(), Quantity("128Mi".into()))].into()),
                ..ResourceRequirements::default()
            }),
            // The provisioner writes its classified error here; it becomes the RunJob's message.
            termination_message_policy: Some("FallbackToLogsOnError".into()),
            ..Container::default()
        }],
        volumes: Some(
            [Volume {
                name: TMP_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(Quantity("16Mi".into())),
                    ..EmptyDirVolumeSource::default()
                }),
                ..Volume::default()
            }]
            .into_iter()
            .chain(config.clickhouse_ca_configmap.as_ref().map(|name| Volume {
                name: CA_VOLUME.into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: name.clone(),
                    items: Some(vec![KeyToPath {
                        key: CA_KEY.into(),
                        path: CA_KEY.into(),
                        ..KeyToPath::default()
                    }]),
                    // A missing ConfigMap keeps the pod from starting, with the reason in its events.
                    optional: Some(false),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            }))
            .collect(),
        ),
        ..PodSpec::default()
    }
}

/// The container security context "restricted" asks for, plus a read-only root filesystem.
pub fn restricted_container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..SecurityContext::default()
    }
}

/// Run parameters are plain values; the admin credentials are references to the Secret named at
/// install time, resolved by the kubelet — the operator never reads them and needs no `secrets` access.
fn job_env(run: &RunJob, config: &OperatorConfig) -> Vec<EnvVar> {
    let plain = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    };
    let secret = |name: &str, key: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: config.clickhouse_admin_secret.clone(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    vec![
        plain(env::RUN_ID, run.uid().as_deref().unwrap_or_default()),
        plain(env::TENANT, &run.spec.tenant),
        plain(env::ACTION, run.spec.action.as_str()),
        plain(
            env::NAMESPACE,
            run.namespace().as_deref().unwrap_or_default(),
        ),
        plain(env::CLICKHOUSE_URL, &config.shared.clickhouse_url),
        plain(env::TANTIVY_ROOT, &config.shared.tantivy_root),
        secret(env::CLICKHOUSE_USER, "username"),
        secret(env::CLICKHOUSE_PASSWORD, "password"),
    ]
    .into_iter()
    .chain(
        config
            .clickhouse_cluster
            .as_deref()
            .map(|c| plain(env::CLICKHOUSE_CLUSTER, c)),
    )
    .chain(
        config
            .clickhouse_prefix
            .as_deref()
            .map(|p| plain(env::CLICKHOUSE_PREFIX, p)),
    )
    .chain(
        config
            .clickhouse_ca_configmap
            .as_ref()
            .map(|_| plain(env::CLICKHOUSE_CA_FILE, &format!("{CA_DIR}/{CA_KEY}"))),
    )
    .collect()
}

fn ca_volume_mounts(config: &OperatorConfig) -> Vec<VolumeMount> {
    config
        .clickhouse_ca_configmap
        .iter()
        .map(|_| VolumeMount {
            name: CA_VOLUME.into(),
            mount_path: CA_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect()
}

fn default_volume_mounts() -> Vec<VolumeMount> {
    vec![VolumeMount {
        name: TMP_VOLUME.into(),
        mount_path: TMP_PATH.into(),
        ..VolumeMount::default()
    }]
}

/// Defaults first, then the extra mounts that collide with none of them — by volume name *or* by
/// mount path. (The seed's version only dropped one of the two kinds of collision, so a second mount
/// of the same volume slipped through and the pod was rejected.)
pub fn dedup_volume_mounts(
    defaults: Vec<VolumeMount>,
    extra: Vec<VolumeMount>,
) -> Vec<VolumeMount> {
    let mut out = defaults;
    for mount in extra {
        let clashes = out
            .iter()
            .any(|m| m.name == mount.name || m.mount_path == mount.mount_path);
        if !clashes {
            out.push(mount);
        }
    }
    out
}

/// The Job controller's true condition of `type_` on `job`, if any.
fn true_condition(job: &Job, type_: &str) -> Option<JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .cloned()
}

/// The condition that says `job` succeeded, the earliest there is. Since Kubernetes 1.31 the Job
/// controller first adds `SuccessCriteriaMet` (its pod has exited 0) and `Complete` only once the pod
/// is gone; the run is done at the first, or it would read as "waiting for its pod" (active 0) in
/// between. Older clusters add `Complete` alone.
pub fn succeeded(job: &Job) -> Option<JobCondition> {
    true_condition(job, "SuccessCriteriaMet").or_else(|| true_condition(job, "Complete"))
}

/// The condition that says `job` failed. Not `FailureTarget`: that one comes while the Job controller
/// is still stopping pods, which may be changing ClickHouse.
pub fn failed(job: &Job) -> Option<JobCondition> {
    true_condition(job, "Failed")
}

/// A Job that succeeded or failed: its pod holds no ClickHouse session any more.
pub fn finished(job: &Job) -> bool {
    succeeded(job).is_some() || failed(job).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pod template's spec of `run`'s Job.
    fn pod_of(run: &RunJob, config: &OperatorConfig) -> PodSpec {
        build_job(run, config).spec.unwrap().template.spec.unwrap()
    }

    fn provision_run() -> RunJob {
        RunJob::new(
            "acme-provision-10",
            crate::crd::RunJobSpec::new("acme", crate::crd::RunAction::Provision),
        )
    }

    /// A Job with these true conditions, in the order the Job controller adds them.
    fn job_with(conditions: &[&str]) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "acme-provision-10"},
            "status": {"active": 0, "conditions": conditions.iter().map(|c| serde_json::json!(
                {"type": c, "status": "True", "lastTransitionTime": "2026-12-03T22:09:18Z"}
            )).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn a_job_has_succeeded_from_success_criteria_met_on_before_it_is_complete() {
        assert_eq!(succeeded(&job_with(&[])).map(|c| c.type_), None);
        assert_eq!(
            succeeded(&job_with(&["SuccessCriteriaMet"])).map(|c| c.type_),
            Some("SuccessCriteriaMet".to_owned())
        );
        assert_eq!(
            succeeded(&job_with(&["SuccessCriteriaMet", "Complete"])).map(|c| c.type_),
            Some("SuccessCriteriaMet".to_owned()),
            "the time it succeeded is the same whichever of the two a reconcile sees first"
        );
        assert_eq!(
            succeeded(&job_with(&["Complete"])).map(|c| c.type_),
            Some("Complete".to_owned())
        );
        assert!(finished(&job_with(&["SuccessCriteriaMet"])));
    }

    #[test]
    fn a_job_has_failed_only_once_its_pods_are_stopped() {
        let stopping = job_with(&["FailureTarget"]);
        assert!(failed(&stopping).is_none() && !finished(&stopping));
        let done = job_with(&["FailureTarget", "Failed"]);
        assert_eq!(failed(&done).map(|c| c.type_), Some("Failed".to_owned()));
        assert!(finished(&done) && succeeded(&done).is_none());
    }

    /// The Job cache holds only what carries the managed-by label, and the job watch maps a Job to its
    /// run by the `sentry.io/runjob` label: a Job without them would never be seen finishing.
    #[test]
    fn a_job_is_named_placed_labelled_and_owned_as_its_run() {
        let mut run = provision_run();
        run.metadata.namespace = Some("tenants".into());
        run.metadata.uid = Some("run-uid".into());
        let job = build_job(&run, &OperatorConfig::for_namespace("tenants"));
        let meta = &job.metadata;
        assert_eq!(meta.name.as_deref(), Some("acme-provision-10"));
        assert_eq!(meta.namespace.as_deref(), Some("tenants"));
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(crate::labels::MANAGED_BY).map(String::as_str),
            Some("sentry-tenants"),
            "{labels:?}"
        );
        assert_eq!(
            labels.get("sentry.io/runjob").map(String::as_str),
            Some("acme-provision-10")
        );
        assert_eq!(
            labels.get(crate::labels::TENANT).map(String::as_str),
            Some("acme")
        );
        let pod_labels = job.spec.clone().unwrap().template.metadata.unwrap().labels;
        assert_eq!(
            pod_labels.as_ref(),
            Some(&labels),
            "its pods carry the same labels"
        );
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{owners:?}");
        assert_eq!(
            (
                owners[0].uid.as_str(),
                owners[0].controller,
                owners[0].block_owner_deletion
            ),
            ("run-uid", Some(true), Some(true))
        );
    }

    /// What the apiserver and the kubelet hold a pod to: each mount names a declared volume (or the pod
    /// is refused), and the pod runs as the image's non-root user (or the kubelet will not start an
    /// image whose user it cannot tell is non-root); /tmp is a small emptyDir, the one writable path.
    #[test]
    fn the_pod_runs_as_the_images_user_and_mounts_only_declared_volumes() {
        let run = provision_run();
        for config in [
            OperatorConfig::for_namespace("ns"),
            OperatorConfig {
                clickhouse_ca_configmap: Some("corp-ca".into()),
                ..OperatorConfig::for_namespace("ns")
            },
        ] {
            let pod = pod_of(&run, &config);
            let security = pod.security_context.clone().unwrap();
            assert_eq!(
                (
                    security.run_as_non_root,
                    security.run_as_user,
                    security.run_as_group
                ),
                (Some(true), Some(65_532), Some(65_532))
            );
            let volumes = pod.volumes.clone().unwrap_or_default();
            for m in pod.containers[0].volume_mounts.clone().unwrap_or_default() {
                assert!(
                    volumes.iter().any(|v| v.name == m.name),
                    "{} mounts {:?}, which no volume declares: {volumes:?}",
                    m.mount_path,
                    m.name
                );
            }
            let tmp = volumes
                .iter()
                .find(|v| v.name == "tmp")
                .expect("a tmp volume");
            assert_eq!(
                tmp.empty_dir.as_ref().and_then(|e| e.size_limit.clone()),
                Some(Quantity("16Mi".into()))
            );
        }
    }

    /// Pod Security "restricted" is met by the container on its own, not only through the pod's level:
    /// non-root, RuntimeDefault seccomp, no privilege escalation, every capability dropped, and a
    /// read-only root filesystem besides.
    #[test]
    fn the_container_holds_itself_to_restricted() {
        let c = restricted_container_security_context();
        assert_eq!(c.run_as_non_root, Some(true));
        assert_eq!(
            c.seccomp_profile.map(|p| p.type_),
            Some("RuntimeDefault".to_owned())
        );
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(
            c.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_owned()])
        );
        assert_eq!(c.read_only_root_filesystem, Some(true));
    }

    fn mount(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..VolumeMount::default()
        }
    }

    #[test]
    fn a_ca_configmap_is_mounted_read_only_and_named_to_the_provisioner() {
        let run = provision_run();
        let pod = pod_of(&run, &OperatorConfig::for_namespace("ns"));
        assert_eq!(pod.volumes.unwrap().len(), 1, "only /tmp without a CA");
        let env_names: Vec<String> = pod.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(
            !env_names
                .iter()
                .any(|n| n.contains("CA_FILE") || n.contains("CLUSTER"))
        );

        let config = OperatorConfig {
            clickhouse_ca_configmap: Some("corp-ca".into()),
            clickhouse_cluster: Some("prod".into()),
            ..OperatorConfig::for_namespace("ns")
        };
        let pod = pod_of(&run, &config);
        let volume = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == CA_VOLUME)
            .unwrap();
        let source = volume.config_map.unwrap();
        assert_eq!(source.name, "corp-ca");
        assert_eq!(source.items.unwrap()[0].key, "ca.crt");
        let container = &pod.containers[0];
        let mount = container
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.name == CA_VOLUME)
            .unwrap();
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            ("/etc/sentry-tenants/clickhouse-ca", Some(true))
        );
        let env = |name: &str| {
            container
                .env
                .as_ref()
                .unwrap()
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value.clone())
        };
        assert_eq!(
            env(env::CLICKHOUSE_CA_FILE).as_deref(),
            Some("/etc/sentry-tenants/clickhouse-ca/ca.crt")
        );
        assert_eq!(env(env::CLICKHOUSE_CLUSTER).as_deref(), Some("prod"));
        assert_eq!(
            env(env::CLICKHOUSE_PREFIX),
            None,
            "the Job derives it as the operator does"
        );
        let prefixed = OperatorConfig {
            clickhouse_prefix: Some("prod".into()),
            ..config
        };
        let pod = build_job(&run, &prefixed)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        let prefix = pod.containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == env::CLICKHOUSE_PREFIX)
            .and_then(|e| e.value.clone());
        assert_eq!(prefix.as_deref(), Some("prod"));
    }

    #[test]
    fn volume_mounts_are_deduplicated_by_name_and_by_path() {
        let out = dedup_volume_mounts(
            default_volume_mounts(),
            vec![
                mount("tmp", "/elsewhere"),     // same volume name as the default
                mount("scratch", "/tmp"),       // same path as the default
                mount("ca", "/etc/ssl/custom"), // distinct: kept
                mount("ca", "/etc/ssl/custom"), // exact repeat: dropped
            ],
        );
        let got: Vec<_> = out
            .iter()
            .map(|m| (m.name.as_str(), m.mount_path.as_str()))
            .collect();
        assert_eq!(got, [("tmp", "/tmp"), ("ca", "/etc/ssl/custom")]);
    }
}
