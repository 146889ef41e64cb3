//! The dashboard's mutating routes — Create, Provision, Suspend, Resume, Rotate, Revoke, Deliver, Delete — as plain form posts. Without
//! JavaScript they redirect back (303) with the outcome in the query; the hydrated page asks for JSON
//! instead. Every request must come from the dashboard's own origin, and none of these routes exists
//! in read-only mode.

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::{Form, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, post};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use sentry_tenants_app::forms::ActionReply;
use serde::Deserialize;
use serde_json::json;

use super::permissions::{CHANGE, CREATE, DELETE, START_RUNS};
use super::serve::Peer;
use crate::controller::tenant::{new_run_job, writes_copies};
use crate::controller::{Stores, cached_or_fetched, write_params};
use crate::crd::{
    ProvisioningPolicy, ReclaimPolicy, RunAction, RunJob, Tenant, TenantLimits, TenantSpec,
};
use crate::limits::Limits;
use crate::names::{TenantName, validate_display_name};

pub struct Actions {
    pub client: Client,
    pub stores: Stores,
    pub namespace: String,
    pub acting_as: ActingAs,
}

/// Whose credentials the actions are made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActingAs {
    /// The operator's ServiceAccount, for whoever reached its dashboard: the API server's audit log
    /// names only the operator, so the dashboard records each action itself (a log line and an Event).
    Operator,
    /// The person's own kubeconfig (`dashboard --local`, named as the API server knows them): their
    /// RBAC decides and the API server's audit log names them; what they create carries their name.
    Person(String),
}

impl Actions {
    fn tenants(&self) -> Api<Tenant> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

pub fn router(actions: Arc<Actions>) -> Router {
    Router::new()
        .route("/tenants", post(create_tenant))
        .route("/tenants/{name}/provision", button(Button::Provision))
        .route("/tenants/{name}/suspend", button(Button::Suspend))
        .route("/tenants/{name}/resume", button(Button::Resume))
        .route("/tenants/{name}/rotate", button(Button::Rotate))
        .route("/tenants/{name}/revoke", button(Button::Revoke))
        .route("/tenants/{name}/deliver", button(Button::Deliver))
        .route("/tenants/{name}/delete", post(delete))
        .route("/tenants/{name}/limits", post(change_limits))
        .route_layer(middleware::from_fn(from_our_pages_only))
        .route_layer(middleware::from_fn(same_origin_only))
        .fallback(no_such_action)
        .with_state(actions)
}

async fn no_such_action(uri: axum::http::Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!(
            "no such action: /actions{} (the actions are provision, suspend, resume, rotate, revoke, deliver, delete and limits)",
            uri.path()
        ),
    )
        .into_response()
}

/// Refuses cross-site requests: the browser's `Sec-Fetch-Site` must say same-origin, or — for clients
/// that do not send it — `Origin` must name this host. A request with neither is refused too.
pub async fn same_origin_only(request: Request, next: Next) -> Response {
    // Only POST reaches a handler; anything else is left to the router's 405.
    if request.method() != axum::http::Method::POST || is_same_origin(request.headers()) {
        next.run(request).await
    } else {
        (
            StatusCode::FORBIDDEN,
            "cross-site request refused: the dashboard only accepts its own forms",
        )
            .into_response()
    }
}

/// The most a form post's body may be: the largest form (a tenant with its limits) is well under 1 KiB.
const FORM_LIMIT: usize = 64 * 1024;

