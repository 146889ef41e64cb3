//! One test per RunJob reconciler rule, each named after the rule or the seed-review bug it guards.
//! Runs against the in-memory API (kube-fake-client); `sentry_tenants_tests` documents what the harness
//! plays (Job controller, finalizer-aware deletes).

use std::sync::Arc;

use http::Method;
use jiff::SignedDuration;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{ObjectMeta, Patch, PatchParams};
use sentry_tenants::controller::{runjob, tenant};
use sentry_tenants::crd::{RUNJOB_FINALIZER, RunAction, RunJob, RunJobSpec, RunPhase, TenantPhase};
use sentry_tenants_tests::{Cluster, NS, requeue_secs};
use serde_json::json;

const RUN: &str = "acme-provision-1";

async fn cluster_with_run() -> Cluster {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, RUN).await;
    c
}

/// A Job named like the run that nothing of ours controls (an older run's, still terminating).
fn foreign_job() -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(RUN.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        ..Job::default()
    }
}

fn reasons(c: &Cluster) -> Vec<String> {
    c.log
        .events()
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn provision_run_goes_pending_running_succeeded_and_tenant_active_only_after_report() {
    let c = cluster_with_run().await;
    c.settle().await;
    assert_eq!(c.run(RUN).await.unwrap().phase(), Some(RunPhase::Pending));
    assert_eq!(
        c.tenant("acme").await.phase(),
        Some(TenantPhase::Provisioning)
    );

    c.job_running(RUN).await;
    c.settle().await;
    assert_eq!(c.run(RUN).await.unwrap().phase(), Some(RunPhase::Running));

    c.job_succeeded(RUN).await;
    c.settle().await;
    assert_eq!(c.run(RUN).await.unwrap().phase(), Some(RunPhase::Succeeded));
    // A Job succeeding is no evidence of a database: only the provisioner's report is.
    assert_ne!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));

    c.report_provisioned("acme").await;
    c.settle().await;
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Active));
}

/// Seed bug: "CR always recreated … AlreadyExists errors on subsequent reconciles".
#[tokio::test]
async fn get_or_create_never_makes_a_second_job_on_rereconcile_restart_or_race() {
    let c = cluster_with_run().await;
    let stale_run = c.run(RUN).await.unwrap(); // as a second replica would hold it: no status yet
    for _ in 0..5 {
        c.reconcile_run(RUN).await;
    }
    // A restarted operator (empty caches) or a racing replica reconciling the stale object: the
    // create hits AlreadyExists, which is read as "already there", not retried as an error.
    c.clear_stores();
    let action = runjob::reconcile(Arc::new(stale_run), Arc::clone(&c.ctx)).await;
    assert!(
        action.is_ok(),
        "AlreadyExists must not become an error loop: {action:?}"
    );

    assert_eq!(
        c.log.creates_of("jobs"),
        1,
        "exactly one Job create succeeded"
    );
    let jobs = c.jobs().list(&Default::default()).await.unwrap().items;
    assert_eq!(jobs.len(), 1);
    let job_ref = c
        .run(RUN)
        .await
        .unwrap()
        .status
        .unwrap()
        .job_ref
        .expect("jobRef");
    assert_eq!(
        job_ref.uid,
        jobs[0].uid().unwrap(),
        "jobRef names the uid of the Job really created"
    );
}

