//! Test harness for sentry-tenants: an in-memory Kubernetes API (kube-fake-client) behind a recording
//! layer, caches fed from it by hand (the fake has no watch), and helpers that play the parts of the
//! cluster we do not run here (the Job controller, the garbage collector's finalizer handling).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use sentry_tenants::clock::Clock;
use sentry_tenants::config::OperatorConfig;
use sentry_tenants::controller::{Context, Stores, runjob, tenant};
use sentry_tenants::crd::{ProvisioningPolicy, RunAction, RunJob, Tenant, TenantSpec};
use sentry_tenants::telemetry::Metrics;
use serde_json::{Value, json};
use tokio::sync::watch;

pub mod browser;
pub mod chdb;
pub mod clickhouse_model;
pub mod clickhouse_server;
pub mod clickhouse_stand_in;
pub mod cluster_tier;
pub mod control_plane;
pub mod fleet;
pub mod node;
pub mod processes;
pub mod registry;
pub mod rehearsal;
pub mod tls;

pub const NS: &str = "sentry-tenants";

/// Prints a drill's summary line where CI's log shows it: straight to the process's stderr, past the test
/// harness's capture (which would hide it for a passing test).
pub fn summary(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The ClickHouse names of `tenant` in [`NS`] under the in-memory tier's [`legacy_prefix`], marked as a
/// Tenant's with a fixed uid: for tests that look at statements, not at a Tenant object (whose uid the
/// API server chose).
pub fn tenant_idents(tenant: &str) -> sentry_tenants::provision::sql::TenantIdents {
    let owner = sentry_tenants::provision::sql::Owner {
        namespace: NS.to_owned(),
        tenant: tenant.to_owned(),
        uid: "00000000-0000-4000-8000-000000000001".to_owned(),
    };
    let name = sentry_tenants::names::TenantName::parse(tenant).expect("a valid tenant name");
    let database = legacy_prefix().database(&name);
    sentry_tenants::provision::sql::TenantIdents::for_tenant(&name, &database, &owner)
        .expect("derived from a valid name")
}

/// A plain HTTP/1.1 GET of `path` from `addr` (`host:port`), each step bounded; the body if the
/// answer is 200, else the status line or the error.
pub async fn http_get(addr: &str, path: &str) -> Result<String, String> {
    http_get_with(addr, path, &[]).await
}

/// [`http_get`] with extra request headers.
pub async fn http_get_with(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .map_err(|_| "connect timed out".to_owned())?
    .map_err(|e| e.to_string())?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Connection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_string(&mut answer),
    )
    .await
    .map_err(|_| "read timed out".to_owned())?
    .map_err(|e| e.to_string())?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("no header end")?;
    if head.starts_with("HTTP/1.1 200") {
        Ok(body.to_owned())
    } else {
        Err(head.lines().next().unwrap_or_default().to_owned())
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The prefix installs made before prefixes existed name tenants with (`tenant_<name>`). The in-memory
/// tier's provisioner uses it, so its assertions read `tenant_acme`; the default derived from the
/// namespace is what the cluster tier's installs and operators use.
pub fn legacy_prefix() -> sentry_tenants::names::ClickHousePrefix {
    sentry_tenants::names::ClickHousePrefix::parse(sentry_tenants::names::LEGACY_CLICKHOUSE_PREFIX)
        .expect("the legacy prefix is a valid one")
}

/// Install values for tests: the defaults `install` uses, in `namespace`.
pub fn install_values(namespace: &str) -> sentry_tenants::install::Values {
    sentry_tenants::install::Values {
        namespace: namespace.into(),
        image: sentry_tenants::DEFAULT_IMAGE.into(),
        replicas: 1,
        clickhouse_url: "http://clickhouse:8123".into(),
        clickhouse_admin_secret: "clickhouse-admin".into(),
        clickhouse_cluster: None,
        clickhouse_prefix: sentry_tenants::names::ClickHousePrefix::for_namespace(namespace)
            .to_string(),
        clickhouse_ca_configmap: None,
        max_concurrent_runs: sentry_tenants::config::DEFAULT_MAX_CONCURRENT_RUNS,
        read_only_dashboard: false,
        aggregate_to_view_edit: false,
        network_policy: false,
        metrics_from_namespaces: Vec::new(),
        image_pull_secret: None,
        monitoring: false,
        shards: Vec::new(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
    .validate()
    .unwrap()
}

/// What the ✗ lines of a `check` say, in order.
pub fn failed_checks(lines: &[sentry_tenants::install::check::CheckLine]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| !l.ok)
        .map(|l| l.what.as_str())
        .collect()
}

/// `uninstall` with the default options, its progress unprinted.
pub async fn uninstall_quietly(
    client: &Client,
    ns: &str,
) -> sentry_tenants::install::UninstallReport {
    let opts = sentry_tenants::install::UninstallOptions::default();
    sentry_tenants::install::uninstall(client, ns, &opts, &sentry_tenants::install::Progress::Quiet)
        .await
        .unwrap()
}

/// The operator's writes for a Provision run made as the dashboard makes one, on a settled tenant,
/// from its creation to its cleanup (the provisioner's own writes apart), 10 in all: the Job; the run's
/// Pending (its Job made), Running and Succeeded; the tenant's Provisioning, Active (once the
/// provisioner reported) and the run's record in its history (the Job finishes after the provisioner
/// reported, so those two cannot be one); the run's finalizer off once its Job is deleted; the Job's
/// and the run's deletes. The in-memory tier counts exactly these; the real apiserver no more of each.
pub const PROVISION_RUN_WRITES: &[(&str, usize)] = &[
    ("create jobs", 1),
    ("delete jobs", 1),
    ("delete runjobs", 1),
    ("patch runjobs", 1),
    ("patch runjobs/status", 3),
    ("patch tenants/status", 3),
];

/// Writes of the operator for an Automatic tenant (what `kubectl apply` of a Tenant sets off), from its
/// creation until it is Active and its Provision run Succeeded (the provisioner's own writes apart),
/// 8 in all: the tenant's finalizer and its run; the tenant's Provisioning (never Pending first: the
/// run is made in the same reconcile); the Job; the run's Pending, Running and Succeeded; the tenant's
/// Active. The cleanup of the run is [`PROVISION_RUN_WRITES`]'s last four.
pub const AUTOMATIC_TENANT_WRITES: &[(&str, usize)] = &[
    ("create jobs", 1),
    ("create runjobs", 1),
    ("patch runjobs/status", 3),
    ("patch tenants", 1),
    ("patch tenants/status", 2),
];

/// One request the code under test sent.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
    pub status: u16,
}

impl Recorded {
    pub fn is_write(&self) -> bool {
        self.method != Method::GET
    }
    pub fn is_event(&self) -> bool {
        self.path.contains("/events")
    }
    /// "verb resource[/status]" as the apiserver's audit log names it ("create jobs", "patch
    /// runjobs/status"), so the two tiers' counts compare.
    pub fn kind(&self) -> String {
        let verb = match self.method {
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "get",
        };
        let sub = if self.path.ends_with("/status") {
            "/status"
        } else {
            ""
        };
        format!("{verb} {}{sub}", self.resource())
    }
    /// The resource path segment, e.g. "jobs", "runjobs", "tenants".
    pub fn resource(&self) -> &str {
        let parts: Vec<&str> = self.path.split('/').collect();
        match parts.iter().position(|p| *p == "namespaces") {
            Some(i) => parts.get(i + 2).copied().unwrap_or_default(),
            None => parts.last().copied().unwrap_or_default(),
        }
    }
}

#[derive(Clone, Default)]
pub struct RequestLog(Arc<Mutex<Vec<Recorded>>>);

impl RequestLog {
    pub fn all(&self) -> Vec<Recorded> {
        self.0.lock().unwrap().clone()
    }
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
    /// The writes (Events aside) that `work` sent, and its result.
    pub async fn writes_during<T>(&self, work: impl Future<Output = T>) -> (T, Vec<Recorded>) {
        let before = self.0.lock().unwrap().len();
        let result = work.await;
        let during = self.0.lock().unwrap()[before..].to_vec();
        let writes = during.into_iter().filter(|r| r.is_write() && !r.is_event());
        (result, writes.collect())
    }
    /// Writes other than Events (which are advisory and deduplicated by the recorder).
    pub fn writes(&self) -> Vec<Recorded> {
        self.all()
            .into_iter()
            .filter(|r| r.is_write() && !r.is_event())
            .collect()
    }
    pub fn events(&self) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|r| r.is_event() && r.method == Method::POST)
            .map(|r| r.body)
            .collect()
    }
    pub fn creates_of(&self, resource: &str) -> usize {
        self.count(|r| r.method == Method::POST && r.resource() == resource && r.status < 300)
    }
    /// Requests matching `pred`, counted in place (drills with thousands of objects log a lot).
    pub fn count(&self, pred: impl Fn(&Recorded) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|r| pred(r)).count()
    }
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Objects a DELETE found holding finalizers: path → deletionTimestamp. The fake only accepts a
/// deletionTimestamp on objects it is built with, so the harness keeps it here and shows it in every
/// response, the way the apiserver would, until the last finalizer goes.
#[derive(Clone, Default)]
pub struct Deleting(Arc<Mutex<std::collections::HashMap<String, String>>>);