/// Refuses a post that does not send back the session token its page carried (the `session` field
/// [`super::flash::session_token`] puts in every form): the post must come from a page this process
/// served. Runs after [`same_origin_only`].
pub async fn from_our_pages_only(request: Request, next: Next) -> Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, FORM_LIMIT).await else {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a form post is at most {FORM_LIMIT} bytes"),
        )
            .into_response();
    };
    // The token is hex: it stands in the body as it is, never percent-encoded.
    let sent = bytes
        .split(|b| *b == b'&')
        .find_map(|pair| pair.strip_prefix(b"session="))
        .and_then(|token| std::str::from_utf8(token).ok());
    if !sent.is_some_and(super::flash::is_session_token) {
        return (
            StatusCode::FORBIDDEN,
            "this form does not come from a page the dashboard served since it started (it restarts \
             with a new session): reload the page and try again",
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}

pub fn is_same_origin(headers: &HeaderMap) -> bool {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site") {
        return site == "same-origin";
    }
    match (get("origin"), get("host")) {
        (Some(origin), Some(host)) => {
            let origin_host = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            origin_host == Some(host)
        }
        _ => false,
    }
}

#[derive(Debug)]
struct Outcome {
    ok: bool,
    status: StatusCode,
    message: String,
    redirect: Option<String>,
}

impl Outcome {
    fn done(message: impl Into<String>) -> Self {
        Self {
            ok: true,
            status: StatusCode::OK,
            message: message.into(),
            redirect: None,
        }
    }
    fn failed(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            ok: false,
            status,
            message: message.into(),
            redirect: None,
        }
    }
    /// A failed API request for `action`, which needed `permission` in `namespace`. A refusal is said
    /// as what the account may not do, with the API server's own words (they name the account).
    fn kube(action: &str, permission: (&str, &str), namespace: &str, e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.code == 403 => {
                let (verb, resource) = permission;
                Self::failed(
                    StatusCode::FORBIDDEN,
                    format!(
                        "you may not {verb} {resource} in {namespace}: {}",
                        s.message
                    ),
                )
            }
            kube::Error::Api(s) => Self::failed(
                StatusCode::from_u16(s.code).unwrap_or(StatusCode::BAD_GATEWAY),
                crate::cluster::describe(action, e),
            ),
            _ => Self::failed(StatusCode::BAD_GATEWAY, crate::cluster::describe(action, e)),
        }
    }
}

/// Where a no-JS post returns: a local path only (never another site, never `//host`), checked as the
/// browser will read it — browsers drop tabs and newlines from a URL, so `/\t/evil.example` is
/// `//evil.example` to them.
fn safe_return(return_to: Option<&str>) -> String {
    let read = return_to.map(|p| {
        p.chars()
            .filter(|c| !c.is_ascii_control())
            .collect::<String>()
    });
    match read {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p,
        _ => "/tenants".to_owned(),
    }
}

fn with_query(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut url = path.to_owned();
    for (k, v) in pairs {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&format!("{k}={}", crate::text::percent_encode(v)));
    }
    url
}

/// Strips earlier messages and the confirmation's parameters so they do not pile up in the URL.
fn without_messages(path: &str) -> String {
    super::flash::without_params(path, |key| key == "confirm" || key == "tenant")
}

/// JSON for the hydrated page, a 303 back for a plain form post.
fn reply(
    headers: &HeaderMap,
    outcome: Outcome,
    return_to: &str,
    echo: &[(&str, &str)],
) -> Response {
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json"));
    if wants_json {
        let body = ActionReply {
            ok: outcome.ok,
            message: outcome.message,
            redirect: outcome.redirect,
        };
        return (outcome.status, axum::Json(body)).into_response();
    }
    let target = if outcome.ok {
        with_query(
            &without_messages(outcome.redirect.as_deref().unwrap_or(return_to)),
            &[("notice", &outcome.message)],
        )
    } else {
        let mut pairs = vec![("error", outcome.message.as_str())];
        pairs.extend_from_slice(echo);
        with_query(&without_messages(return_to), &pairs)
    };
    // Signed, so that only this redirect can make the page show the message.
    Redirect::to(&super::flash::signed_url(&target)).into_response()
}

#[derive(Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    display_name: String,
    /// "Automatic" or "Manual"; absent means the CRD's default (Automatic).
    #[serde(default)]
    provisioning: Option<String>,
    /// "Retain" or "Delete"; absent means the CRD's default (Retain).
    #[serde(default)]
    reclaim_policy: Option<String>,
    #[serde(flatten)]
    limits: LimitsForm,
    return_to: Option<String>,
}