/// Seed bug: "Finalizer never performs cleanup: … doesn't return early on deletion".
#[tokio::test]
async fn deletion_first_deletes_job_in_foreground_removes_finalizer_and_does_nothing_else() {
    let c = cluster_with_run().await;
    c.settle().await;
    let job_uid = c.job(RUN).await.expect("Job created").uid().unwrap();
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    assert!(
        c.run(RUN)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some(),
        "finalizer holds it"
    );

    c.log.clear();
    c.reconcile_run(RUN).await;
    let writes = c.log.writes();
    let job_delete = writes
        .iter()
        .find(|w| w.method == Method::DELETE && w.resource() == "jobs")
        .expect("Job deleted");
    assert_eq!(
        job_delete.body["propagationPolicy"], "Foreground",
        "batch/v1's default would orphan the pods, Background would not wait for them"
    );
    assert_eq!(
        job_delete.body["preconditions"]["uid"], job_uid,
        "deletes only the Job this run created"
    );
    let other: Vec<_> = writes
        .iter()
        .filter(|w| !(w.method == Method::DELETE && w.resource() == "jobs"))
        .collect();
    let paths: Vec<(String, &str)> = other
        .iter()
        .map(|w| {
            (
                w.method.to_string(),
                w.path.rsplit("/namespaces/").next().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            ("PATCH".to_owned(), "sentry-tenants/tenants/acme/status"),
            (
                "PATCH".to_owned(),
                "sentry-tenants/runjobs/acme-provision-1"
            ),
        ],
        "only the stopped run's record in its tenant's history and the finalizer removal follow, no \
         status write for a deleting run"
    );
    assert_eq!(
        c.tenant("acme").await.history()[0].message,
        format!("Run failed: {}", runjob::STOPPED)
    );
    assert!(
        c.run(RUN).await.is_none(),
        "RunJob gone once its finalizer is removed"
    );
    assert!(c.job(RUN).await.is_none());
}

/// Rule 1 while the garbage collector deletes the Job's pods (a Foreground deletion): the run keeps
/// its finalizer, unfinished, so a deleted tenant's Deprovision run waits for the pod; the DELETE is
/// not sent again; once the Job is gone, the finalizer goes.
#[tokio::test]
async fn a_deleted_run_stays_until_its_job_and_pods_are_gone() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_running(RUN).await;
    c.settle().await;
    c.hold_job_deletion_for_its_pods(RUN).await;
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    let job_deletes = |c: &Cluster| {
        c.log
            .writes()
            .into_iter()
            .filter(|w| w.method == Method::DELETE && w.resource() == "jobs")
            .count()
    };

    c.reconcile_run(RUN).await;
    let job = c.job(RUN).await.expect("the Job waits for its pods");
    assert!(job.metadata.deletion_timestamp.is_some());
    let run = c.run(RUN).await.expect("the run waits for its Job");
    assert!(run.finalizers().iter().any(|f| f == RUNJOB_FINALIZER));
    assert!(!run.is_finished());
    assert_eq!(job_deletes(&c), 1);
    c.reconcile_run(RUN).await;
    assert_eq!(
        job_deletes(&c),
        1,
        "a Job already being deleted is not asked again"
    );
    assert!(c.run(RUN).await.is_some());

    c.job_pods_gone(RUN).await;
    assert!(c.job(RUN).await.is_none());
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none(), "gone with its Job");
}

/// Rule 1 for a run deleted after its Job finished but before its reconcile copied the Job's status:
/// its record is the Job's outcome, not "stopped" (the Job is gone by the time its finalizer goes).
#[tokio::test]
async fn a_run_deleted_just_after_its_job_finished_keeps_the_jobs_outcome() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_succeeded(RUN).await;
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    assert!(
        !c.run(RUN).await.unwrap().is_finished(),
        "the status not copied yet"
    );
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none());
    let history = c.tenant("acme").await.history().to_vec();
    assert_eq!(
        history
            .iter()
            .map(|h| (h.name.as_str(), h.phase))
            .collect::<Vec<_>>(),
        [(RUN, RunPhase::Succeeded)]
    );
}

/// Rule 1 for a finished run deleted before rule 6 cleaned it up (by hand, or with its tenant): its
/// outcome stays in the tenant's history, as rule 6 would have kept it.
#[tokio::test]
async fn a_finished_run_deleted_before_its_cleanup_keeps_its_outcome() {
    let c = cluster_with_run().await;
    // An earlier run's record is there already: only this run's own record counts as kept.
    c.create_run("acme", RunAction::Suspend, "acme-suspend-1")
        .await;
    c.settle().await;
    c.job_succeeded("acme-suspend-1").await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(600));
    c.settle().await;
    assert!(c.run("acme-suspend-1").await.is_none(), "cleaned up");
    assert_eq!(c.tenant("acme").await.history().len(), 1);
    c.settle().await;
    c.job_failed(RUN, "BackoffLimitExceeded", "grants refused")
        .await;
    c.settle().await;
    let run = c.run(RUN).await.unwrap();
    assert_eq!(run.phase(), Some(RunPhase::Failed));
    assert_eq!(c.tenant("acme").await.history().len(), 1);
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none());
    let history = c.tenant("acme").await.history().to_vec();
    assert_eq!(history.len(), 2);
    assert_eq!(
        (
            history[0].name.as_str(),
            history[0].phase,
            history[0].message.as_str()
        ),
        (
            RUN,
            RunPhase::Failed,
            run.status.unwrap().message.unwrap().as_str()
        )
    );
}