impl Deleting {
    fn get(&self, path: &str) -> Option<String> {
        self.0.lock().unwrap().get(path).cloned()
    }
    fn mark(&self, path: &str, stamp: String) {
        self.0
            .lock()
            .unwrap()
            .entry(path.to_owned())
            .or_insert(stamp);
    }
    fn unmark(&self, path: &str) {
        self.0.lock().unwrap().remove(path);
    }
    /// Adds the deletionTimestamp to `obj` (found under `collection`) when it is being deleted.
    fn decorate(&self, collection: &str, obj: &mut Value) {
        let Some(name) = obj["metadata"]["name"].as_str() else {
            return;
        };
        if let Some(stamp) = self.get(&format!("{collection}/{name}")) {
            obj["metadata"]["deletionTimestamp"] = json!(stamp);
        }
    }
}

/// Namespaces addressed by name. kube-fake-client 0.3 cannot route `/api/v1/namespaces/{name}` (it reads
/// it as a namespaced path missing its resource), so the harness keeps Namespace objects itself — the
/// one kind the installer applies that the fake cannot hold.
#[derive(Clone, Default)]
pub struct Namespaces(Arc<Mutex<std::collections::BTreeMap<String, Value>>>);

impl Namespaces {
    fn name_of(path: &str) -> Option<String> {
        let rest = path.strip_prefix("/api/v1/namespaces/")?;
        (!rest.is_empty() && !rest.contains('/')).then(|| rest.to_owned())
    }

    fn answer(&self, method: &Method, path: &str, body: &Value) -> Option<(u16, Value)> {
        let name = Self::name_of(path)?;
        let mut all = self.0.lock().unwrap();
        Some(match *method {
            Method::GET => match all.get(&name) {
                Some(ns) => (200, ns.clone()),
                None => (
                    404,
                    status_body(404, "NotFound", &format!("namespaces \"{name}\" not found")),
                ),
            },
            Method::PATCH | Method::PUT => {
                let ns = all.entry(name.clone()).or_insert_with(|| {
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": format!("ns-{name}")}})
                });
                json_patch::merge(ns, body);
                (200, ns.clone())
            }
            Method::DELETE => match all.remove(&name) {
                Some(ns) => (200, ns),
                None => (
                    404,
                    status_body(404, "NotFound", &format!("namespaces \"{name}\" not found")),
                ),
            },
            _ => return None,
        })
    }

    pub fn names(&self) -> Vec<String> {
        self.0.lock().unwrap().keys().cloned().collect()
    }
}

/// A test's say over a request before the in-memory API sees it: `Some((status, body))` answers it
/// instead (an injected conflict, error or permission check), `None` lets it through.
pub type Intercept = Arc<dyn Fn(&Method, &str, &str, &Value) -> Option<(u16, Value)> + Send + Sync>;

#[derive(Clone, Default)]
pub struct InterceptSlot(Arc<Mutex<Option<Intercept>>>);

impl InterceptSlot {
    pub fn set(
        &self,
        f: impl Fn(&Method, &str, &str, &Value) -> Option<(u16, Value)> + Send + Sync + 'static,
    ) {
        *self.0.lock().unwrap() = Some(Arc::new(f));
    }
    pub fn clear(&self) {
        *self.0.lock().unwrap() = None;
    }
    /// Answers every `method` request whose path ends with `suffix` with the apiserver's Status.
    pub fn answer_status(
        &self,
        method: Method,
        suffix: &'static str,
        code: u16,
        reason: &'static str,
        message: &'static str,
    ) {
        self.set(move |m, path, _, _| {
            (*m == method && path.ends_with(suffix))
                .then(|| (code, status_body(code, reason, message)))
        });
    }
    /// [`Self::answer_status`] with a 500: the apiserver timing out on etcd.
    pub fn refuse(&self, method: Method, suffix: &'static str) {
        let message = "etcdserver: request timed out";
        self.answer_status(method, suffix, 500, "InternalError", message);
    }
    fn answer(
        &self,
        method: &Method,
        path: &str,
        query: &str,
        body: &Value,
    ) -> Option<(u16, Value)> {
        let f = self.0.lock().unwrap().clone()?;
        f(method, path, query, body)
    }
}

/// Seeded fault injection for drills: answers `rate` of the requests it sees with a 409 Conflict, a 500, or
/// a 504 (the apiserver's answer to a request that timed out), chosen by a seeded xorshift generator so a
/// failing drill can be replayed. Half the 504s come *after* the request took effect, as a timeout does
/// when the apiserver committed the write but the answer was lost: the client must not count on a
/// failed write having changed nothing.
/// `name` from the environment parsed as a `T`, else `default`: the drills' knobs
/// (`SENTRY_TENANTS_DRILL_SEED`, …).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Prints, if the test it lives in fails, the command that replays its drill.
pub struct ReplayOnFailure(pub String);

impl Drop for ReplayOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            summary(&format!("drill failed; replay it with: {}", self.0));
        }
    }
}

/// A seeded xorshift64 generator: the drills' only source of chance, so a seed replays a drill.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// Shuffles `items` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

pub struct Faults {
    state: Mutex<XorShift>,
    rate_per_mille: u64,
    injected: std::sync::atomic::AtomicU64,
}

