//! Watch-driven wiring, with `tower-test` answering the client's requests from a script: the real
//! watchers, shared reflector stores and controllers from `run_controllers` run on top of it.
//! - a Job status event re-reconciles the RunJob that controls it;
//! - a RunJob change re-reconciles its Tenant;
//! - a deleted RunJob leaves the cache and is announced to the dashboard's live updates;
//! - a tenant's phase change and deletion reach the index the tenants page lists from.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use http::{Method, Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use kube::client::Body;
use sentry_tenants::clock::Clock;
use sentry_tenants::config::OperatorConfig;
use sentry_tenants::controller::{Context, Stores, TenantFilter, run_controllers};
use sentry_tenants::crd::TenantPhase;
use sentry_tenants::telemetry::Metrics;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

type RespBody = UnsyncBoxBody<Bytes, Infallible>;
type EventTx = mpsc::UnboundedSender<Value>;

const NS: &str = "sentry-tenants";

fn full(v: &Value) -> RespBody {
    let bytes = Bytes::from(serde_json::to_vec(v).unwrap());
    StreamBody::new(futures::stream::once(async move {
        Ok::<_, Infallible>(Frame::data(bytes))
    }))
    .boxed_unsync()
}

/// A watch response that stays open and emits one JSON line per event sent on the channel.
fn watch_stream(rx: mpsc::UnboundedReceiver<Value>) -> RespBody {
    let s: Pin<Box<dyn Stream<Item = Result<Frame<Bytes>, Infallible>> + Send>> =
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            let ev = rx.recv().await?;
            let mut line = serde_json::to_vec(&ev).unwrap();
            line.push(b'\n');
            Some((Ok(Frame::data(Bytes::from(line))), rx))
        }));
    StreamBody::new(s).boxed_unsync()
}

fn tenant() -> Value {
    json!({"apiVersion": "sentry.io/v1alpha1", "kind": "Tenant",
           "metadata": {"name": "acme", "namespace": NS, "uid": "tenant-uid", "resourceVersion": "1", "generation": 1},
           "spec": {"suspended": false, "provisioning": "Manual"}})
}

fn runjob(status: Value) -> Value {
    json!({"apiVersion": "sentry.io/v1alpha1", "kind": "RunJob",
           "metadata": {"name": "acme-provision-1", "namespace": NS, "uid": "run-uid", "resourceVersion": "2",
                        "finalizers": ["sentry.io/runjob-cleanup"],
                        "ownerReferences": [{"apiVersion": "sentry.io/v1alpha1", "kind": "Tenant", "name": "acme", "uid": "tenant-uid", "controller": true}]},
           "spec": {"tenant": "acme", "action": "Provision", "ttlSecondsAfterFinished": 300, "backoffLimit": 2, "activeDeadlineSeconds": 600},
           "status": status})
}

fn job(status: Value) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "acme-provision-1", "namespace": NS, "uid": "job-uid", "resourceVersion": "3",
                        "labels": {"app.kubernetes.io/managed-by": "sentry-tenants"},
                        "ownerReferences": [{"apiVersion": "sentry.io/v1alpha1", "kind": "RunJob", "name": "acme-provision-1", "uid": "run-uid", "controller": true, "blockOwnerDeletion": true}]},
           "spec": {"template": {"spec": {"containers": []}}},
           "status": status})
}

fn resource_of(path: &str) -> &str {
    let parts: Vec<&str> = path.split('/').collect();
    parts
        .iter()
        .position(|p| *p == "namespaces")
        .and_then(|i| parts.get(i + 2))
        .copied()
        .unwrap_or_default()
}

#[derive(Default, Clone)]
struct Seen(Arc<Mutex<Vec<(Method, String, Value)>>>);

impl Seen {
    fn status_patches(&self, resource: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p, _)| {
                *m == Method::PATCH && resource_of(p) == resource && p.ends_with("/status")
            })
            .map(|(_, _, b)| b.clone())
            .collect()
    }
}