#[tokio::test]
async fn deleting_run_that_never_made_a_job_creates_none() {
    let c = cluster_with_run().await;
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    c.reconcile_run(RUN).await;
    assert_eq!(c.log.creates_of("jobs"), 0);
    let job_deletes = c
        .log
        .writes()
        .into_iter()
        .filter(|w| w.method == Method::DELETE && w.resource() == "jobs")
        .count();
    assert_eq!(job_deletes, 0, "no Job, nothing to delete");
    assert!(c.run(RUN).await.is_none());
}

#[tokio::test]
async fn job_is_controlled_by_its_runjob_and_runjob_owned_by_its_tenant() {
    let c = cluster_with_run().await;
    c.reconcile_run(RUN).await;
    let run = c.run(RUN).await.unwrap();
    let tenant = c.tenant("acme").await;
    let job = c.job(RUN).await.unwrap();
    let owner = &job.owner_references()[0];
    assert_eq!(job.owner_references().len(), 1);
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("RunJob", run.uid().unwrap().as_str())
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert!(
        run.owner_references()
            .iter()
            .any(|o| o.kind == "Tenant" && Some(&o.uid) == tenant.uid().as_ref())
    );
}

#[tokio::test]
async fn hand_made_runjob_gets_finalizer_and_tenant_owner_in_one_patch() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    create_hand_made_run(&c, vec![]).await;
    c.reconcile_run(RUN).await;
    assert_eq!(metadata_patches(&c), 1);
    let run = c.run(RUN).await.unwrap();
    assert_eq!(run.finalizers(), [RUNJOB_FINALIZER]);
    assert_eq!(run.owner_references()[0].kind, "Tenant");
}

/// A RunJob applied from YAML that carries our finalizer (exported from an earlier run) still lacks its
/// owner: the finalizer alone does not make rule 2 hold.
#[tokio::test]
async fn hand_made_runjob_with_the_finalizer_still_gets_its_tenant_owner() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    create_hand_made_run(&c, vec![RUNJOB_FINALIZER.to_owned()]).await;
    c.reconcile_run(RUN).await;
    assert_eq!(metadata_patches(&c), 1);
    let run = c.run(RUN).await.unwrap();
    assert_eq!(run.finalizers(), [RUNJOB_FINALIZER]);
    assert_eq!(run.owner_references()[0].kind, "Tenant");
}

/// A Provision RunJob for acme as `kubectl create` makes it: no owner, and the finalizers given.
async fn create_hand_made_run(c: &Cluster, finalizers: Vec<String>) {
    let run = RunJob {
        metadata: ObjectMeta {
            name: Some(RUN.into()),
            namespace: Some(NS.into()),
            finalizers: Some(finalizers),
            ..ObjectMeta::default()
        },
        spec: RunJobSpec::new("acme", RunAction::Provision),
        status: None,
    };
    c.runjobs().create(&Default::default(), &run).await.unwrap();
}

fn metadata_patches(c: &Cluster) -> usize {
    c.log
        .writes()
        .into_iter()
        .filter(|w| {
            w.method == Method::PATCH && w.resource() == "runjobs" && !w.path.ends_with("/status")
        })
        .count()
}

#[tokio::test]
async fn job_runs_own_image_as_provisioner_restricted_with_one_tmp_mount() {
    let c = cluster_with_run().await;
    c.reconcile_run(RUN).await;
    let job = c.job(RUN).await.unwrap();
    let spec = job.spec.unwrap();
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("sentry-tenants-provisioner")
    );
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let psc = pod.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(sentry_tenants::DEFAULT_IMAGE)
    );
    assert_eq!(
        container.args.as_deref(),
        Some(&["provision-tenant".to_owned()][..])
    );
    let sc = container.security_context.clone().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
    let mounts = container.volume_mounts.clone().unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(
        (mounts[0].name.as_str(), mounts[0].mount_path.as_str()),
        ("tmp", "/tmp")
    );
    assert_eq!(pod.volumes.unwrap().len(), 1);
    assert_eq!(spec.backoff_limit, Some(2));
    assert_eq!(spec.active_deadline_seconds, Some(600));
}

