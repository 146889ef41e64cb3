//! Malformed input sweep: tables of bad tenant names, display names, actions, form posts and RunJob
//! specs, each answered with its exact error while nothing is written. (The CLI flags' table is in
//! `server/tests/cli.rs`, where the binary is run.)

use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use kube::api::ListParams;
use sentry_tenants::crd::{RunJob, Tenant};
use sentry_tenants::names::{MAX_DISPLAY_NAME, MAX_TENANT_NAME};
use sentry_tenants_tests::dashboard::dashboard_router;
use sentry_tenants_tests::{Cluster, block_on, schema_errors};
use serde_json::{Value, json};
use tower::ServiceExt;

const SAME_ORIGIN: &str = "http://127.0.0.1:8080";
const FORM: &str = "application/x-www-form-urlencoded";

/// One bad request to the dashboard and the exact answer it must get.
struct Post {
    what: &'static str,
    path: String,
    body: String,
    origin: Option<&'static str>,
    content_type: &'static str,
    status: StatusCode,
    message: String,
}

fn post(what: &'static str, path: &str, body: &str, status: StatusCode, message: &str) -> Post {
    Post {
        what,
        path: path.to_owned(),
        body: body.to_owned(),
        origin: Some(SAME_ORIGIN),
        content_type: FORM,
        status,
        message: message.to_owned(),
    }
}

fn create(what: &'static str, name: &str, display: &str, message: &str) -> Post {
    let body = format!(
        "name={}&display_name={}",
        sentry_tenants::text::percent_encode(name),
        sentry_tenants::text::percent_encode(display)
    );
    post(
        what,
        "/actions/tenants",
        &body,
        StatusCode::UNPROCESSABLE_ENTITY,
        message,
    )
}

fn invalid_name(name: &str) -> String {
    format!(
        "tenant name {name:?} is invalid: use lowercase letters, digits and '-', start with a letter and end with a letter or digit"
    )
}

fn cases() -> Vec<Post> {
    let long_name = "a".repeat(MAX_TENANT_NAME + 1);
    let mut cases = vec![
        create("empty name", "", "", "tenant name must not be empty"),
        create("blank name", "   ", "", "tenant name must not be empty"),
        create(
            "name too long",
            &long_name,
            "",
            &format!(
                "tenant name {long_name:?} is {} characters long; the limit is {MAX_TENANT_NAME}",
                MAX_TENANT_NAME + 1
            ),
        ),
        create(
            "display name too long",
            "acme",
            &"é".repeat(MAX_DISPLAY_NAME + 1),
            &format!(
                "display name is {} characters long; the limit is {MAX_DISPLAY_NAME}",
                MAX_DISPLAY_NAME + 1
            ),
        ),
    ];
    for bad in [
        "Acme",
        "acme_corp",
        "-acme",
        "acme-",
        "1acme",
        "acme corp",
        "ácme",
        "../etc",
        "acme\u{0}",
        "<script>",
    ] {
        cases.push(create("invalid name", bad, "", &invalid_name(bad)));
    }
    for bad in [
        "two\nlines",
        "tab\there",
        "bell\u{7}",
        "del\u{7f}",
        "esc\u{1b}[31m",
    ] {
        cases.push(create(
            "control character in display name",
            "acme",
            bad,
            "display name must not contain control characters (newlines, tabs, escapes)",
        ));
    }
    cases.extend([
        post(
            "taken name",
            "/actions/tenants",
            "name=globex",
            StatusCode::CONFLICT,
            "a tenant named globex already exists",
        ),
        post(
            "action on a missing tenant",
            "/actions/tenants/ghost/provision",
            "",
            StatusCode::NOT_FOUND,
            "no tenant named ghost",
        ),
        post(
            "action on an invalid name",
            "/actions/tenants/Bad_Name/suspend",
            "",
            StatusCode::NOT_FOUND,
            "no tenant named \"Bad_Name\"",
        ),
        post(
            "provision twice",
            "/actions/tenants/globex/provision",
            "",
            StatusCode::CONFLICT,
            "globex is already provisioned",
        ),
        post(
            "unknown action",
            "/actions/tenants/acme/explode",
            "",
            StatusCode::NOT_FOUND,
            "no such action: /actions/tenants/acme/explode (the actions are provision, suspend, resume, rotate, revoke, deliver, delete and limits)",
        ),
        Post {
            origin: Some("http://evil.example"),
            ..post(
                "cross-site post",
                "/actions/tenants",
                "name=evil",
                StatusCode::FORBIDDEN,
                "cross-site request refused: the dashboard only accepts its own forms",
            )
        },
        Post {
            origin: None,
            ..post(
                "post without Origin",
                "/actions/tenants/acme/suspend",
                "",
                StatusCode::FORBIDDEN,
                "cross-site request refused: the dashboard only accepts its own forms",
            )
        },
        Post {
            content_type: "application/json",
            ..post(
                "JSON instead of a form",
                "/actions/tenants",
                r#"{"name":"acme2"}"#,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Form requests must have `Content-Type: application/x-www-form-urlencoded`",
            )
        },
        post(
            "limit out of bounds at create",
            "/actions/tenants",
            "name=acme2&max_execution_seconds=0",
            StatusCode::UNPROCESSABLE_ENTITY,
            "max execution seconds must be a whole number from 1 to 86400, or empty for no limit",
        ),
        post(
            "memory in a unit ClickHouse limits are not written in",
            "/actions/tenants/acme/limits",
            "max_memory_per_query=4G",
            StatusCode::UNPROCESSABLE_ENTITY,
            "max memory per query \"4G\" must be 1 to 9999 followed by Mi or Gi (512Mi, 4Gi), or empty for no limit",
        ),
        post(
            "queries per hour as text",
            "/actions/tenants/acme/limits",
            "queries_per_hour=lots",
            StatusCode::UNPROCESSABLE_ENTITY,
            "queries per hour must be a whole number from 1 to 100000000, or empty for no limit",
        ),
        post(
            "oversized form",
            "/actions/tenants",
            &format!("name=acme2&display_name={}", "a".repeat(3 << 20)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "a form post is at most 65536 bytes",
        ),
        post(
            "a forged session token (sent before the page's)",
            "/actions/tenants/acme/suspend",
            &format!("session={}", "0".repeat(64)),
            StatusCode::FORBIDDEN,
            "this form does not come from a page the dashboard served since it started (it restarts with a new session): reload the page and try again",
        ),
    ]);
    cases
}

/// The message of a reply: an action's JSON `message`, or the plain-text body of a refusal.
fn message_of(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => v["message"].as_str().unwrap_or_default().to_owned(),
        Err(_) => String::from_utf8_lossy(body).trim().to_owned(),
    }
}

