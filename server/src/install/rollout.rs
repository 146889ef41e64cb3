//! Waiting for the operator's rollout, and saying why it cannot finish as soon as a pod shows it: an
//! image that cannot be pulled, a container that crashes, a pod nobody can schedule, a pod the
//! namespace's Pod Security admission refuses. Waiting out `--timeout` for any of these tells a person
//! nothing they could not have read off `kubectl describe` minutes earlier.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};

use super::OPERATOR_POD_SELECTOR;
use super::progress::Progress;
use super::wait::{InstallError, api_error, poll};

/// Container waiting reasons a pod does not get out of by itself (the kubelet retries with a backoff,
/// but the cause is outside the pod: a wrong image, missing credentials, a crashing binary).
const STUCK_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// A crash may be transient (the API unreachable for a moment at start): the kubelet reports
/// `CrashLoopBackOff` from the first exit on. It is a crash loop from this many restarts on.
const CRASH_LOOP_RESTARTS: i32 = 3;

/// Annotation a Deployment and its ReplicaSets carry: which revision of the pod template they are.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// Waits until the Deployment's new pods are all updated and available, saying how far along it is,
/// and ends early with the pods' own reason when the rollout cannot finish. `applied` is the
/// Deployment as the apply answered: an unchanged one is already rolled out.
pub async fn wait_rollout(
    client: &Client,
    ns: &str,
    name: &str,
    applied: Option<Deployment>,
    patience: (std::time::Duration, std::time::Duration),
    progress: &Progress,
) -> Result<(), InstallError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let what = format!("Deployment {ns}/{name} to roll out");
    let mut known = applied;
    poll(&what, patience, progress, ns, async || {
        let d = match known.take() {
            Some(d) => d,
            None => api
                .get(name)
                .await
                .map_err(|e| api_error(&format!("get Deployment {name}"), &e))?,
        };
        let progress_line = rollout_progress(&d);
        progress.step(&format!(
            "waiting for Deployment {ns}/{name}: {progress_line}"
        ));
        if rolled_out(&d) {
            return Ok(Some(()));
        }
        match why_stuck(client, ns, &d).await? {
            Some(reason) => Err(InstallError::RolloutStuck {
                deployment: format!("{ns}/{name}"),
                reason,
            }),
            None => Ok(None),
        }
    })
    .await?;
    progress.done(&format!("Deployment {ns}/{name} is available"));
    Ok(())
}

/// The Deployment's status, or an empty one before the controller wrote any.
fn status_of(d: &Deployment) -> std::borrow::Cow<'_, DeploymentStatus> {
    match &d.status {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(DeploymentStatus::default()),
    }
}

fn wanted_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rollout_progress(d: &Deployment) -> String {
    let want = wanted_replicas(d);
    let s = status_of(d);
    format!(
        "{}/{want} updated, {}/{want} available",
        s.updated_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0)
    )
}

/// `kubectl rollout status`'s rule: the controller saw this generation, every replica runs the new
/// template and is available, and no old replica is left.
pub fn rolled_out(d: &Deployment) -> bool {
    let want = wanted_replicas(d);
    let generation = d.metadata.generation.unwrap_or(0);
    let s = status_of(d);
    s.observed_generation.unwrap_or(0) >= generation
        && s.updated_replicas.unwrap_or(0) >= want
        && s.available_replicas.unwrap_or(0) >= want
        && s.replicas.unwrap_or(0) == want
}