/// Seed bug: the per-run Secret and its drift check that compared the wrong key on every reconcile.
#[tokio::test]
async fn run_parameters_are_plain_env_and_admin_credentials_are_secret_refs_no_secret_written() {
    let c = cluster_with_run().await;
    c.settle().await;
    let job = c.job(RUN).await.unwrap();
    let env = job.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let plain = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    let run = c.run(RUN).await.unwrap();
    assert_eq!(plain("SENTRY_TENANTS_RUN_ID"), run.uid());
    assert_eq!(plain("SENTRY_TENANTS_TENANT").as_deref(), Some("acme"));
    assert_eq!(plain("SENTRY_TENANTS_ACTION").as_deref(), Some("Provision"));
    assert_eq!(plain("SENTRY_TENANTS_NAMESPACE").as_deref(), Some(NS));
    for (var, key) in [
        ("SENTRY_TENANTS_CLICKHOUSE_USER", "username"),
        ("SENTRY_TENANTS_CLICKHOUSE_PASSWORD", "password"),
    ] {
        let e = env.iter().find(|e| e.name == var).unwrap();
        assert!(e.value.is_none(), "{var} must not carry a value");
        let r = e.value_from.clone().unwrap().secret_key_ref.unwrap();
        assert_eq!((r.name.as_str(), r.key.as_str()), ("clickhouse-admin", key));
    }
    let secret_requests = c
        .log
        .all()
        .into_iter()
        .filter(|r| r.resource() == "secrets")
        .count();
    assert_eq!(secret_requests, 0, "the operator never touches Secrets");
}

#[tokio::test]
async fn status_follows_job_failure_with_reason_message_and_cleanup_time() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_failed(
        RUN,
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    .await;
    c.settle().await;
    let status = c.run(RUN).await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Failed));
    assert_eq!(
        status.message.as_deref(),
        Some("Job failed (BackoffLimitExceeded): Job has reached the specified backoff limit")
    );
    let done = status.completion_time.unwrap().0;
    assert_eq!(
        status.cleanup_at.unwrap().0,
        done + SignedDuration::from_secs(300)
    );
    let finished = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Finished")
        .unwrap();
    assert_eq!(
        (finished.status.as_str(), finished.reason.as_str()),
        ("True", "Failed")
    );
    assert_eq!(c.tenant("acme").await.phase(), Some(TenantPhase::Failed));
}

/// The pod is read for its outcome once the run has finished, not on every reconcile of a run in
/// progress (each read is a list and a log fetch through the node).
#[tokio::test]
async fn a_run_in_progress_reads_no_pod() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_running(RUN).await;
    c.settle().await;
    c.reconcile_run(RUN).await;
    assert_eq!(c.run(RUN).await.unwrap().phase(), Some(RunPhase::Running));
    let pod_reads = c.log.count(|r| r.path.contains("/pods"));
    assert_eq!(pod_reads, 0, "{:#?}", c.log.all());
    c.job_succeeded(RUN).await;
    c.settle().await;
    assert!(
        c.log.count(|r| r.path.contains("/pods")) > 0,
        "the finished run's pod is read"
    );
}

/// What is kept of a finished run's log is its tail, bounded in lines and bytes by the apiserver (a
/// provisioner that looped must not send megabytes into a Tenant's status).
#[tokio::test]
async fn a_finished_runs_log_is_read_as_its_tail_bounded_in_lines_and_bytes() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_failed_in_pod(RUN, "ClickHouse refused the statement")
        .await;
    c.settle().await;
    let log_reads: Vec<_> = c
        .log
        .all()
        .into_iter()
        .filter(|r| r.path.ends_with("/log"))
        .collect();
    assert!(!log_reads.is_empty());
    for read in log_reads {
        let params: Vec<&str> = read.query.split('&').collect();
        assert!(params.contains(&"tailLines=20"), "{}", read.query);
        assert!(params.contains(&"limitBytes=4096"), "{}", read.query);
    }
}

/// Rule 6's delete: a run already gone (another replica cleaned it up) is done; any other refusal
/// fails the reconcile, so the finished run is retried instead of living forever.
#[tokio::test]
async fn cleaning_up_a_gone_run_succeeds_and_a_refused_cleanup_fails_the_reconcile() {
    let c = run_due_for_cleanup().await;
    refused_then_not_found(
        &c,
        Method::DELETE,
        RUNJOB_PATH,
        "runjobs.sentry.io \"acme-provision-1\" not found",
    )
    .await;
}