#[test]
fn every_malformed_form_post_gets_its_exact_error_and_writes_nothing() {
    block_on(async {
        let c = Cluster::new().await;
        c.create_tenant("acme").await;
        c.create_tenant("globex").await;
        c.report_provisioned("globex").await;
        c.sync_stores().await;
        let router = dashboard_router(&c, false);
        // Every case sends the token its page carried, as the page's form would.
        let session = sentry_tenants_tests::dashboard::session_of(router.clone()).await;
        let tenants_before = c.tenants().list(&ListParams::default()).await.unwrap();
        let cases = cases();
        let mut wrong = Vec::new();
        for case in &cases {
            c.log.clear();
            let mut req = Request::post(&case.path)
                .header(header::HOST, "127.0.0.1:8080")
                .header(header::CONTENT_TYPE, case.content_type)
                .header(header::ACCEPT, "application/json");
            if let Some(origin) = case.origin {
                req = req.header(header::ORIGIN, origin);
            }
            let reply = router
                .clone()
                .oneshot(
                    req.body(Body::from(sentry_tenants_tests::dashboard::with_session(
                        &case.body, &session,
                    )))
                    .unwrap(),
                )
                .await
                .unwrap();
            let status = reply.status();
            let body = reply.into_body().collect().await.unwrap().to_bytes();
            let message = message_of(&body);
            // Attempts the API refused (a taken name is the API's to judge) change nothing.
            let writes: Vec<_> = c
                .log
                .writes()
                .into_iter()
                .filter(|w| w.status < 300)
                .collect();
            if status != case.status || message != case.message || !writes.is_empty() {
                wrong.push(format!(
                    "{}: {} {message:?} ({} writes), want {} {:?}",
                    case.what,
                    status,
                    writes.len(),
                    case.status,
                    case.message
                ));
            }
        }
        let tenants_after = c.tenants().list(&ListParams::default()).await.unwrap();
        sentry_tenants_tests::summary(&format!(
            "input sweep (form posts): cases={} wrong={} tenants_before={} tenants_after={}",
            cases.len(),
            wrong.len(),
            tenants_before.items.len(),
            tenants_after.items.len()
        ));
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert_eq!(
            serde_json::to_value(&tenants_before.items).unwrap(),
            serde_json::to_value(&tenants_after.items).unwrap(),
            "no tenant changed"
        );
    });
}