/// Why the rollout cannot finish, if the Deployment or one of its new pods says so already.
async fn why_stuck(
    client: &Client,
    ns: &str,
    d: &Deployment,
) -> Result<Option<String>, InstallError> {
    // Until the controller observed this generation, its conditions and revision annotation still
    // describe the previous template: the old pods' troubles are not this rollout's.
    let generation = d.metadata.generation.unwrap_or(0);
    let observed = d.status.as_ref().and_then(|s| s.observed_generation);
    if observed.unwrap_or(0) < generation {
        return Ok(None);
    }
    if let Some(reason) = deployment_failure(d) {
        return Ok(Some(reason));
    }
    let Some(hash) = new_template_hash(client, ns, d).await? else {
        return Ok(None);
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("{OPERATOR_POD_SELECTOR},pod-template-hash={hash}");
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| api_error("list the operator's pods", &e))?;
    for pod in &list.items {
        let Some(problem) = pod_problem(pod) else {
            continue;
        };
        let last_line = match problem.crash_looping {
            true => last_log_line(&pods, &pod.name_any(), &problem.container).await,
            false => None,
        };
        return Ok(Some(match last_line {
            Some(line) => format!("{}; its last log line: {line}", problem.text),
            None => problem.text,
        }));
    }
    Ok(None)
}

/// What the Deployment's own conditions say: pods its ReplicaSet could not create (Pod Security
/// admission, a quota) or a rollout past its progress deadline.
pub fn deployment_failure(d: &Deployment) -> Option<String> {
    let conditions = d.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| {
        let failed = (c.type_ == "ReplicaFailure" && c.status == "True")
            || (c.type_ == "Progressing"
                && c.status == "False"
                && c.reason.as_deref() == Some("ProgressDeadlineExceeded"));
        failed.then(|| {
            format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or(&c.type_),
                c.message.as_deref().unwrap_or("no message")
            )
        })
    })
}

/// The `pod-template-hash` of the Deployment's current ReplicaSet (the one at its revision), once
/// the Deployment controller made it.
async fn new_template_hash(
    client: &Client,
    ns: &str,
    d: &Deployment,
) -> Result<Option<String>, InstallError> {
    let Some(revision) = d.annotations().get(REVISION) else {
        return Ok(None);
    };
    let uid = d.uid().unwrap_or_default();
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let list = sets
        .list(&ListParams::default().labels(OPERATOR_POD_SELECTOR))
        .await
        .map_err(|e| api_error("list the operator's ReplicaSets", &e))?;
    Ok(list
        .items
        .iter()
        .filter(|rs| rs.owner_references().iter().any(|o| o.uid == uid))
        .find(|rs| rs.annotations().get(REVISION) == Some(revision))
        .and_then(|rs| rs.labels().get("pod-template-hash").cloned()))
}

/// A pod's reason for not becoming ready that it will not get over by itself.
#[derive(Debug, PartialEq, Eq)]
pub struct PodProblem {
    pub text: String,
    pub container: String,
    pub crash_looping: bool,
}

pub fn pod_problem(pod: &Pod) -> Option<PodProblem> {
    let name = pod.name_any();
    let status = pod.status.as_ref()?;
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in containers {
        let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let settled = reason != "CrashLoopBackOff" || c.restart_count >= CRASH_LOOP_RESTARTS;
        if !STUCK_WAITING.contains(&reason) || !settled {
            continue;
        }
        let message = waiting
            .message
            .as_deref()
            .filter(|m| !m.is_empty())
            .map(|m| format!(": {}", one_line(m)))
            .unwrap_or_default();
        return Some(PodProblem {
            text: format!("pod {name}, container {}: {reason}{message}", c.name),
            container: c.name.clone(),
            crash_looping: reason == "CrashLoopBackOff",
        });
    }
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    })?;
    Some(PodProblem {
        text: format!(
            "pod {name} is Pending, Unschedulable: {}",
            one_line(unschedulable.message.as_deref().unwrap_or("no message"))
        ),
        container: String::new(),
        crash_looping: false,
    })
}