/// Rule 6's order: the outcome is kept on the Tenant before the run goes. A refused history write fails
/// the reconcile and keeps the run (no outcome lost); a Tenant gone meanwhile has no history to keep.
#[tokio::test]
async fn a_refused_history_write_keeps_the_run_and_a_gone_tenant_does_not_hold_it() {
    let c = run_due_for_cleanup().await;
    const STATUS: &str = "/tenants/acme/status";
    refused_then_not_found(
        &c,
        Method::PATCH,
        STATUS,
        "tenants.sentry.io \"acme\" not found",
    )
    .await;
    assert_eq!(
        c.log.count(|r| r.method == Method::DELETE
            && r.path.ends_with(RUNJOB_PATH)
            && r.status < 300),
        1
    );
}

/// The controller's requeue has millisecond resolution in practice: a wake-up due in a fraction of a
/// millisecond past a whole one is rounded up (an early wake-up finds the run not yet due and requeues).
#[test]
fn a_requeue_is_rounded_up_to_the_millisecond_never_early() {
    let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    let at = |nanos: i64| now + SignedDuration::from_nanos(nanos);
    assert_eq!(
        requeue_secs(&sentry_tenants::controller::requeue_at(at(1_500_000), now)),
        Some(0.002)
    );
    assert_eq!(
        requeue_secs(&sentry_tenants::controller::requeue_at(at(2_000_000), now)),
        Some(0.002)
    );
    assert_eq!(
        requeue_secs(&sentry_tenants::controller::requeue_at(at(1), now)),
        Some(0.001)
    );
    assert_eq!(
        requeue_secs(&sentry_tenants::controller::requeue_at(at(-5), now)),
        Some(0.0)
    );
}

/// A Job condition without a message (as some controllers write them) is described by its reason
/// alone, not with a dangling colon.
#[tokio::test]
async fn a_job_failure_without_a_message_is_described_by_its_reason() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_failed(RUN, "DeadlineExceeded", "").await;
    c.settle().await;
    let status = c.run(RUN).await.unwrap().status.unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some("Job failed (DeadlineExceeded)")
    );
}

/// Reviewers: "we don't want these CRs just living forever on the cluster".
#[tokio::test]
async fn finished_run_is_cleaned_up_at_ttl_requeued_for_that_moment_and_outcome_kept() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_succeeded(RUN).await;
    c.settle().await;
    let action = c.reconcile_run(RUN).await;
    assert_eq!(
        requeue_secs(&action),
        Some(300.0),
        "requeued for completionTime + ttl"
    );

    c.clock.advance(SignedDuration::from_secs(299));
    let action = c.reconcile_run(RUN).await;
    assert_eq!(requeue_secs(&action), Some(1.0));
    assert!(c.run(RUN).await.is_some(), "not deleted early");

    c.clock.advance(SignedDuration::from_secs(1));
    c.log.clear();
    c.reconcile_run(RUN).await;
    let delete = c
        .log
        .writes()
        .into_iter()
        .find(|w| w.method == Method::DELETE && w.resource() == "runjobs");
    assert_eq!(
        delete.expect("RunJob deleted").body["propagationPolicy"],
        "Background"
    );
    c.settle().await;
    assert!(c.run(RUN).await.is_none(), "RunJob gone");
    assert!(c.job(RUN).await.is_none(), "Job gone with it");
    let history_writes = c
        .log
        .writes()
        .into_iter()
        .filter(|w| w.path.ends_with("/tenants/acme/status"))
        .filter(|w| w.body.to_string().contains("/status/history"))
        .count();
    assert_eq!(
        history_writes, 1,
        "the record rule 6 kept is not written again when the deleted run's finalizer goes"
    );

    let tenant = c.tenant("acme").await;
    let record = &tenant.history()[0];
    assert_eq!(
        (record.name.as_str(), record.action, record.phase),
        (RUN, RunAction::Provision, RunPhase::Succeeded)
    );
    // With the run gone the tenant still knows provisioning was attempted and how it ended.
    assert_eq!(
        tenant.phase(),
        Some(TenantPhase::Pending),
        "succeeded Job alone is not Active"
    );
}