impl Faults {
    pub fn new(seed: u64, rate_per_mille: u64) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(XorShift::new(seed)),
            rate_per_mille,
            injected: Default::default(),
        })
    }

    fn next(&self) -> u64 {
        self.state.lock().unwrap().next_u64()
    }

    /// Installs these faults on the operator's client of `cluster` (the test's own client stays clean).
    pub fn install(self: &Arc<Self>, cluster: &Cluster) {
        let faults = Arc::clone(self);
        let lost = Arc::new(Mutex::new(false));
        let lost_after = Arc::clone(&lost);
        cluster.intercept.set(move |_, _, _, _| {
            let roll = faults.next();
            if roll % 1000 >= faults.rate_per_mille {
                return None;
            }
            faults.injected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Some(match (roll / 1000) % 4 {
                0 => (409, status_body(409, "Conflict", "the object has been modified; please apply your changes to the latest version")),
                1 => (500, status_body(500, "InternalError", "etcdserver: request timed out")),
                2 => (504, timeout_body()),
                _ => {
                    // Let it through; its answer is lost on the way back.
                    *lost.lock().unwrap() = true;
                    return None;
                }
            })
        });
        cluster.lost_reply.set(move |_, _, _, _| {
            std::mem::take(&mut *lost_after.lock().unwrap()).then(|| (504, timeout_body()))
        });
    }

    pub fn injected(&self) -> u64 {
        self.injected.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn timeout_body() -> Value {
    status_body(
        504,
        "Timeout",
        "the server was unable to return a response in the time allotted",
    )
}

/// The first ```` ```lang ```` block of the section of `doc` (a path from the repository's root, e.g.
/// `docs/install.md`) whose heading starts with `heading` (a `## ` or `### ` line; a section ends at
/// the next of either): the tests that keep the docs' examples true read them from the docs themselves.
pub fn doc_block(doc: &str, heading: &str, lang: &str) -> String {
    let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let section = text
        .split("\n## ")
        .flat_map(|s| s.split("\n### "))
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("{doc} has no section starting {heading:?}"));
    let fence = format!("```{lang}\n");
    let start = section
        .find(&fence)
        .unwrap_or_else(|| panic!("{doc}, section {heading:?}, has no {lang} block"))
        + fence.len();
    let end = start + section[start..].find("```").expect("the block is closed");
    section[start..end].to_owned()
}

/// Every error the apiserver's schema checks would report for `obj` (`old` for updates) against the
/// generated CRD of `K`: OpenAPI keywords with `jsonschema`, CEL rules (including the `oldSelf`
/// transition rules) with `kube-cel`, the client-side evaluator of Kubernetes' CEL libraries.
pub fn schema_errors<K: kube::CustomResourceExt>(obj: &Value, old: Option<&Value>) -> Vec<String> {
    let crd = serde_json::to_value(K::crd()).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut out: Vec<String> = jsonschema::validator_for(schema)
        .unwrap()
        .iter_errors(obj)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if let Err(cel) = kube_cel::Validator::new().validate(schema, obj, old) {
        out.extend(
            cel.into_vec()
                .into_iter()
                .map(|e| format!("{}: {}", e.field_path, e.message)),
        );
    }
    out
}

/// The keys a copy of the credentials holds, what an application connects with (written out here,
/// not taken from the product).
pub const APP_KEYS: [&str; 7] = [
    "database", "host", "password", "port", "uri", "url", "username",
];

/// The keys and values of a Secret's data.
pub fn secret_data(secret: &Secret) -> std::collections::BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// What an application's copy of the credentials Secret `source` must hold: its [`APP_KEYS`], every
/// one of them, and nothing else of it.
pub fn app_copy_of(source: &Secret) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut wanted = secret_data(source);
    wanted.retain(|k, _| APP_KEYS.contains(&k.as_str()));
    assert_eq!(wanted.len(), APP_KEYS.len(), "the source holds every key");
    wanted
}

/// A Kubernetes `Status` body, as the apiserver sends with an error.
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

/// Wraps `inner` so every request is recorded, and gives DELETE the apiserver's finalizer semantics the
/// fake lacks (see [`Deleting`]); CRDs become Established once applied, as the apiserver makes them.
pub fn recording_client(
    inner: Client,
    log: RequestLog,
    deleting: Deleting,
    intercept: InterceptSlot,
    lost_reply: InterceptSlot,
    namespaces: Namespaces,
    clock: Clock,
) -> Client {
    let service = tower::service_fn(move |req: Request<Body>| {
        let clock = clock.clone();
        let inner = inner.clone();
        let log = log.clone();
        let deleting = deleting.clone();
        let intercept = intercept.clone();
        let lost_reply = lost_reply.clone();
        let namespaces = namespaces.clone();
        async move {
            // Every request is a point where other reconciles may run, as on a network; deterministic,
            // so a drill that runs reconciles side by side replays from its seed.
            tokio::task::yield_now().await;
            let (parts, body) = req.into_parts();
            let bytes: Bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let json_body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let method = parts.method.clone();
            let path = parts.uri.path().to_owned();
            let query = parts.uri.query().unwrap_or_default().to_owned();
            let object_path = path.trim_end_matches("/status").to_owned();
            let mut parts = parts;
            if method == Method::PATCH && changes_only_metadata(&path, &json_body) {
                // The apiserver bumps a custom resource's generation only when something outside
                // metadata and status changes; the fake bumps it on every write but a status one,
                // whose handler keeps the spec and takes the metadata as patched. So a patch of only
                // metadata goes there, and the generation stays, as on a real apiserver.
                parts.uri = format!("{path}/status?{query}").parse().expect("a URI");
            }
            let forwarded = if method == Method::POST {
                stamped_with_creation_time(&json_body, clock.now())
                    .unwrap_or_else(|| bytes.to_vec())
            } else {
                bytes.to_vec()
            };
            let request = Request::from_parts(parts, Body::from(forwarded));
            let answer = intercept
                .answer(&method, &path, &query, &json_body)
                .or_else(|| namespaces.answer(&method, &path, &json_body));
            if let Some((status, body)) = answer {
                log.0.lock().unwrap().push(Recorded {
                    method,
                    path,
                    query,
                    body: json_body,
                    status,
                });
                return Ok(respond(status, &body));
            }
            let (status, body) = if method == Method::DELETE {
                delete_honouring_finalizers(&inner, &object_path, request, &deleting).await?
            } else {
                let (status, mut body) = send_json(&inner, request).await?;
                if method == Method::PATCH && deleting.get(&object_path).is_some() {
                    finish_deletion_if_unblocked(&inner, &object_path, &deleting).await?;
                }
                if method == Method::PATCH
                    && status < 300
                    && object_path.contains("/customresourcedefinitions/")
                    && !path.ends_with("/status")
                {
                    mark_established(&inner, &object_path).await?;
                }
                decorate_response(&object_path, &mut body, &deleting);
                (status, body)
            };
            let (status, body) = lost_reply
                .answer(&method, &path, &query, &json_body)
                .unwrap_or((status, body));
            log.0.lock().unwrap().push(Recorded {
                method,
                path,
                query,
                body: json_body,
                status,
            });
            Ok::<_, kube::Error>(respond(status, &body))
        }
    });
    Client::new(service, NS)
}