/// The last line the crashed container printed (its previous run), if the log can be read.
async fn last_log_line(pods: &Api<Pod>, pod: &str, container: &str) -> Option<String> {
    let params = LogParams {
        container: Some(container.to_owned()),
        previous: true,
        tail_lines: Some(1),
        limit_bytes: Some(4096),
        ..LogParams::default()
    };
    let log = pods.logs(pod, &params).await.ok()?;
    log.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(one_line)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sentry-tenants-abc"},
            "status": status,
        }))
        .unwrap()
    }

    fn waiting(reason: &str, message: &str) -> Pod {
        restarted(reason, message, 0)
    }

    fn restarted(reason: &str, message: &str, restarts: i32) -> Pod {
        pod(serde_json::json!({"containerStatuses": [{
            "name": "operator", "image": "x", "imageID": "", "ready": false, "restartCount": restarts,
            "state": {"waiting": {"reason": reason, "message": message}},
        }]}))
    }

    #[test]
    fn a_pull_error_is_named_with_the_pod_container_and_message() {
        assert_eq!(
            pod_problem(&waiting(
                "ImagePullBackOff",
                "Back-off pulling image \"registry.invalid/x:1\"\n"
            )),
            Some(PodProblem {
                text: "pod sentry-tenants-abc, container operator: ImagePullBackOff: Back-off pulling image \"registry.invalid/x:1\"".into(),
                container: "operator".into(),
                crash_looping: false,
            })
        );
        assert!(
            pod_problem(&restarted("CrashLoopBackOff", "back-off 40s", 3))
                .unwrap()
                .crash_looping
        );
    }

    #[test]
    fn a_crash_or_two_is_not_yet_a_crash_loop() {
        for restarts in [0, 1, 2] {
            assert_eq!(
                pod_problem(&restarted("CrashLoopBackOff", "back-off 10s", restarts)),
                None,
                "{restarts} restarts"
            );
        }
    }

    #[test]
    fn a_container_still_starting_is_no_problem() {
        assert_eq!(pod_problem(&waiting("ContainerCreating", "")), None);
        assert_eq!(pod_problem(&waiting("PodInitializing", "")), None);
        assert_eq!(pod_problem(&pod(serde_json::json!({}))), None);
    }

    #[test]
    fn an_unschedulable_pod_says_why_the_scheduler_refused_it() {
        let p = pod(serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient memory.",
        }]}));
        assert_eq!(
            pod_problem(&p).unwrap().text,
            "pod sentry-tenants-abc is Pending, Unschedulable: 0/3 nodes are available: 3 Insufficient memory."
        );
    }

    fn deployment(conditions: serde_json::Value) -> Deployment {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "sentry-tenants", "generation": 2},
            "spec": {"replicas": 1, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_security_rejection_is_read_off_the_deployment() {
        let d = deployment(serde_json::json!([
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "message": "pods \"sentry-tenants-abc\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true"},
        ]));
        assert_eq!(
            deployment_failure(&d).as_deref(),
            Some(
                "FailedCreate: pods \"sentry-tenants-abc\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true"
            )
        );
        let late = deployment(serde_json::json!([
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"x\" has timed out progressing."},
        ]));
        assert_eq!(
            deployment_failure(&late).as_deref(),
            Some("ProgressDeadlineExceeded: ReplicaSet \"x\" has timed out progressing.")
        );
        let fine = deployment(serde_json::json!([
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            {"type": "ReplicaFailure", "status": "False", "reason": "FailedCreate"},
        ]));
        assert_eq!(deployment_failure(&fine), None);
    }

    #[test]
    fn rolled_out_needs_every_replica_updated_available_and_no_old_one() {
        let with = |status: serde_json::Value| -> Deployment {
            serde_json::from_value(serde_json::json!({
                "metadata": {"generation": 3},
                "spec": {"replicas": 2, "selector": {}, "template": {}},
                "status": status,
            }))
            .unwrap()
        };
        let done = serde_json::json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
        assert!(rolled_out(&with(done.clone())));
        for (field, value) in [
            ("observedGeneration", 2),
            ("replicas", 3),
            ("updatedReplicas", 1),
            ("availableReplicas", 1),
        ] {
            let mut status = done.clone();
            status[field] = value.into();
            assert!(!rolled_out(&with(status)), "{field} = {value}");
        }
    }
}