/// Answers every request the operator makes: lists from the fixtures, watches from channels the test
/// feeds, writes echoed back as the object.
async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<RespBody>>,
    seen: Seen,
    mut watches: HashMap<&'static str, mpsc::UnboundedReceiver<Value>>,
) {
    let fixtures: HashMap<&str, Value> =
        [("tenants", tenant()), ("runjobs", runjob(json!({"phase": "Pending", "jobRef": {"name": "acme-provision-1", "uid": "job-uid"}}))), ("jobs", job(json!({})))].into();
    let mut parked = Vec::new();
    while let Some((req, send)) = handle.next_request().await {
        let (parts, body) = req.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        let query = parts.uri.query().unwrap_or_default().to_owned();
        let resource = resource_of(&path).to_owned();
        seen.0
            .lock()
            .unwrap()
            .push((parts.method.clone(), path.clone(), body.clone()));
        let is_collection = path.ends_with(&format!("/{resource}"));
        let response = match (&parts.method, query.contains("watch=true")) {
            (&Method::GET, true) => match watches.remove(resource.as_str()) {
                Some(rx) => watch_stream(rx),
                None => {
                    // A re-watch: keep it open and silent.
                    let (tx, rx) = mpsc::unbounded_channel();
                    parked.push(tx);
                    watch_stream(rx)
                }
            },
            (&Method::GET, false) if is_collection => {
                let items: Vec<Value> = fixtures
                    .get(resource.as_str())
                    .cloned()
                    .into_iter()
                    .collect();
                full(
                    &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "10"}, "items": items}),
                )
            }
            (&Method::GET, false) if path.ends_with("/log") => full(&json!("log line")),
            (&Method::GET, false) => match fixtures.get(resource.as_str()) {
                Some(obj) => full(obj),
                None => {
                    let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"});
                    send.send_response(
                        Response::builder().status(404).body(full(&status)).unwrap(),
                    );
                    continue;
                }
            },
            _ => match fixtures.get(resource.as_str()) {
                Some(obj) => full(obj),
                None => full(&body),
            },
        };
        send.send_response(
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(response)
                .unwrap(),
        );
    }
}

/// The running operator on the scripted API, and the handles that keep it (and its watches) alive.
struct Running {
    seen: Seen,
    stores: Stores,
    ctx: Arc<Context>,
    runs: EventTx,
    jobs: EventTx,
    tenants: EventTx,
    _leader: watch::Sender<bool>,
    _shutdown: watch::Sender<bool>,
}

async fn start() -> Running {
    let (mock, handle) = tower_test::mock::pair::<Request<Body>, Response<RespBody>>();
    let client = kube::Client::new(mock, NS);
    let seen = Seen::default();
    let (tenant_tx, tenant_rx) = mpsc::unbounded_channel();
    let (run_tx, run_rx) = mpsc::unbounded_channel();
    let (job_tx, job_rx) = mpsc::unbounded_channel();
    let watches = [
        ("tenants", tenant_rx),
        ("runjobs", run_rx),
        ("jobs", job_rx),
    ]
    .into();
    tokio::spawn(serve(handle, seen.clone(), watches));

    let (stores, writers) = Stores::shared();
    let (leader_tx, leader_rx) = watch::channel(true);
    let ctx = Arc::new(Context::new(
        client,
        OperatorConfig::for_namespace(NS),
        stores.clone(),
        Arc::new(Metrics::default()),
        Clock::System,
        leader_rx,
    ));
    let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
    let shutdown = futures::FutureExt::shared(Box::pin(async move {
        let _ = shutdown_rx.wait_for(|s| *s).await;
    }));
    tokio::spawn(run_controllers(Arc::clone(&ctx), writers, shutdown));
    tokio::time::timeout(sentry_tenants_tests::PATIENCE, stores.wait_until_ready())
        .await
        .expect("caches sync from the scripted lists");
    Running {
        seen,
        stores,
        ctx,
        runs: run_tx,
        jobs: job_tx,
        tenants: tenant_tx,
        _leader: leader_tx,
        _shutdown: shutdown_tx,
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + sentry_tenants_tests::PATIENCE;
    while std::time::Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "still waiting after {:?} for: {what}",
        sentry_tenants_tests::PATIENCE
    );
}

#[tokio::test]
async fn a_job_status_event_re_reconciles_the_runjob_that_controls_it() {
    let op = start().await;
    let (seen, jobs) = (&op.seen, &op.jobs);
    let succeeded = |p: &Value| p["status"]["phase"] == "Succeeded";
    // The run's first reconcile is done (it recorded the run's start), and it saw nothing finished.
    eventually("the run's first status", || {
        !seen.status_patches("runjobs").is_empty()
    })
    .await;
    assert!(
        !seen.status_patches("runjobs").iter().any(succeeded),
        "nothing finished yet"
    );

    let done = job(
        json!({"succeeded": 1, "completionTime": "2026-11-30T12:00:00Z",
                          "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T12:00:00Z"}]}),
    );
    jobs.send(json!({"type": "MODIFIED", "object": done}))
        .unwrap();
    eventually("RunJob status patched to Succeeded", || {
        seen.status_patches("runjobs").iter().any(succeeded)
    })
    .await;
}