#[tokio::test]
async fn run_for_missing_tenant_fails_with_clear_message_and_no_job() {
    let c = Cluster::new().await;
    let bare = RunJob {
        metadata: ObjectMeta {
            name: Some("ghost-provision-1".into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: RunJobSpec::new("ghost", RunAction::Provision),
        status: None,
    };
    c.runjobs()
        .create(&Default::default(), &bare)
        .await
        .unwrap();
    assert_fails_without_a_job(
        &c,
        "ghost-provision-1",
        "Run failed: tenant \"ghost\" does not exist in namespace \"sentry-tenants\"",
    )
    .await;
}

/// Rule 3's outcome: once settled, the run is Failed with `message` and no Job was ever created.
async fn assert_fails_without_a_job(c: &Cluster, run: &str, message: &str) {
    c.settle().await;
    let status = c.run(run).await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Failed));
    assert_eq!(status.message.as_deref(), Some(message));
    assert_eq!(c.log.creates_of("jobs"), 0);
}

/// Rule 3's other half: a tenant that is going away (held here by someone else's finalizer) gets no
/// new Job either.
#[tokio::test]
async fn run_for_a_tenant_being_deleted_fails_with_clear_message_and_no_job() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    let hold = json!({"metadata": {"finalizers": ["example.com/hold"]}});
    c.tenants()
        .patch("acme", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    c.tenants()
        .delete("acme", &Default::default())
        .await
        .unwrap();
    c.create_run("acme", RunAction::Provision, RUN).await;
    assert_fails_without_a_job(&c, RUN, "Run failed: tenant \"acme\" is being deleted").await;
}

/// Rule 3 for a run made for an earlier Tenant of the same name (deleted and created again before the
/// run started): it is not the new tenant's run, so it fails and makes no Job.
#[tokio::test]
async fn a_run_made_for_an_earlier_tenant_of_the_name_fails_with_clear_message_and_no_job() {
    let c = Cluster::new().await;
    let earlier = c.create_tenant("acme").await;
    c.tenants()
        .delete("acme", &Default::default())
        .await
        .unwrap();
    let now = c.create_tenant("acme").await;
    assert_ne!(earlier.uid(), now.uid());
    let run = tenant::new_run_job(&earlier, RUN, RunAction::Provision);
    c.runjobs().create(&Default::default(), &run).await.unwrap();
    assert_fails_without_a_job(
        &c,
        RUN,
        "Run failed: the tenant \"acme\" this run was made for was deleted (a new tenant has its name)",
    )
    .await;
}

/// Rule 3 for a Deprovision run made for a tenant that is not being deleted (by hand, or left from
/// a deletion that was undone): Deprovision only carries out a deleted tenant's reclaim policy, so
/// it fails and makes no Job.
#[tokio::test]
async fn a_deprovision_run_for_a_tenant_not_being_deleted_fails_with_clear_message_and_no_job() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Deprovision, "acme-deprovision-1")
        .await;
    assert_fails_without_a_job(
        &c,
        "acme-deprovision-1",
        "Run failed: tenant \"acme\" is not being deleted: a Deprovision run only carries out the reclaim policy of a deleted Tenant",
    )
    .await;
}

/// Rule 4 when the Job's create is refused: the reconcile fails with the apiserver's own reason (not
/// the NotFound of a read that follows it), and nothing announces a Job that was not made.
#[tokio::test]
async fn a_refused_job_create_fails_the_reconcile_with_the_apis_reason() {
    let c = cluster_with_run().await;
    c.intercept.refuse(Method::POST, "/jobs");
    let err = c
        .try_reconcile_run(RUN)
        .await
        .expect_err("a refused create fails the reconcile");
    assert!(
        err.to_string().contains("etcdserver: request timed out"),
        "{err}"
    );
    assert!(!reasons(&c).contains(&"JobCreated".to_owned()));
}