/// RunJob specs the apiserver must refuse (the generated schema's OpenAPI bounds and CEL rules): the
/// exact message a `kubectl apply` would show.
#[test]
fn every_malformed_runjob_spec_is_refused_by_the_schema_with_its_message() {
    let run = |name: &str, spec: Value| json!({"apiVersion": "sentry.io/v1alpha1", "kind": "RunJob", "metadata": {"name": name}, "spec": spec});
    let ok = json!({"tenant": "acme", "action": "Provision"});
    let with = |field: &str, value: Value| {
        let mut spec = ok.clone();
        spec[field] = value;
        spec
    };
    let table: Vec<(&str, Value, &str)> = vec![
        (
            "unknown action",
            run("acme-x-1", with("action", json!("Explode"))),
            "/spec/action: \"Explode\" is not one of \"Provision\", \"Suspend\" or 6 other candidates",
        ),
        (
            "lowercase action",
            run("acme-x-1", with("action", json!("provision"))),
            "/spec/action: \"provision\" is not one of \"Provision\", \"Suspend\" or 6 other candidates",
        ),
        (
            "no tenant",
            run("acme-x-1", json!({"action": "Provision"})),
            "/spec: \"tenant\" is a required property",
        ),
        (
            "no action",
            run("acme-x-1", json!({"tenant": "acme"})),
            "/spec: \"action\" is a required property",
        ),
        (
            "negative TTL",
            run("acme-x-1", with("ttlSecondsAfterFinished", json!(-1))),
            "/spec/ttlSecondsAfterFinished: -1 is less than the minimum of 0.0",
        ),
        (
            "backoff too high",
            run("acme-x-1", with("backoffLimit", json!(11))),
            "/spec/backoffLimit: 11 is greater than the maximum of 10.0",
        ),
        (
            "zero deadline",
            run("acme-x-1", with("activeDeadlineSeconds", json!(0))),
            "/spec/activeDeadlineSeconds: 0 is less than the minimum of 1.0",
        ),
        (
            "tenant as a number",
            run("acme-x-1", with("tenant", json!(42))),
            "/spec/tenant: 42 is not of type \"string\"",
        ),
    ];
    let mut wrong = Vec::new();
    for (what, obj, want) in &table {
        let errors = schema_errors::<RunJob>(obj, None);
        if errors != [want.to_string()] {
            wrong.push(format!("{what}: {errors:?}, want [{want:?}]"));
        }
    }
    sentry_tenants_tests::summary(&format!(
        "input sweep (RunJob specs): cases={} wrong={}",
        table.len(),
        wrong.len()
    ));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Tenant `spec.limits` the apiserver must refuse: each bound of the schema, with its message.
#[test]
fn every_out_of_bounds_limit_is_refused_by_the_schema_with_its_message() {
    let tenant = |limits: Value| json!({"apiVersion": "sentry.io/v1alpha1", "kind": "Tenant", "metadata": {"name": "acme"}, "spec": {"limits": limits}});
    let table: Vec<(&str, Value, &str)> = vec![
        (
            "memory in GB",
            json!({"maxMemoryPerQuery": "4GB"}),
            "/spec/limits/maxMemoryPerQuery: \"4GB\" does not match \"^[1-9][0-9]{0,3}(Mi|Gi)$\"",
        ),
        (
            "memory zero",
            json!({"maxMemoryPerQuery": "0Gi"}),
            "/spec/limits/maxMemoryPerQuery: \"0Gi\" does not match \"^[1-9][0-9]{0,3}(Mi|Gi)$\"",
        ),
        (
            "memory as a number",
            json!({"maxMemoryPerQuery": 4096}),
            "/spec/limits/maxMemoryPerQuery: 4096 is not of type \"string\"",
        ),
        (
            "no execution time",
            json!({"maxExecutionSeconds": 0}),
            "/spec/limits/maxExecutionSeconds: 0 is less than the minimum of 1.0",
        ),
        (
            "execution over a day",
            json!({"maxExecutionSeconds": 86_401}),
            "/spec/limits/maxExecutionSeconds: 86401 is greater than the maximum of 86400.0",
        ),
        (
            "too many concurrent",
            json!({"maxConcurrentQueries": 1001}),
            "/spec/limits/maxConcurrentQueries: 1001 is greater than the maximum of 1000.0",
        ),
        (
            "negative per hour",
            json!({"queriesPerHour": -5}),
            "/spec/limits/queriesPerHour: -5 is less than the minimum of 1.0",
        ),
    ];
    let mut wrong = Vec::new();
    for (what, limits, want) in &table {
        let errors = schema_errors::<Tenant>(&tenant(limits.clone()), None);
        if errors != [want.to_string()] {
            wrong.push(format!("{what}: {errors:?}, want [{want:?}]"));
        }
    }
    let fine = json!({"maxMemoryPerQuery": "9999Gi", "maxExecutionSeconds": 86_400, "maxConcurrentQueries": 1, "queriesPerHour": 100_000_000});
    assert_eq!(
        schema_errors::<Tenant>(&tenant(fine), None),
        Vec::<String>::new()
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