/// The four limit fields, as typed (empty: no limit).
#[derive(Deserialize, Default)]
pub struct LimitsForm {
    #[serde(default)]
    max_memory_per_query: String,
    #[serde(default)]
    max_execution_seconds: String,
    #[serde(default)]
    max_concurrent_queries: String,
    #[serde(default)]
    queries_per_hour: String,
}

impl LimitsForm {
    fn parse(&self) -> Result<TenantLimits, Outcome> {
        Limits::from_form(
            &self.max_memory_per_query,
            &self.max_execution_seconds,
            &self.max_concurrent_queries,
            &self.queries_per_hour,
        )
        .map(TenantLimits::from)
        .map_err(|e| Outcome::failed(StatusCode::UNPROCESSABLE_ENTITY, e))
    }

    /// What a rejected no-JS post brings back into the fields.
    fn echo(&self) -> [(&'static str, &str); 4] {
        [
            ("max_memory_per_query", self.max_memory_per_query.as_str()),
            ("max_execution_seconds", self.max_execution_seconds.as_str()),
            (
                "max_concurrent_queries",
                self.max_concurrent_queries.as_str(),
            ),
            ("queries_per_hour", self.queries_per_hour.as_str()),
        ]
    }
}

#[derive(Deserialize)]
pub struct ChangeLimitsForm {
    #[serde(flatten)]
    limits: LimitsForm,
    return_to: Option<String>,
}

#[derive(Deserialize)]
pub struct ReturnForm {
    return_to: Option<String>,
}

async fn create_tenant(
    State(a): State<Arc<Actions>>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Form(form): Form<CreateForm>,
) -> Response {
    let return_to = safe_return(form.return_to.as_deref().or(Some("/tenants/new")));
    let name = form.name.trim().to_owned();
    let display = form.display_name.trim().to_owned();
    let policy = form.provisioning.as_deref().unwrap_or("Automatic");
    let reclaim = form.reclaim_policy.as_deref().unwrap_or("Retain");
    let mut echo = vec![
        ("name", name.as_str()),
        ("display_name", display.as_str()),
        ("provisioning", policy),
        ("reclaim_policy", reclaim),
    ];
    echo.extend(form.limits.echo());
    let outcome = match form.limits.parse() {
        Ok(limits) => create(&a, &name, &display, (policy, reclaim), limits).await,
        Err(refused) => refused,
    };
    attribute(&a, "Create", &name, &outcome, peer).await;
    reply(&headers, outcome, &return_to, &echo)
}

async fn create(
    a: &Actions,
    name: &str,
    display: &str,
    (policy, reclaim): (&str, &str),
    limits: TenantLimits,
) -> Outcome {
    let name = match TenantName::parse(name) {
        Ok(n) => n,
        Err(e) => return Outcome::failed(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    if let Err(e) = validate_display_name(display) {
        return Outcome::failed(StatusCode::UNPROCESSABLE_ENTITY, e.to_string());
    }
    let provisioning: ProvisioningPolicy = match policy.parse() {
        Ok(p) => p,
        Err(e) => return Outcome::failed(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let reclaim_policy: ReclaimPolicy = match reclaim.parse() {
        Ok(p) => p,
        Err(e) => return Outcome::failed(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let tenant = Tenant {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(a.namespace.clone()),
            annotations: Some(made_by_the_dashboard(a)),
            ..ObjectMeta::default()
        },
        spec: TenantSpec {
            display_name: (!display.is_empty()).then(|| display.to_owned()),
            provisioning,
            reclaim_policy,
            limits: (!limits.is_empty()).then_some(limits),
            ..TenantSpec::default()
        },
        status: None,
    };
    match a
        .tenants()
        .create(
            &PostParams {
                field_manager: Some(crate::controller::MANAGER.into()),
                ..Default::default()
            },
            &tenant,
        )
        .await
    {
        Ok(_) => Outcome {
            redirect: Some(format!("/tenants/{name}")),
            ..Outcome::done(match provisioning {
                ProvisioningPolicy::Automatic => format!(
                    "Tenant {name} created. The operator is provisioning its database and credentials."
                ),
                ProvisioningPolicy::Manual => format!(
                    "Tenant {name} created. Provision it to create its database and credentials."
                ),
            })
        },
        Err(kube::Error::Api(s)) if s.code == 409 => Outcome::failed(
            StatusCode::CONFLICT,
            format!("a tenant named {name} already exists"),
        ),
        Err(e) => Outcome::kube(&format!("create tenant {name}"), CREATE, &a.namespace, &e),
    }
}

/// The actions that are one button on a tenant: the same form (only where to come back to), the
/// same answer; each differs only in what it starts.
#[derive(Clone, Copy, Debug)]
enum Button {
    Provision,
    Suspend,
    Resume,
    Rotate,
    Revoke,
    Deliver,
}

impl Button {
    /// The action's name in the log line and the Event.
    fn label(self) -> &'static str {
        match self {
            Button::Provision => "Provision",
            Button::Suspend => "Suspend",
            Button::Resume => "Resume",
            Button::Rotate => "Rotate",
            Button::Revoke => "Revoke",
            Button::Deliver => "Deliver",
        }
    }

    async fn press(self, a: &Actions, name: &str) -> Outcome {
        match self {
            Button::Provision => start_provision(a, name).await,
            Button::Suspend => set_suspended(a, name, true).await,
            Button::Resume => set_suspended(a, name, false).await,
            Button::Rotate => start_credentials_run(a, name, RunAction::Rotate).await,
            Button::Revoke => start_credentials_run(a, name, RunAction::Revoke).await,
            Button::Deliver => start_credentials_run(a, name, RunAction::Deliver).await,
        }
    }
}

/// The route of one [`Button`].
fn button(b: Button) -> MethodRouter<Arc<Actions>> {
    post(
        move |State(a): State<Arc<Actions>>,
              Path(name): Path<String>,
              peer: Option<Extension<Peer>>,
              headers: HeaderMap,
              Form(form): Form<ReturnForm>| async move {
            let outcome = b.press(&a, &name).await;
            answer(
                &a,
                b.label(),
                &name,
                outcome,
                peer,
                &headers,
                form.return_to.as_deref(),
            )
            .await
        },
    )
}

async fn start_provision(a: &Actions, name: &str) -> Outcome {
    let tenant = match find(a, name).await {
        Ok(t) => t,
        Err(o) => return o,
    };
    if tenant.is_provisioned() {
        return Outcome::failed(
            StatusCode::CONFLICT,
            format!("{name} is already provisioned"),
        );
    }
    start_run(
        a,
        &tenant,
        RunAction::Provision,
        "being provisioned",
        "Provisioning",
    )
    .await
}

#[derive(Deserialize)]
pub struct DeleteForm {
    /// The tenant's name, typed by the person as a confirmation.
    #[serde(default)]
    confirm_name: String,
    return_to: Option<String>,
}

async fn delete(
    State(a): State<Arc<Actions>>,
    Path(name): Path<String>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Form(form): Form<DeleteForm>,
) -> Response {
    let outcome = delete_tenant(&a, &name, form.confirm_name.trim()).await;
    answer(
        &a,
        "Delete",
        &name,
        outcome,
        peer,
        &headers,
        form.return_to.as_deref(),
    )
    .await
}

/// Deletes the Tenant once its name was typed; the reclaim finalizer makes the Tenant controller carry
/// out its reclaim policy before it goes.
async fn delete_tenant(a: &Actions, name: &str, typed: &str) -> Outcome {
    let tenant = match find(a, name).await {
        Ok(t) => t,
        Err(o) => return o,
    };
    if typed != name {
        return Outcome::failed(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("type the tenant's name, {name}, to delete it"),
        );
    }
    let policy = tenant.spec.reclaim_policy.as_str();
    match a.tenants().delete(name, &DeleteParams::background()).await {
        Ok(_) => Outcome {
            redirect: Some("/tenants".to_owned()),
            ..Outcome::done(format!(
                "Deleting {name}: its reclaimPolicy {policy} is carried out before it goes"
            ))
        },
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Outcome::done(format!("{name} is already gone"))
        }
        Err(e) => Outcome::kube(&format!("delete tenant {name}"), DELETE, &a.namespace, &e),
    }
}

/// A Rotate, Revoke or Deliver run: only for a provisioned tenant, and one run that writes the
/// credentials or their copies at a time (a Revoke while a Rotate runs would race it for the pending
/// password; a Deliver beside either could copy the password being replaced).
async fn start_credentials_run(a: &Actions, name: &str, action: RunAction) -> Outcome {
    let tenant = match find(a, name).await {
        Ok(t) => t,
        Err(o) => return o,
    };
    if !tenant.is_provisioned() {
        return Outcome::failed(
            StatusCode::CONFLICT,
            format!(
                "{name} is not provisioned yet: there are no credentials to {}",
                action.as_str().to_lowercase()
            ),
        );
    }
    if action == RunAction::Deliver && tenant.spec.credential_copies().is_empty() {
        return Outcome::failed(
            StatusCode::CONFLICT,
            format!("{name} asks for no copies of its credentials (spec.credentials.copies)"),
        );
    }
    let runs = a.stores.runs_of(&a.namespace, name);
    let other =
        |r: &RunJob| r.spec.action != action && writes_copies(r.spec.action) && r.is_in_flight();
    if let Some(r) = runs.iter().find(|r| other(r)) {
        return Outcome::failed(
            StatusCode::CONFLICT,
            format!(
                "{name} is having its credentials or their copies written by {} ({}): try again once it has finished",
                r.name_any(),
                r.spec.action.as_str()
            ),
        );
    }
    let (busy, started) = match action {
        RunAction::Revoke => (
            "having its credentials revoked",
            "Revoking every earlier password of",
        ),
        RunAction::Deliver => (
            "having its copies of the credentials written",
            "Writing the copies of the credentials of",
        ),
        _ => (
            "having its credentials rotated",
            "Rotating the credentials of",
        ),
    };
    start_run(a, &tenant, action, busy, started).await
}

/// Starts a run of `action` for `tenant` unless one is in flight: a double click, or a second
/// browser, starts one run.
async fn start_run(
    a: &Actions,
    tenant: &Tenant,
    action: RunAction,
    busy: &str,
    started: &str,
) -> Outcome {
    let name = tenant.name_any();
    let runs = a.stores.runs_of(&a.namespace, &name);
    if let Some(running) = runs
        .iter()
        .find(|r| r.spec.action == action && r.is_in_flight())
    {
        return Outcome::done(format!(
            "{name} is already {busy} by {}",
            running.name_any()
        ));
    }
    let run_name = crate::controller::attempts::next_run_by_hand(tenant, &runs, action);
    let mut run = new_run_job(tenant, &run_name, action);
    run.metadata.annotations = Some(made_by_the_dashboard(a));
    let api: Api<crate::crd::RunJob> = Api::namespaced(a.client.clone(), &a.namespace);
    match api
        .create(
            &PostParams {
                field_manager: Some(crate::controller::MANAGER.into()),
                ..Default::default()
            },
            &run,
        )
        .await
    {
        Ok(_) => Outcome::done(format!("{started} {name}: run {run_name} started")),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Outcome::done(format!("{name} is already {busy} by {run_name}"))
        }
        Err(e) => Outcome::kube(
            &format!("start a {} run for {name}", action.as_str()),
            START_RUNS,
            &a.namespace,
            &e,
        ),
    }
}

/// Patches `spec.suspended` only; the Tenant reconciler creates the Suspend/Resume run. Idempotent.
async fn set_suspended(a: &Actions, name: &str, suspended: bool) -> Outcome {
    if let Err(o) = find(a, name).await {
        return o;
    }
    let patch = json!({ "spec": { "suspended": suspended } });
    match a
        .tenants()
        .patch(name, &write_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) if suspended => Outcome::done(format!(
            "{name} suspended: its ClickHouse logins are being locked"
        )),
        Ok(_) => Outcome::done(format!(
            "{name} resumed: its ClickHouse logins are being unlocked"
        )),
        Err(e) => Outcome::kube(
            &format!("{} {name}", if suspended { "suspend" } else { "resume" }),
            CHANGE,
            &a.namespace,
            &e,
        ),
    }
}

async fn change_limits(
    State(a): State<Arc<Actions>>,
    Path(name): Path<String>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    Form(form): Form<ChangeLimitsForm>,
) -> Response {
    let outcome = match form.limits.parse() {
        Ok(limits) => set_limits(&a, &name, limits).await,
        Err(refused) => refused,
    };
    attribute(&a, "ChangeLimits", &name, &outcome, peer).await;
    let return_to = safe_return(form.return_to.as_deref());
    reply(&headers, outcome, &return_to, &form.limits.echo())
}

/// Replaces `spec.limits` whole; the Tenant reconciler starts the SetLimits run if ClickHouse must change.
async fn set_limits(a: &Actions, name: &str, limits: TenantLimits) -> Outcome {
    let tenant = match find(a, name).await {
        Ok(t) => t,
        Err(o) => return o,
    };
    let patch = json!({ "spec": { "limits": limits.merge_patch_value() } });
    match a
        .tenants()
        .patch(name, &write_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Outcome {
            // Back to the tenant's page, out of the (frozen) form.
            redirect: Some(format!("/tenants/{name}")),
            ..Outcome::done(if tenant.is_provisioned() {
                format!(
                    "{name}'s limits are now {}: a SetLimits run is applying them in ClickHouse",
                    limits.describe()
                )
            } else {
                format!(
                    "{name}'s limits are now {}: they apply when it is provisioned",
                    limits.describe()
                )
            })
        },
        Err(e) => Outcome::kube(
            &format!("change the limits of {name}"),
            CHANGE,
            &a.namespace,
            &e,
        ),
    }
}

/// Records the action (see [`attribute`]) and answers it as the request asked.
async fn answer(
    a: &Actions,
    action: &str,
    tenant: &str,
    outcome: Outcome,
    peer: Option<Extension<Peer>>,
    headers: &HeaderMap,
    return_to: Option<&str>,
) -> Response {
    attribute(a, action, tenant, &outcome, peer).await;
    reply(headers, outcome, &safe_return(return_to), &[])
}

/// On what a dashboard action creates: `dashboard` (the operator's ServiceAccount made it, for someone at
/// the dashboard; who, the Event and the log line say as far as the dashboard can tell) or `dashboard
/// --local`, with the person's name in [`CREATED_BY_USER`].
pub const CREATED_BY: &str = "sentry.io/created-by";
pub const CREATED_BY_USER: &str = "sentry.io/created-by-user";

fn made_by_the_dashboard(a: &Actions) -> std::collections::BTreeMap<String, String> {
    match &a.acting_as {
        ActingAs::Operator => [(CREATED_BY.to_owned(), "dashboard".to_owned())].into(),
        ActingAs::Person(who) => [
            (CREATED_BY.to_owned(), "dashboard --local".to_owned()),
            (CREATED_BY_USER.to_owned(), who.clone()),
        ]
        .into(),
    }
}

/// Every action is logged (action, tenant, outcome, the connection's peer, whose credentials) and, when
/// it is the operator's ServiceAccount acting for whoever reached the dashboard (the API server's audit
/// log then names only the operator), recorded as an Event on the Tenant. A person acting with their
/// own credentials is in the API server's audit log already, and gets an Event only for what the API
/// server let them do: a refused request writes nothing.
async fn attribute(
    a: &Actions,
    action: &str,
    tenant: &str,
    outcome: &Outcome,
    peer: Option<Extension<Peer>>,
) {
    let peer = peer.map_or_else(|| "unknown".to_owned(), |Extension(Peer(p))| p.to_string());
    let by = match &a.acting_as {
        ActingAs::Operator => "the operator's ServiceAccount",
        ActingAs::Person(who) => who.as_str(),
    };
    if outcome.ok {
        tracing::info!(action, tenant, outcome = %outcome.message, %peer, acting_as = by, "dashboard action");
    } else {
        tracing::warn!(action, tenant, outcome = %outcome.message, %peer, acting_as = by, "dashboard action failed");
    }
    // An Event needs a tenant to hang on: none for a name that is not one, or a tenant not there.
    if TenantName::parse(tenant).is_err() || outcome.status == StatusCode::NOT_FOUND {
        return;
    }
    let note = match &a.acting_as {
        ActingAs::Operator => format!(
            "{action} from the dashboard (peer {peer}): {}",
            outcome.message
        ),
        ActingAs::Person(_) if !outcome.ok => return,
        ActingAs::Person(who) => format!(
            "{action} by {who} from `dashboard --local`: {}",
            outcome.message
        ),
    };
    let regarding = ObjectReference {
        api_version: Some(Tenant::api_version(&()).into_owned()),
        kind: Some(Tenant::kind(&()).into_owned()),
        name: Some(tenant.to_owned()),
        namespace: Some(a.namespace.clone()),
        ..ObjectReference::default()
    };
    let reporter = Reporter {
        controller: "sentry-tenants-dashboard".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let event = Event {
        type_: if outcome.ok {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: "DashboardAction".into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(error) = Recorder::new(a.client.clone(), reporter)
        .publish(&event, &regarding)
        .await
    {
        tracing::warn!(%error, "could not record the dashboard action as an Event");
    }
}

async fn find(a: &Actions, name: &str) -> Result<Arc<Tenant>, Outcome> {
    if TenantName::parse(name).is_err() {
        return Err(Outcome::failed(
            StatusCode::NOT_FOUND,
            format!("no tenant named {name:?}"),
        ));
    }
    match cached_or_fetched(&a.stores.tenants, &a.tenants(), &a.namespace, name).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(Outcome::failed(
            StatusCode::NOT_FOUND,
            format!("no tenant named {name}"),
        )),
        Err(e) => Err(Outcome::kube(
            &format!("read tenant {name}"),
            ("get", "tenants"),
            &a.namespace,
            &e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_same_origin_requests_pass() {
        assert!(is_same_origin(&headers(&[(
            "sec-fetch-site",
            "same-origin"
        )])));
        assert!(!is_same_origin(&headers(&[
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(is_same_origin(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!is_same_origin(&headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(
            !is_same_origin(&headers(&[("host", "127.0.0.1:8080")])),
            "no Origin at all is refused"
        );
    }

    #[test]
    fn return_paths_stay_on_this_site() {
        assert_eq!(
            safe_return(Some("/tenants?phase=Active")),
            "/tenants?phase=Active"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/\\evil",
            "javascript:alert(1)",
        ] {
            assert_eq!(safe_return(Some(bad)), "/tenants", "{bad}");
        }
    }

    #[test]
    fn messages_do_not_pile_up_in_the_url() {
        assert_eq!(
            without_messages("/tenants?phase=Active&notice=x&confirm=suspend&tenant=a"),
            "/tenants?phase=Active"
        );
        assert_eq!(
            with_query("/tenants/new", &[("error", "bad name"), ("name", "A&B")]),
            "/tenants/new?error=bad%20name&name=A%26B"
        );
    }
}