/// Rule 1 for a run deleted after its Job was created but before its status named that Job (a crash, or
/// a refused status write, in between): the Job is found by name and deleted, by its own uid.
#[tokio::test]
async fn a_run_deleted_before_its_status_named_its_job_still_deletes_that_job() {
    let c = cluster_with_run().await;
    c.intercept
        .refuse(Method::PATCH, "/runjobs/acme-provision-1/status");
    assert!(c.try_reconcile_run(RUN).await.is_err());
    c.intercept.clear();
    let job_uid = c
        .job(RUN)
        .await
        .expect("the Job was created")
        .uid()
        .unwrap();
    assert!(
        c.run(RUN)
            .await
            .unwrap()
            .status
            .is_none_or(|s| s.job_ref.is_none())
    );
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    c.log.clear();
    c.reconcile_run(RUN).await;
    let job_delete = c
        .log
        .writes()
        .into_iter()
        .find(|w| w.method == Method::DELETE && w.resource() == "jobs")
        .expect("the Job is deleted");
    assert_eq!(job_delete.body["preconditions"]["uid"], job_uid);
    assert!(c.job(RUN).await.is_none());
}

#[tokio::test]
async fn same_named_job_of_another_owner_is_never_adopted() {
    let c = cluster_with_run().await;
    c.jobs()
        .create(&Default::default(), &foreign_job())
        .await
        .unwrap();
    c.reconcile_run(RUN).await;
    let status = c.run(RUN).await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Pending));
    assert!(
        status.job_ref.is_none(),
        "the foreign Job is not recorded as ours"
    );
    assert!(status.message.unwrap().contains("does not control"));
    // Once it is gone, our own Job is created.
    c.jobs().delete(RUN, &Default::default()).await.unwrap();
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.unwrap().status.unwrap().job_ref.is_some());
}

/// Nothing wakes a run when a foreign Job goes away (the Job watch maps Jobs to the RunJob that controls
/// them), so it polls; a run waiting on its own Job waits for that Job's events instead.
#[tokio::test]
async fn a_run_waiting_for_a_foreign_job_polls_and_one_waiting_for_its_own_job_does_not() {
    let c = cluster_with_run().await;
    c.jobs()
        .create(&Default::default(), &foreign_job())
        .await
        .unwrap();
    let waiting = c.reconcile_run(RUN).await;
    assert_eq!(requeue_secs(&waiting), Some(5.0), "{waiting:?}");
    c.jobs().delete(RUN, &Default::default()).await.unwrap();
    let created = c.reconcile_run(RUN).await;
    let status = c.run(RUN).await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Pending));
    assert!(status.job_ref.is_some(), "our own Job, pod not started yet");
    assert_eq!(requeue_secs(&created), None, "{created:?}");
}

/// The same request refused (500), then answered NotFound: the refusal fails the reconcile and keeps the
/// run; NotFound (someone else finished the job) lets the reconcile succeed.
async fn refused_then_not_found(
    c: &Cluster,
    method: Method,
    suffix: &'static str,
    not_found: &'static str,
) {
    c.intercept.refuse(method.clone(), suffix);
    assert!(c.try_reconcile_run(RUN).await.is_err());
    assert!(
        c.run(RUN).await.is_some(),
        "the run is kept while the API refuses"
    );
    c.intercept
        .answer_status(method, suffix, 404, "NotFound", not_found);
    c.reconcile_run(RUN).await;
}

/// A run whose Job exists, deleted: its finalizer holds it for rule 1.
async fn deleted_run_with_its_job() -> Cluster {
    let c = cluster_with_run().await;
    c.settle().await;
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    c
}

/// A run that succeeded and whose TTL (300 s) is up: rule 6 is due.
async fn run_due_for_cleanup() -> Cluster {
    let c = cluster_with_run().await;
    c.settle().await;
    c.job_succeeded(RUN).await;
    c.settle().await;
    c.clock.advance(SignedDuration::from_secs(300));
    c
}

const JOB_PATH: &str = "/jobs/acme-provision-1";
const RUNJOB_PATH: &str = "/runjobs/acme-provision-1";

/// Rule 1 with the Job's DELETE refused: the finalizer stays (so the Job is not orphaned) and the
/// reconcile fails, to be retried; once the API answers, the deletion completes.
#[tokio::test]
async fn a_job_delete_the_api_refuses_keeps_the_finalizer_and_fails_the_reconcile() {
    let c = deleted_run_with_its_job().await;
    c.intercept.refuse(Method::DELETE, JOB_PATH);
    assert!(c.try_reconcile_run(RUN).await.is_err());
    let run = c.run(RUN).await.expect("the finalizer holds the RunJob");
    assert!(run.finalizers().iter().any(|f| f == RUNJOB_FINALIZER));
    assert!(c.job(RUN).await.is_some());
    c.intercept.clear();
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none());
    assert!(c.job(RUN).await.is_none());
}