/// A created object stamped with the cluster's clock, in whole seconds, as the apiserver stamps it with
/// its own: the in-memory API would take this machine's, so objects made in one burst (listed in no
/// particular order) could fall on either side of a second and be ordered by age differently from run
/// to run. `None` when the body is not an object with metadata.
fn stamped_with_creation_time(body: &Value, now: Timestamp) -> Option<Vec<u8>> {
    let mut body = body.clone();
    let metadata = body.as_object_mut()?.get_mut("metadata")?;
    let second = Timestamp::from_second(now.as_second()).ok()?;
    metadata
        .as_object_mut()?
        .insert("creationTimestamp".into(), json!(second.to_string()));
    serde_json::to_vec(&body).ok()
}

/// A patch of one of our custom resources (not its status) that changes nothing but metadata: a
/// merge patch of only `metadata`, or a JSON patch whose every operation is under `/metadata/`.
fn changes_only_metadata(path: &str, body: &Value) -> bool {
    if !path.starts_with("/apis/sentry.io/") || path.ends_with("/status") {
        return false;
    }
    match body {
        Value::Object(fields) => fields.keys().all(|k| k == "metadata"),
        Value::Array(ops) => ops.iter().all(|op| {
            op["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/metadata/"))
        }),
        _ => false,
    }
}

async fn mark_established(inner: &Client, path: &str) -> Result<(), kube::Error> {
    let status = json!({"status": {"conditions": [
        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "", "lastTransitionTime": "2026-11-30T12:00:00Z"},
        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "", "lastTransitionTime": "2026-11-30T12:00:00Z"}]}});
    let req = Request::builder()
        .method(Method::PATCH)
        .uri(format!("{path}/status"))
        .header("content-type", "application/merge-patch+json")
        .body(Body::from(serde_json::to_vec(&status).unwrap()))
        .unwrap();
    let (code, _) = send_json(inner, req).await?;
    if code >= 300 {
        let req = Request::builder()
            .method(Method::PATCH)
            .uri(path)
            .header("content-type", "application/merge-patch+json")
            .body(Body::from(serde_json::to_vec(&status).unwrap()))
            .unwrap();
        send_json(inner, req).await?;
    }
    Ok(())
}

fn decorate_response(object_path: &str, body: &mut Value, deleting: &Deleting) {
    if let Some(items) = body["items"].as_array_mut() {
        for item in items {
            deleting.decorate(object_path, item);
        }
    } else if let Some((collection, _)) = object_path.rsplit_once('/') {
        deleting.decorate(collection, body);
    }
}