/// Every object a trigger queued leaves the controller's queue mirror when its reconcile starts (none
/// is left behind once the controllers are idle), and every reconcile start samples the depth.
#[tokio::test]
async fn the_queue_mirror_drains_and_every_reconcile_samples_it() {
    let op = start().await;
    let seen = &op.seen;
    eventually("the run's and the tenant's first statuses", || {
        !seen.status_patches("runjobs").is_empty() && !seen.status_patches("tenants").is_empty()
    })
    .await;
    let done = job(
        json!({"succeeded": 1, "completionTime": "2026-11-30T12:00:00Z",
                          "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-30T12:00:00Z"}]}),
    );
    op.jobs
        .send(json!({"type": "MODIFIED", "object": done}))
        .unwrap();
    eventually("RunJob status patched to Succeeded", || {
        seen.status_patches("runjobs")
            .iter()
            .any(|p| p["status"]["phase"] == "Succeeded")
    })
    .await;
    let queues = &op.ctx.queues;
    eventually("both queues empty", || {
        queues.tenant.is_empty() && queues.runjob.is_empty()
    })
    .await;
    let text = op.ctx.metrics.render(&Default::default());
    let value = |line_start: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(line_start))
            .unwrap_or_else(|| panic!("no {line_start} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    for controller in ["tenant", "runjob"] {
        let label = format!("{{controller=\"{controller}\"}}");
        let started = value(&format!("sentry_tenants_reconciles_total{label}"));
        assert!(started >= 1.0, "{controller}: {started} reconciles");
        assert_eq!(
            value(&format!(
                "sentry_tenants_reconcile_queue_depth_count{label}"
            )),
            started,
            "{controller}: one depth sample per reconcile"
        );
    }
}

#[tokio::test]
async fn a_runjob_change_re_reconciles_its_tenant() {
    let op = start().await;
    let (seen, runs) = (&op.seen, &op.runs);
    let failed = |p: &Value| p["status"]["phase"] == "Failed";
    eventually("tenant status written once caches synced", || {
        !seen.status_patches("tenants").is_empty()
    })
    .await;
    assert!(!seen.status_patches("tenants").iter().any(failed));

    let finished = runjob(
        json!({"phase": "Failed", "message": "Job failed (BackoffLimitExceeded)",
                                 "completionTime": "2026-11-30T12:00:00Z", "cleanupAt": "2099-01-01T00:00:00Z",
                                 "jobRef": {"name": "acme-provision-1", "uid": "job-uid"}}),
    );
    runs.send(json!({"type": "MODIFIED", "object": finished}))
        .unwrap();
    eventually("Tenant status patched to Failed", || {
        seen.status_patches("tenants").iter().any(failed)
    })
    .await;
}

/// The shared stream's subscribers are told of new and changed objects only; the dashboard must learn
/// of a deletion too (a cleaned-up run's row goes), so its change feed follows the watch itself.
#[tokio::test]
async fn a_deleted_runjob_leaves_the_cache_and_the_dashboard_is_told() {
    let op = start().await;
    let mut changes = op.stores.changes.subscribe();
    changes.borrow_and_update();
    let key = kube::runtime::reflector::ObjectRef::new("acme-provision-1").within(NS);
    assert!(op.stores.runjobs.get(&key).is_some());

    let gone = runjob(json!({"phase": "Succeeded"}));
    op.runs
        .send(json!({"type": "DELETED", "object": gone}))
        .unwrap();
    tokio::time::timeout(sentry_tenants_tests::PATIENCE, changes.changed())
        .await
        .expect("the deletion announced")
        .unwrap();
    eventually("the run gone from the cache", || {
        op.stores.runjobs.get(&key).is_none()
    })
    .await;
}

#[tokio::test]
async fn a_tenant_s_phase_change_and_deletion_reach_the_tenants_page_index() {
    let op = start().await;
    let index = &op.stores.tenant_index;
    let listed = |phase: Option<TenantPhase>| {
        let filter = TenantFilter { phase, text: None };
        let listing = index.list(NS, filter, |n| (0, n));
        listing
            .tenants
            .into_iter()
            .map(|t| t.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(None), ["acme"], "from the first list");
    let mut active = tenant();
    active["metadata"]["resourceVersion"] = json!("10");
    active["status"] = json!({"phase": "Active"});
    op.tenants
        .send(json!({"type": "MODIFIED", "object": active}))
        .unwrap();
    eventually("acme listed as Active", || {
        listed(Some(TenantPhase::Active)) == ["acme"]
    })
    .await;
    assert!(listed(Some(TenantPhase::Pending)).is_empty());
    op.tenants
        .send(json!({"type": "DELETED", "object": active}))
        .unwrap();
    eventually("acme gone from the index", || listed(None).is_empty()).await;
    assert_eq!(index.counts(NS).1, 0);
}