/// Rule 1 when the Job is already gone (deleted by hand; the status still names it): nothing is left to
/// delete, so the finalizer goes.
#[tokio::test]
async fn deleting_a_run_whose_job_is_already_gone_removes_the_finalizer() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.jobs().delete(RUN, &Default::default()).await.unwrap();
    c.runjobs().delete(RUN, &Default::default()).await.unwrap();
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none());
}

/// Rule 1 when the Job goes between its read and its DELETE (the garbage collector was quicker): the
/// apiserver answers 404, nothing is left to delete, and the finalizer goes.
#[tokio::test]
async fn a_job_gone_before_its_delete_arrives_lets_the_finalizer_go() {
    let c = deleted_run_with_its_job().await;
    c.intercept.answer_status(
        Method::DELETE,
        JOB_PATH,
        404,
        "NotFound",
        "jobs.batch \"acme-provision-1\" not found",
    );
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none());
}

/// Rule 1 when the uid precondition fails (the Job of that name is no longer the one this run made —
/// the apiserver answers 409): that Job is not ours to delete, and the finalizer goes.
#[tokio::test]
async fn a_job_replaced_under_the_runs_name_is_not_deleted_and_the_finalizer_goes() {
    let c = deleted_run_with_its_job().await;
    c.intercept.answer_status(
        Method::DELETE,
        JOB_PATH,
        409,
        "Conflict",
        "Precondition failed: UID in precondition: 1, UID in object meta: 2",
    );
    c.reconcile_run(RUN).await;
    assert!(c.run(RUN).await.is_none());
}

/// Rule 1's finalizer removal: a RunJob that is already gone (another replica finished it) is done; any
/// other refusal fails the reconcile, so it is retried and the finalizer does not stay for good.
#[tokio::test]
async fn removing_the_finalizer_of_a_gone_run_succeeds_and_a_refusal_fails_the_reconcile() {
    let c = deleted_run_with_its_job().await;
    refused_then_not_found(
        &c,
        Method::PATCH,
        RUNJOB_PATH,
        "runjobs.sentry.io \"acme-provision-1\" not found",
    )
    .await;
}

#[tokio::test]
async fn job_deleted_before_finishing_fails_the_run_instead_of_rerunning_it() {
    let c = cluster_with_run().await;
    c.settle().await;
    c.jobs().delete(RUN, &Default::default()).await.unwrap();
    c.settle().await;
    let status = c.run(RUN).await.unwrap().status.unwrap();
    assert_eq!(status.phase, Some(RunPhase::Failed));
    assert!(
        status
            .message
            .unwrap()
            .contains("deleted before it finished")
    );
    assert_eq!(c.log.creates_of("jobs"), 1);
}

#[tokio::test]
async fn events_mark_created_succeeded_failed_and_cleaned_up() {
    let c = run_due_for_cleanup().await;
    c.settle().await;
    let r = reasons(&c);
    for want in ["JobCreated", "RunSucceeded", "RunCleanedUp"] {
        assert!(r.iter().any(|x| x == want), "missing {want} in {r:?}");
    }
    c.create_run("acme", RunAction::Provision, "acme-provision-2")
        .await;
    c.settle().await;
    c.job_failed("acme-provision-2", "DeadlineExceeded", "too slow")
        .await;
    c.settle().await;
    let failed: Vec<_> = c
        .log
        .events()
        .into_iter()
        .filter(|e| e["reason"] == "RunFailed")
        .collect();
    assert_eq!(failed.len(), 2, "on the RunJob and on its Tenant");
    assert!(failed.iter().all(|e| e["type"] == "Warning"));
}

/// The provisioner's classified error (its pod's termination message) becomes the run's message, and
/// the pod's last log lines are kept with the outcome.
#[tokio::test]
async fn a_failed_runs_message_is_the_provisioners_termination_message() {
    let c = cluster_with_run().await;
    c.settle().await;
    let classified = "ClickHouse at http://clickhouse:8123 is unreachable: connection refused";
    c.job_failed_in_pod(RUN, classified).await;
    c.settle().await;
    let status = c.run(RUN).await.unwrap().status.unwrap();
    assert_eq!(status.message.as_deref(), Some(classified));
}