async fn send_json(client: &Client, req: Request<Body>) -> Result<(u16, Value), kube::Error> {
    let resp = client.send(req).await?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

async fn raw(client: &Client, method: Method, path: &str) -> Result<(u16, Value), kube::Error> {
    send_json(
        client,
        Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

fn respond(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

async fn delete_honouring_finalizers(
    inner: &Client,
    path: &str,
    req: Request<Body>,
    deleting: &Deleting,
) -> Result<(u16, Value), kube::Error> {
    let (status, mut current) = raw(inner, Method::GET, path).await?;
    let has_finalizers = current["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if status != 200 || !has_finalizers {
        deleting.unmark(path);
        return send_json(inner, req).await;
    }
    deleting.mark(
        path,
        Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    decorate_response(path, &mut current, deleting);
    Ok((200, current))
}

async fn finish_deletion_if_unblocked(
    inner: &Client,
    path: &str,
    deleting: &Deleting,
) -> Result<(), kube::Error> {
    let (status, current) = raw(inner, Method::GET, path).await?;
    let unblocked = current["metadata"]["finalizers"]
        .as_array()
        .is_none_or(|f| f.is_empty());
    if status == 200 && unblocked {
        deleting.unmark(path);
        raw(inner, Method::DELETE, path).await?;
    }
    Ok(())
}

/// The in-memory cluster, the operator's context on it, and the caches' write side.
pub struct Cluster {
    /// Client the operator uses: recorded.
    pub client: Client,
    /// Client the test uses to arrange the world: not recorded.
    pub admin: Client,
    pub log: RequestLog,
    /// Answers chosen requests instead of the in-memory API (conflicts, faults, access reviews).
    pub intercept: InterceptSlot,
    /// Replaces the answer to a request the in-memory API has already carried out (a lost reply).
    pub lost_reply: InterceptSlot,
    pub namespaces: Namespaces,
    pub ctx: Arc<Context>,
    pub clock: Clock,
    writers: Mutex<Writers>,
    leader: watch::Sender<bool>,
}

struct Writers {
    tenants: Writer<Tenant>,
    runjobs: Writer<RunJob>,
    jobs: Writer<Job>,
    markers: Writer<ConfigMap>,
}

impl Cluster {
    /// A cluster whose manual clock starts at the wall-clock time, whole seconds: no test depends on
    /// today's date relative to a fixed instant. Objects created are stamped by this clock (see
    /// [`recording_client`]).
    pub async fn new() -> Self {
        let now = Timestamp::from_second(Timestamp::now().as_second()).expect("in range");
        Self::starting_at(now).await
    }

    /// A cluster whose manual clock starts at `start`.
    pub async fn starting_at(start: Timestamp) -> Self {
        Self::with_config(start, OperatorConfig::for_namespace(NS)).await
    }

    /// A cluster whose operator has `--max-concurrent-runs cap`.
    pub async fn with_max_concurrent_runs(cap: u16) -> Self {
        let now = Timestamp::from_second(Timestamp::now().as_second()).expect("in range");
        let config = OperatorConfig {
            max_concurrent_runs: cap,
            ..OperatorConfig::for_namespace(NS)
        };
        Self::with_config(now, config).await
    }

    /// A cluster whose operator is one of a sharded install's: `shards`, and `--shard mine` (`None`:
    /// the main operator).
    pub async fn sharded(shards: &[&str], mine: Option<&str>) -> Self {
        let now = Timestamp::from_second(Timestamp::now().as_second()).expect("in range");
        let config = OperatorConfig {
            shards: shards.iter().map(|s| (*s).to_owned()).collect(),
            shard: mine.map(str::to_owned),
            ..OperatorConfig::for_namespace(NS)
        };
        Self::with_config(now, config).await
    }

    async fn with_config(start: Timestamp, config: OperatorConfig) -> Self {
        let fake = kube_fake_client::ClientBuilder::new()
            .with_resource::<Tenant>()
            .with_resource::<RunJob>()
            .with_status_subresource::<Tenant>()
            .with_status_subresource::<RunJob>()
            .with_status_subresource::<Job>()
            // As the apiserver does: prune tells what install applied by its managedFields.
            .with_return_managed_fields()
            .build()
            .await
            .expect("fake client");
        let log = RequestLog::default();
        let deleting = Deleting::default();
        let intercept = InterceptSlot::default();
        let lost_reply = InterceptSlot::default();
        let namespaces = Namespaces::default();
        let clock = Clock::manual(start);
        let client = recording_client(
            fake.clone(),
            log.clone(),
            deleting.clone(),
            intercept.clone(),
            lost_reply.clone(),
            namespaces.clone(),
            clock.clone(),
        );
        let admin = recording_client(
            fake,
            RequestLog::default(),
            deleting,
            InterceptSlot::default(),
            InterceptSlot::default(),
            namespaces.clone(),
            clock.clone(),
        );
        let (stores, writers) = Stores::shared();
        let (leader_tx, leader_rx) = watch::channel(true);
        let ctx = Arc::new(Context::new(
            client.clone(),
            config,
            stores,
            Arc::new(Metrics::default()),
            clock.clone(),
            leader_rx,
        ));
        let writers = Writers {
            tenants: writers.tenants,
            runjobs: writers.runjobs,
            jobs: writers.jobs,
            markers: writers.markers,
        };
        Self {
            client,
            admin,
            log,
            intercept,
            lost_reply,
            namespaces,
            ctx,
            clock,
            writers: Mutex::new(writers),
            leader: leader_tx,
        }
    }

    /// Whether this operator holds the leader Lease (tests start as leader).
    pub fn set_leader(&self, leading: bool) {
        self.leader.send_replace(leading);
    }

    pub fn tenants(&self) -> Api<Tenant> {
        Api::namespaced(self.admin.clone(), NS)
    }
    pub fn runjobs(&self) -> Api<RunJob> {
        Api::namespaced(self.admin.clone(), NS)
    }
    pub fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.admin.clone(), NS)
    }

    /// A Manual tenant: the tests start its Provision runs themselves, as a click or a RunJob would.
    pub async fn create_tenant(&self, name: &str) -> Tenant {
        self.create_tenant_with(name, ProvisioningPolicy::Manual)
            .await
    }

    pub async fn create_tenant_with(&self, name: &str, provisioning: ProvisioningPolicy) -> Tenant {
        let t = Tenant {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                ..ObjectMeta::default()
            },
            spec: TenantSpec {
                provisioning,
                ..TenantSpec::default()
            },
            status: None,
        };
        self.tenants()
            .create(&Default::default(), &t)
            .await
            .expect("create tenant")
    }

    /// A RunJob as our own creators make it (owned by the tenant, finalizer set).
    /// Tenant `acme` with one Provision run, `acme-provision-1`, that failed (its Job ran out of
    /// retries) and waits for its cleanup.
    pub async fn with_a_failed_provision_run(&self) {
        self.create_tenant("acme").await;
        self.create_run("acme", RunAction::Provision, "acme-provision-1")
            .await;
        self.settle().await;
        self.job_failed(
            "acme-provision-1",
            "BackoffLimitExceeded",
            "ClickHouse unreachable",
        )
        .await;
        self.settle().await;
    }

    pub async fn create_run(&self, tenant: &str, action: RunAction, name: &str) -> RunJob {
        let t = self.tenants().get(tenant).await.expect("tenant exists");
        let run = tenant::new_run_job(&t, name, action);
        self.runjobs()
            .create(&Default::default(), &run)
            .await
            .expect("create run")
    }

    /// What the provisioner reports after a successful Provision run.
    pub async fn report_provisioned(&self, tenant: &str) {
        let database = format!("tenant_{}", tenant.replace('-', "_"));
        let secret = format!("{tenant}-clickhouse");
        self.patch_tenant_status(
            tenant,
            json!({"clickHouseDatabaseName": database, "clickHouseSecretRef": {"name": secret}}),
        )
        .await;
    }

    pub async fn report_access_locked(&self, tenant: &str, locked: bool) {
        self.patch_tenant_status(tenant, json!({"accessLocked": locked}))
            .await;
    }

    /// Merge-patches the tenant's status, as a writer of those fields would.
    pub async fn patch_tenant_status(&self, tenant: &str, status: Value) {
        let patch = json!({ "status": status });
        self.tenants()
            .patch_status(tenant, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Flips spec.suspended (the fake bumps generation on spec changes, as the apiserver does).
    pub async fn set_suspended(&self, tenant: &str, suspended: bool) {
        let patch = json!({"spec": {"suspended": suspended}});
        self.tenants()
            .patch(tenant, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Plays the Job controller: marks the Job running, succeeded or failed.
    pub async fn job_running(&self, name: &str) {
        let now = self.now_str();
        self.patch_job_status(name, json!({"startTime": now, "active": 1}))
            .await;
    }
    /// In two writes, as the Job controller of Kubernetes ≥ 1.31 does: `SuccessCriteriaMet` when the pod
    /// has exited 0, then `Complete` once it is gone.
    pub async fn job_succeeded(&self, name: &str) {
        let now = self.now_str();
        let met =
            json!({"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now});
        self.patch_job_status(name, json!({"active": 0, "conditions": [met]}))
            .await;
        let complete = json!({"type": "Complete", "status": "True", "lastTransitionTime": now});
        self.patch_job_status(
            name,
            json!({"succeeded": 1, "completionTime": now, "conditions": [met, complete]}),
        )
        .await;
    }
    pub async fn job_failed(&self, name: &str, reason: &str, message: &str) {
        let now = self.now_str();
        self.patch_job_status(name, json!({"active": 0, "failed": 3,
            "conditions": [{"type": "Failed", "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}]}))
            .await;
    }
    /// Makes a DELETE of the Job `name` leave it in place, marked deleted, as the apiserver does for a
    /// Foreground deletion until the garbage collector has deleted its pods: the `foregroundDeletion`
    /// finalizer the apiserver would add with the DELETE, added beforehand (the in-memory API deletes
    /// at once whatever carries none).
    pub async fn hold_job_deletion_for_its_pods(&self, name: &str) {
        self.set_job_finalizers(name, json!(["foregroundDeletion"]))
            .await;
    }
    /// Plays the garbage collector finishing a Foreground deletion: the pods are gone, so it removes
    /// the finalizer and the apiserver the Job.
    pub async fn job_pods_gone(&self, name: &str) {
        self.set_job_finalizers(name, Value::Null).await;
    }
    async fn set_job_finalizers(&self, name: &str, finalizers: Value) {
        let patch = json!({"metadata": {"finalizers": finalizers}});
        self.jobs()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch Job finalizers");
    }
    /// Plays a Job whose pods all failed: the last pod's termination message is `message` (what the
    /// provisioner writes there), and the Job is marked Failed the way the Job controller words it.
    pub async fn job_failed_in_pod(&self, name: &str, message: &str) {
        let pods: Api<Pod> = Api::namespaced(self.admin.clone(), NS);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-x7k2p"), "namespace": NS, "labels": {"batch.kubernetes.io/job-name": name}},
            "spec": {"containers": [{"name": "provision", "image": "img"}]},
            "status": {"containerStatuses": [{"name": "provision", "image": "img", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 1, "message": message}}}]}
        }))
        .unwrap();
        pods.create(&Default::default(), &pod)
            .await
            .expect("create pod");
        self.job_failed(
            name,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        .await;
    }
    async fn patch_job_status(&self, name: &str, status: Value) {
        let mut current = self.jobs().get(name).await.expect("job exists");
        let mut merged = serde_json::to_value(current.status.take().unwrap_or_default()).unwrap();
        json_patch::merge(&mut merged, &status);
        let patch = json!({ "status": merged });
        self.jobs()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Plays the Deployment controller for as long as it is polled (run it beside an install in a
    /// `select!`): every generation of the operator's Deployment it sees is reported rolled out.
    pub async fn play_deployment_controller(&self) {
        let api: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.admin.clone(), NS);
        loop {
            if let Ok(d) = api.get("sentry-tenants").await {
                let generation = d.metadata.generation.unwrap_or(1);
                let observed = d.status.as_ref().and_then(|s| s.observed_generation);
                if observed != Some(generation) {
                    let status = json!({"status": {"observedGeneration": generation, "replicas": 1,
                        "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}});
                    let _ = api
                        .patch_status(
                            "sentry-tenants",
                            &PatchParams::default(),
                            &Patch::Merge(&status),
                        )
                        .await;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    pub fn now_str(&self) -> String {
        self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// Refills the caches from the API, as the watches would.
    pub async fn sync_stores(&self) {
        let all = ListParams::default();
        let tenants = self.tenants().list(&all).await.unwrap().items;
        let runs = self.runjobs().list(&all).await.unwrap().items;
        let jobs = self.jobs().list(&all).await.unwrap().items;
        self.fill_stores(tenants, runs, jobs);
        // The credentials Secrets' markers, as the operator's ConfigMap watch selects them.
        let markers = Api::<ConfigMap>::namespaced(self.admin.clone(), NS)
            .list(&ListParams::default().labels("app.kubernetes.io/component=credentials-marker"))
            .await
            .unwrap()
            .items;
        self.fill_markers(markers);
    }

    /// Puts exactly these objects in the caches, as three watches would after listing them: the
    /// objects need not be the API's current ones (a drill's lagging caches).
    pub fn fill_stores(&self, mut tenants: Vec<Tenant>, runs: Vec<RunJob>, jobs: Vec<Job>) {
        // What `run`'s Tenant watch does before caching.
        tenants
            .iter_mut()
            .for_each(sentry_tenants::controller::slim_tenant);
        let before = self.cached_versions();
        let mut w = self.writers.lock().unwrap();
        let stores = &self.ctx.stores;
        refill_indexed(&mut w.tenants, |e| stores.index_tenant_event(e), tenants);
        refill_indexed(&mut w.runjobs, |e| stores.index_run_event(e), runs);
        refill_indexed(&mut w.jobs, |e| stores.index_job_event(e), jobs);
        self.mark_synced();
        drop(w);
        // As the watches do: a change is announced when a tenant or run changed, not on every relist.
        if self.cached_versions() != before {
            self.ctx.stores.changes.notify();
        }
    }

    /// The cached tenants' and runs' names and resourceVersions, sorted.
    fn cached_versions(&self) -> Vec<(String, String, Option<String>)> {
        let stores = &self.ctx.stores;
        let tenants = stores
            .tenants
            .state()
            .into_iter()
            .map(|t| ("Tenant".to_owned(), t.name_any(), t.resource_version()));
        let runs = stores
            .runjobs
            .state()
            .into_iter()
            .map(|r| ("RunJob".to_owned(), r.name_any(), r.resource_version()));
        let mut all: Vec<_> = tenants.chain(runs).collect();
        all.sort();
        all
    }

    /// What the watches do once their first list is in the caches.
    fn mark_synced(&self) {
        use sentry_tenants::controller::Cache;
        for cache in [Cache::Tenants, Cache::RunJobs, Cache::Jobs] {
            self.ctx.stores.synced.mark(cache);
        }
    }

    /// Puts exactly these credentials markers in their cache, as the ConfigMap watch would after
    /// listing them.
    pub fn fill_markers(&self, markers: Vec<ConfigMap>) {
        refill(&mut self.writers.lock().unwrap().markers, markers);
        self.ctx
            .stores
            .synced
            .mark(sentry_tenants::controller::Cache::Markers);
    }

    /// Empties the markers' cache alone, keeping it synced: a ConfigMap watch that has not yet
    /// delivered a marker the Tenant watch's report already names.
    pub fn forget_markers(&self) {
        refill(&mut self.writers.lock().unwrap().markers, Vec::new());
    }

    /// Deletes a Secret, then what it owns, as the garbage collector does (background propagation):
    /// the in-memory API has no garbage collector.
    pub async fn delete_secret_collecting_dependents(&self, name: &str) {
        use k8s_openapi::api::core::v1::Secret;
        let secrets = Api::<Secret>::namespaced(self.admin.clone(), NS);
        let uid = secrets.get(name).await.unwrap().metadata.uid.unwrap();
        secrets.delete(name, &Default::default()).await.unwrap();
        let config_maps = Api::<ConfigMap>::namespaced(self.admin.clone(), NS);
        for dependent in config_maps.list(&ListParams::default()).await.unwrap() {
            if dependent.owner_references().iter().any(|o| o.uid == uid) {
                config_maps
                    .delete(&dependent.name_any(), &Default::default())
                    .await
                    .unwrap();
            }
        }
    }

    /// Empties the caches: an operator that just restarted and has not listed anything yet.
    pub fn clear_stores(&self) {
        let mut w = self.writers.lock().unwrap();
        refill(&mut w.markers, Vec::new());
        let stores = &self.ctx.stores;
        refill_indexed(&mut w.tenants, |e| stores.index_tenant_event(e), Vec::new());
        refill_indexed(&mut w.runjobs, |e| stores.index_run_event(e), Vec::new());
        refill_indexed(&mut w.jobs, |e| stores.index_job_event(e), Vec::new());
        self.mark_synced();
    }

    pub async fn reconcile_tenant(&self, name: &str) -> Action {
        self.try_reconcile_tenant(name)
            .await
            .expect("tenant reconcile")
    }

    /// [`Self::reconcile_tenant`], for a test whose reconcile is meant to fail.
    pub async fn try_reconcile_tenant(
        &self,
        name: &str,
    ) -> sentry_tenants::controller::Result<Action> {
        self.sync_stores().await;
        let t = self.tenants().get(name).await.expect("tenant exists");
        tenant::reconcile(Arc::new(t), Arc::clone(&self.ctx)).await
    }

    pub async fn reconcile_run(&self, name: &str) -> Action {
        self.try_reconcile_run(name)
            .await
            .expect("runjob reconcile")
    }

    /// [`Self::reconcile_run`], for a test whose reconcile is meant to fail.
    pub async fn try_reconcile_run(
        &self,
        name: &str,
    ) -> sentry_tenants::controller::Result<Action> {
        self.sync_stores().await;
        let r = self.runjobs().get(name).await.expect("runjob exists");
        runjob::reconcile(Arc::new(r), Arc::clone(&self.ctx)).await
    }

    /// One pass over every object, errors ignored: the background "operator" of browser tests, which
    /// races the test's own writes the way a real controller does (a conflict is retried next pass).
    pub async fn reconcile_all_once(&self) {
        self.sync_stores().await;
        let Ok(runs) = self.runjobs().list(&ListParams::default()).await else {
            return;
        };
        for r in runs.items {
            let _ = runjob::reconcile(Arc::new(r), Arc::clone(&self.ctx)).await;
        }
        self.sync_stores().await;
        let Ok(tenants) = self.tenants().list(&ListParams::default()).await else {
            return;
        };
        for t in tenants.items {
            let _ = tenant::reconcile(Arc::new(t), Arc::clone(&self.ctx)).await;
        }
        self.sync_stores().await;
    }

    /// Reconciles every object until a full round writes nothing (the fixpoint). Returns the rounds.
    pub async fn settle(&self) -> usize {
        for round in 1..=20 {
            let before = self.log.writes().len();
            self.sync_stores().await;
            for r in self
                .runjobs()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
            {
                self.reconcile_run(&r.name_any()).await;
            }
            for t in self
                .tenants()
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
            {
                self.reconcile_tenant(&t.name_any()).await;
            }
            if self.log.writes().len() == before {
                return round;
            }
        }
        panic!("no fixpoint after 20 rounds: writes keep happening");
    }

    pub async fn tenant(&self, name: &str) -> Tenant {
        self.tenants().get(name).await.unwrap()
    }
    /// The runs of `action` now, sorted by name.
    pub async fn runs_of(&self, action: RunAction) -> Vec<RunJob> {
        let mut runs: Vec<RunJob> = self
            .runjobs()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|r| r.spec.action == action)
            .collect();
        runs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        runs
    }

    /// Someone removes every finalizer of the tenant by hand (the README's escape hatch).
    pub async fn remove_finalizers(&self, tenant: &str) {
        let patch = json!({"metadata": {"finalizers": null}});
        self.tenants()
            .patch(tenant, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Merge-patches the tenant's spec (a new generation, as the apiserver counts it).
    pub async fn patch_spec(&self, tenant: &str, spec: Value) {
        let patch = json!({ "spec": spec });
        self.tenants()
            .patch(tenant, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// The real provisioner against this API and the recording ClickHouse `ch`.
    pub fn provisioner(
        &self,
        ch: &clickhouse_seam::RecordingClickHouse,
        rotate: bool,
    ) -> sentry_tenants::provision::Provisioner<clickhouse_seam::RecordingClickHouse> {
        sentry_tenants::provision::Provisioner {
            clickhouse: ch.clone(),
            clickhouse_url: "http://clickhouse:8123".into(),
            sync: sentry_tenants::provision::TenantSync::new(
                self.client.clone(),
                NS,
                "/var/lib/sentry/tantivy",
            ),
            rotate,
            cluster: None,
            prefix: legacy_prefix(),
            clock: self.clock.clone(),
        }
    }

    pub async fn run(&self, name: &str) -> Option<RunJob> {
        self.runjobs().get_opt(name).await.unwrap()
    }
    pub async fn job(&self, name: &str) -> Option<Job> {
        self.jobs().get_opt(name).await.unwrap()
    }
}

fn refill<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: Clone + kube::runtime::reflector::Lookup,
    <K as kube::runtime::reflector::Lookup>::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for obj in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(obj));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// Refills a cache and the index kept beside it (tenants, runs) from the same events, as `run`'s
/// watches do.
fn refill_indexed<K>(writer: &mut Writer<K>, index: impl Fn(&watcher::Event<K>), objects: Vec<K>)
where
    K: Clone + kube::runtime::reflector::Lookup,
    <K as kube::runtime::reflector::Lookup>::DynamicType: Eq + std::hash::Hash + Clone,
{
    index(&watcher::Event::Init);
    for obj in &objects {
        index(&watcher::Event::InitApply(obj.clone()));
    }
    index(&watcher::Event::InitDone);
    refill(writer, objects);
}

/// Seconds of a requeue, for asserting "requeued for exactly that moment".
pub fn requeue_secs(action: &Action) -> Option<f64> {
    // Action has no public accessor; its Debug form is stable: `Action { requeue_after: Some(5s) }`.
    let dbg = format!("{action:?}");
    let inner = dbg.split("Some(").nth(1)?.split(')').next()?;
    let (num, unit) = inner.split_at(inner.find(|c: char| c.is_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "s" => n,
        "ms" => n / 1000.0,
        "µs" => n / 1e6,
        "ns" => n / 1e9,
        _ => return None,
    })
}

/// The ClickHouse seam for provisioner tests that need no server: the stand-in's server
/// ([`crate::clickhouse_model::Model`], the same rules as the HTTP stand-in's) called in-process, with
/// failures a test injects.
pub mod clickhouse_seam {
    use std::sync::{Arc, Mutex};

    use sentry_tenants::provision::{ChError, ClickHouse};

    pub use crate::clickhouse_model::Model;
    use crate::clickhouse_model::{Login, sha256_hex};

    #[derive(Default)]
    struct State {
        model: Model,
        fail_with: Option<ChError>,
        /// Queries still answered before `fail_with` takes effect.
        fail_in: usize,
    }

    #[derive(Clone)]
    pub struct RecordingClickHouse {
        version: String,
        state: Arc<Mutex<State>>,
    }

    impl RecordingClickHouse {
        pub fn new(version: &str) -> Self {
            Self {
                version: version.to_owned(),
                state: Arc::default(),
            }
        }
        /// A query `user` is running now, until a `KILL QUERY` ends it.
        pub fn start_query(&self, user: &str, id: &str) {
            let mut state = self.state.lock().unwrap();
            state.model.running.push((user.to_owned(), id.to_owned()));
        }
        /// The queries running now, as (user, id).
        pub fn running(&self) -> Vec<(String, String)> {
            self.state.lock().unwrap().model.running.clone()
        }
        /// Judges `VALID UNTIL` by `clock` (the in-memory cluster's) instead of this machine's.
        pub fn with_clock(self, clock: &sentry_tenants::clock::Clock) -> Self {
            self.state.lock().unwrap().model.clock = Some(clock.clone());
            self
        }
        pub fn statements(&self) -> Vec<String> {
            self.state.lock().unwrap().model.statements.clone()
        }
        pub fn ddl(&self) -> Vec<String> {
            self.state.lock().unwrap().model.ddl()
        }
        pub fn clear(&self) {
            self.state.lock().unwrap().model.statements.clear();
        }
        /// A user that exists in ClickHouse with some password (made or changed by hand, or by a
        /// lost run), as an admin does it: `CREATE USER` or `ALTER USER`, the hash computed here.
        pub fn add_user(&self, user: &str, password: &str) {
            let statement = if self.has_user(user) {
                "ALTER USER"
            } else {
                "CREATE USER"
            };
            self.run_by_hand(&format!(
                "{statement} `{user}` IDENTIFIED WITH sha256_hash BY '{}'",
                sha256_hex(password)
            ));
        }
        /// A statement an admin runs by hand, which the server must accept; not in the log of what
        /// the provisioner sent.
        pub fn run_by_hand(&self, sql: &str) {
            let mut state = self.state.lock().unwrap();
            let version = self.version.clone();
            if let Err(refused) = state.model.serve(&version, Login::Admin, sql) {
                panic!("{sql}: refused: {}", refused.message);
            }
            state.model.statements.pop();
        }
        /// Whether `user`'s logins are locked (`HOST NONE`), as the last statement about it left them.
        pub fn is_locked(&self, user: &str) -> Option<bool> {
            self.state.lock().unwrap().model.is_locked(user)
        }
        /// Statements that changed an existing user's password.
        pub fn password_changes(&self) -> usize {
            self.state.lock().unwrap().model.password_changes()
        }
        /// Whether `password` is `user`'s, by a SHA-256 computed here and not by the provisioner.
        pub fn password_matches(&self, user: &str, password: &str) -> bool {
            self.state
                .lock()
                .unwrap()
                .model
                .password_matches(user, password)
        }
        /// Whether `user` may log in with `password`: the right password and logins not locked.
        pub fn may_log_in(&self, user: &str, password: &str) -> bool {
            self.state.lock().unwrap().model.may_log_in(user, password)
        }
        pub fn has_user(&self, user: &str) -> bool {
            self.state.lock().unwrap().model.users.contains_key(user)
        }
        pub fn has_database(&self, database: &str) -> bool {
            self.state
                .lock()
                .unwrap()
                .model
                .databases
                .contains_key(database)
        }
        /// Reads the server's state (profiles, quotas, …).
        pub fn model<T>(&self, read: impl FnOnce(&Model) -> T) -> T {
            read(&self.state.lock().unwrap().model)
        }
        /// Changes the server's configuration (clusters, user directories).
        pub fn configure(&self, change: impl FnOnce(&mut Model)) {
            change(&mut self.state.lock().unwrap().model)
        }
        /// Every later query fails with `error` until `recover`.
        pub fn fail(&self, error: ChError) {
            self.fail_after(0, error);
        }
        /// Answers `queries` more queries, then fails every later one with `error` until `recover`: a
        /// server that goes away, or starts refusing the admin, in the middle of a run.
        pub fn fail_after(&self, queries: usize, error: ChError) {
            let mut st = self.state.lock().unwrap();
            st.fail_with = Some(error);
            st.fail_in = queries;
        }
        pub fn recover(&self) {
            self.state.lock().unwrap().fail_with = None;
        }
    }

    impl State {
        /// The injected failure, once its countdown has run out.
        fn failure(&mut self) -> Result<(), ChError> {
            let Some(error) = self.fail_with.clone() else {
                return Ok(());
            };
            if self.fail_in == 0 {
                return Err(error);
            }
            self.fail_in -= 1;
            Ok(())
        }
    }

    impl ClickHouse for RecordingClickHouse {
        async fn query(&self, sql: &str) -> Result<String, ChError> {
            let mut st = self.state.lock().unwrap();
            st.failure()?;
            st.model
                .serve(&self.version, Login::Admin, sql)
                .map_err(server_error)
        }

        async fn query_as(&self, user: &str, password: &str, sql: &str) -> Result<String, ChError> {
            let mut st = self.state.lock().unwrap();
            // A refused admin does not stop the tenant's own login; a server that is gone does.
            if matches!(st.fail_with, Some(ChError::Unreachable(_))) {
                st.failure()?;
            }
            st.model
                .serve(&self.version, Login::User { user, password }, sql)
                .map_err(server_error)
        }
    }

    /// A refusal as the product's HTTP client reads it.
    fn server_error(refused: crate::clickhouse_model::Refused) -> ChError {
        ChError::Server {
            status: crate::clickhouse_model::http_status(refused.code),
            code: Some(refused.code),
            message: refused.message,
        }
    }
}

/// The dashboard over the in-memory cluster: the real router, backend and actions, reading the same
/// caches the reconcilers use.
pub mod dashboard {
    use std::sync::Arc;

    use sentry_tenants::web::actions::Actions;
    use sentry_tenants::web::backend::ClusterBackend;
    use sentry_tenants::web::dashboard::{Dashboard, router};
    use sentry_tenants::web::permissions::Permissions;
    use sentry_tenants_app::model::Allowed;

    use super::{Cluster, NS};

    /// The session token the dashboard's pages carry in their forms, as a browser has it: read from
    /// the new-tenant page, which always has a form.
    pub async fn session_of(router: axum::Router) -> String {
        use tower::ServiceExt;
        let request = http::Request::get("/tenants/new")
            .header(http::header::HOST, "127.0.0.1:8080")
            .body(axum::body::Body::empty())
            .expect("a request");
        let reply = router.oneshot(request).await.expect("a reply");
        let bytes = http_body_util::BodyExt::collect(reply.into_body())
            .await
            .expect("a body")
            .to_bytes();
        session_in(&String::from_utf8_lossy(&bytes))
            .expect("the page's forms carry a session token")
    }

    /// The `session` field of the first form in `page`.
    pub fn session_in(page: &str) -> Option<String> {
        const FIELD: &str = r#"name="session" value=""#;
        let rest = &page[page.find(FIELD)? + FIELD.len()..];
        Some(rest[..rest.find('"')?].to_owned())
    }

    /// `form` with `session=<token>` added, as the page's form sends it.
    pub fn with_session(form: &str, token: &str) -> String {
        if form.is_empty() {
            format!("session={token}")
        } else {
            format!("{form}&session={token}")
        }
    }

    pub fn dashboard_router(c: &Cluster, read_only: bool) -> axum::Router {
        // No shutdown: the sender is gone, which `serve::stopped` reads as "never".
        dashboard_router_until(c, read_only, tokio::sync::watch::channel(false).1)
    }

    /// [`dashboard_router`] whose event streams end when `shutdown` says true, as `run`'s do.
    pub fn dashboard_router_until(
        c: &Cluster,
        read_only: bool,
        shutdown: tokio::sync::watch::Receiver<bool>,
    ) -> axum::Router {
        dashboard_router_with(c, read_only, shutdown, true)
    }

    /// [`dashboard_router`] whose pages render every row and chart, kept or not (`keep_fragments`).
    pub fn dashboard_router_rendering_every_fragment(c: &Cluster) -> axum::Router {
        dashboard_router_with(c, false, tokio::sync::watch::channel(false).1, false)
    }

    /// The dashboard's view of `c`'s caches, as `run` makes it; keeping the rows it builds or not.
    pub fn backend(c: &Cluster, read_only: bool, keep_rows: bool) -> ClusterBackend {
        ClusterBackend {
            client: c.client.clone(),
            stores: c.ctx.stores.clone(),
            namespace: NS.into(),
            permissions: Permissions::fixed(if read_only {
                Allowed::NONE
            } else {
                Allowed::ALL
            }),
            acting_as: sentry_tenants::web::actions::ActingAs::Operator,
            clock: c.clock.clone(),
            leader: Default::default(),
            rows: keep_rows.then(Default::default),
        }
    }

    fn dashboard_router_with(
        c: &Cluster,
        read_only: bool,
        shutdown: tokio::sync::watch::Receiver<bool>,
        keep_fragments: bool,
    ) -> axum::Router {
        let stores = c.ctx.stores.clone();
        router(Dashboard {
            backend: Arc::new(backend(c, read_only, keep_fragments)),
            actions: Arc::new(Actions {
                client: c.client.clone(),
                stores: stores.clone(),
                namespace: NS.into(),
                acting_as: sentry_tenants::web::actions::ActingAs::Operator,
            }),
            changes: stores.changes.subscribe(),
            read_only,
            allowed_hosts: sentry_tenants::web::hosts::AllowedHosts::new(&[]),
            shutdown,
            keep_fragments,
        })
    }
}

/// One multi-threaded runtime shared by every dashboard test in a binary, as the operator process has
/// one: Leptos keeps process-global state (its task spawner, route lists) that must not outlive the
/// runtime of whichever test happened to touch it first.
/// How long a wait may take before a test calls it a hang. Waits end as soon as what they wait for
/// happens; this only bounds a wait that would otherwise never end, on a loaded 2-core machine.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("test runtime")
    });
    RUNTIME.block_on(future)
}
