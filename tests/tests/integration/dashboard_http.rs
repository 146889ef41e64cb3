//! The dashboard's router, called in-process (`tower::ServiceExt::oneshot`): server-rendered pages,
//! escaping, read-only mode, the Origin check, security headers, actions with and without JavaScript.

use axum::body::Body;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use kube::api::{Patch, PatchParams};
use std::sync::Arc;

use sentry_tenants::crd::{ProvisioningPolicy, ReclaimPolicy, RunAction, TenantPhase};
use sentry_tenants_app::api::{Backend, TenantQuery};
use sentry_tenants_tests::dashboard::{dashboard_router, session_of, with_session};
use sentry_tenants_tests::{Cluster, NS, block_on};
use serde_json::json;
use tower::ServiceExt;

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

/// A request through the router; a response that does not come is a failure, not a hung test.
async fn send(router: axum::Router, req: Request<Body>) -> Reply {
    let uri = req.uri().clone();
    let within = sentry_tenants_tests::PATIENCE;
    let resp = tokio::time::timeout(within, router.oneshot(req))
        .await
        .unwrap_or_else(|_| panic!("{uri}: no response within {within:?}"))
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = tokio::time::timeout(within, resp.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{uri}: body not complete within {within:?}"))
        .unwrap()
        .to_bytes();
    let body = String::from_utf8_lossy(&bytes).into_owned();
    Reply {
        status,
        headers,
        body,
    }
}

/// A same-origin form post to the read-write dashboard: as a hydrated page sends it (`json`) or as a
/// plain form.
async fn act(c: &Cluster, path: &str, body: &str, json: bool) -> Reply {
    let session = session_of(dashboard_router(c, false)).await;
    send(
        dashboard_router(c, false),
        form_post(path, &with_session(body, &session), SAME, json),
    )
    .await
}

/// The field manager of the first create of `resource` (who `kubectl` says made it).
fn create_field_manager(c: &Cluster, resource: &str) -> String {
    let query = c
        .log
        .all()
        .into_iter()
        .find(|r| r.method == http::Method::POST && r.path.ends_with(&format!("/{resource}")))
        .map(|r| r.query)
        .unwrap_or_else(|| panic!("no create of {resource}"));
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("fieldManager="))
        .unwrap_or_default()
        .to_owned()
}

/// Where the page goes after an action answered with JSON (the script follows it).
fn redirect_of(reply: &Reply) -> String {
    let body: serde_json::Value = serde_json::from_str(&reply.body).expect("a JSON answer");
    body["redirect"].as_str().unwrap_or_default().to_owned()
}

async fn get(router: axum::Router, path: &str) -> Reply {
    send(
        router,
        Request::get(path)
            .header(header::HOST, "127.0.0.1:8080")
            .header(header::ACCEPT, "text/html")
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

fn form_post(path: &str, body: &str, origin: Option<&str>, json: bool) -> Request<Body> {
    let mut b = Request::post(path)
        .header(header::HOST, "127.0.0.1:8080")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(
            header::ACCEPT,
            if json {
                "application/json"
            } else {
                "text/html"
            },
        );
    if let Some(o) = origin {
        b = b.header(header::ORIGIN, o);
    }
    b.body(Body::from(body.to_owned())).unwrap()
}

const SAME: Option<&str> = Some("http://127.0.0.1:8080");

async fn cluster_with_tenants() -> Cluster {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_tenant("globex").await;
    c.report_provisioned("globex").await;
    c.settle().await;
    c
}

#[test]
fn pages_render_complete_on_the_server() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let page = get(dashboard_router(&c, false), "/tenants").await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            page.body.contains("<table"),
            "rendered rows, not a loading placeholder:\n{}",
            page.body
        );
        assert!(
            page.body.contains(r#"data-tenant="acme""#)
                && page.body.contains(r#"data-tenant="globex""#)
        );
        assert!(
            page.body.contains(r#"data-phase="Active""#) && page.body.contains(">Active<"),
            "phase as text, not colour only"
        );
        assert!(page.body.contains("globex-clickhouse"), "the Secret's name");
        assert!(
            page.body
                .contains(r#"action="/actions/tenants/acme/provision""#)
        );
        assert!(
            !page
                .body
                .contains(r#"action="/actions/tenants/globex/provision""#),
            "no Provision for an Active tenant"
        );
        for path in ["/", "/tenants/acme", "/runs", "/tenants/new"] {
            let p = get(dashboard_router(&c, false), path).await;
            assert_eq!(p.status, StatusCode::OK, "{path}");
            assert!(
                !p.body.contains("Loading…"),
                "{path} rendered before its data:\n{}",
                p.body
            );
        }
        assert_eq!(
            get(dashboard_router(&c, false), "/nope").await.status,
            StatusCode::NOT_FOUND
        );
    })
}

#[test]
fn filters_by_phase_and_search_without_javascript() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let page = get(dashboard_router(&c, false), "/tenants?phase=Active").await;
        assert!(
            page.body.contains(r#"data-tenant="globex""#)
                && !page.body.contains(r#"data-tenant="acme""#)
        );
        let page = get(dashboard_router(&c, false), "/tenants?q=acm").await;
        assert!(
            page.body.contains(r#"data-tenant="acme""#)
                && !page.body.contains(r#"data-tenant="globex""#)
        );
    })
}

/// 120 tenants: pages of 50, links that keep the filter, a page past the end shows the last one.
#[test]
fn long_lists_are_paged_and_the_pager_keeps_the_filter() {
    block_on(async {
        let c = Cluster::new().await;
        for i in 0..120 {
            c.create_tenant(&format!("t-{i:03}")).await;
        }
        c.sync_stores().await;
        let rows = |body: &str| body.matches("<tr data-tenant=").count();
        let first = get(dashboard_router(&c, false), "/tenants?q=t-").await;
        assert_eq!(rows(&first.body), 50);
        assert!(first.body.contains("Showing 1–50 of 120"), "{}", first.body);
        assert!(first.body.contains(r#"href="/tenants?q=t-&amp;page=2""#));
        assert!(!first.body.contains(r#"rel="prev""#));
        let last = get(dashboard_router(&c, false), "/tenants?q=t-&page=3").await;
        assert_eq!(rows(&last.body), 20);
        assert!(
            last.body.contains(r#"data-tenant="t-119""#)
                && last.body.contains("Showing 101–120 of 120")
        );
        assert!(!last.body.contains(r#"rel="next""#));
        let beyond = get(dashboard_router(&c, false), "/tenants?page=99").await;
        assert!(beyond.body.contains("Page 3 of 3"));
        let few = get(dashboard_router(&c, false), "/tenants?q=t-11").await;
        assert_eq!(rows(&few.body), 10);
        assert!(
            !few.body.contains("class=\"pager\""),
            "one page needs no pager"
        );
    })
}

/// The nonce a page's CSP allows.
fn nonce(reply: &Reply) -> String {
    let csp = reply.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    let rest = &csp[csp.find("'nonce-").unwrap() + 7..];
    rest[..rest.find('\'').unwrap()].to_owned()
}

/// A list page is rendered once per (caches version, second) and reused, each time with a fresh nonce;
/// a change to the caches or the next second renders it anew.
#[test]
fn a_reused_list_page_gets_a_fresh_nonce_and_a_change_renders_it_anew() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let router = dashboard_router(&c, false);
        let first = get(router.clone(), "/tenants").await;
        let second = get(router.clone(), "/tenants").await;
        let (n1, n2) = (nonce(&first), nonce(&second));
        assert_ne!(n1, n2, "a nonce is never sent twice");
        assert!(second.body.contains(&format!("nonce=\"{n2}\"")) && !second.body.contains(&n1));
        assert_eq!(
            first.body.replace(&n1, "N"),
            second.body.replace(&n2, "N"),
            "the same page"
        );

        c.create_tenant("initech").await;
        c.sync_stores().await;
        let changed = get(router.clone(), "/tenants").await;
        assert!(
            changed.body.contains(r#"data-tenant="initech""#),
            "a cache change renders anew"
        );

        // The list's ages carry the server's time (`data-now`), for the browser to count on from.
        let before = get(router.clone(), "/tenants").await;
        c.clock.advance(jiff::SignedDuration::from_secs(1));
        let later = get(router.clone(), "/tenants").await;
        assert_ne!(
            before.body.replace(&nonce(&before), "N"),
            later.body.replace(&nonce(&later), "N"),
            "the next second renders anew (the page carries the server's time)"
        );
    })
}

/// The tenants list and the overview reuse the rows and charts whose inputs did not change
/// (`fragments`): after a tenant changes, one is created, a run finishes and the clock moves on, each
/// page is what a dashboard rendering every piece shows, byte for byte but the nonce.
#[test]
fn kept_rows_and_charts_are_shown_only_while_what_they_show_is_unchanged() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let kept = dashboard_router(&c, false);
        let fresh = sentry_tenants_tests::dashboard::dashboard_router_rendering_every_fragment(&c);
        let same = |what: &str| {
            let (kept, fresh) = (kept.clone(), fresh.clone());
            let what = what.to_owned();
            async move {
                let mut tenants = String::new();
                for path in ["/", "/tenants"] {
                    let (k, f) = (
                        get(kept.clone(), path).await,
                        get(fresh.clone(), path).await,
                    );
                    assert_eq!(k.status, StatusCode::OK, "{what}: {path}");
                    assert_eq!(
                        k.body.replace(&nonce(&k), "N"),
                        f.body.replace(&nonce(&f), "N"),
                        "{what}: {path}"
                    );
                    if path == "/tenants" {
                        tenants = k.body;
                    }
                }
                tenants
            }
        };
        same("at first").await;

        let patch = json!({"spec": {"displayName": "Acme Renamed"}});
        c.tenants()
            .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        c.sync_stores().await;
        let renamed = same("a tenant changed").await;
        assert!(renamed.contains("Acme Renamed"), "{renamed}");

        c.create_tenant("initech").await;
        c.create_run("globex", RunAction::Rotate, "globex-rotate-1")
            .await;
        c.settle().await;
        c.job_running("globex-rotate-1").await;
        c.clock.advance(jiff::SignedDuration::from_secs(90));
        c.job_succeeded("globex-rotate-1").await;
        c.settle().await;
        let later = same("a tenant created, a run finished").await;
        assert!(later.contains(r#"data-tenant="initech""#), "{later}");

        c.clock.advance(jiff::SignedDuration::from_secs(3 * 3600));
        let older = same("three hours on").await;
        assert!(older.contains(">3h 01m<"), "the ages moved on: {older}");

        // A run starting changes a row without changing its tenant.
        let globex_row = |page: &str| {
            let start = page
                .find(r#"<tr data-tenant="globex""#)
                .expect("globex's row");
            let len = page[start..].find("</tr>").expect("the row's end");
            page[start..start + len].to_owned()
        };
        assert!(!globex_row(&older).contains("provisioning…"));
        c.create_run("globex", RunAction::Provision, "globex-provision-9")
            .await;
        c.sync_stores().await;
        let busy = same("a run started").await;
        assert!(globex_row(&busy).contains("provisioning…"), "{busy}");
    })
}

/// The tenants page builds the row of a tenant once per change of the tenant or of its runs in
/// flight; every other row is the one built before, shared, not built again.
#[test]
fn a_tenants_row_is_built_again_only_when_it_or_its_runs_changed() {
    block_on(async {
        let c = cluster_with_tenants().await;
        c.create_tenant("initech").await;
        c.settle().await;
        let backend = sentry_tenants_tests::dashboard::backend(&c, false, true);
        let rows = || {
            let page = backend.tenants(&TenantQuery::default());
            let by_name = page.rows.into_iter().map(|r| (r.name.clone(), r));
            by_name.collect::<std::collections::BTreeMap<_, _>>()
        };
        let first = rows();
        assert_eq!(first.len(), 3);
        let again = rows();
        for (name, row) in &first {
            assert!(Arc::ptr_eq(row, &again[name]), "{name} built again");
        }

        let patch = json!({"spec": {"displayName": "Acme Renamed"}});
        c.tenants()
            .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        c.create_run("globex", RunAction::Provision, "globex-provision-9")
            .await;
        c.sync_stores().await;
        let after = rows();
        assert_eq!(after["acme"].display_name.as_deref(), Some("Acme Renamed"));
        assert!(!first["globex"].provisioning);
        assert!(after["globex"].provisioning);
        assert!(Arc::ptr_eq(&first["initech"], &after["initech"]));
        // What a backend keeping no row builds from the same caches.
        let built = sentry_tenants_tests::dashboard::backend(&c, false, false);
        let fresh = built.tenants(&TenantQuery::default()).rows;
        let kept: Vec<_> = after.into_values().collect();
        assert_eq!(kept, fresh);
    })
}

#[test]
fn a_display_name_with_markup_renders_as_text() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let patch = json!({"spec": {"displayName": "<script>alert(1)</script>"}});
        c.tenants()
            .patch("acme", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        c.sync_stores().await;
        for path in ["/tenants", "/tenants/acme"] {
            let page = get(dashboard_router(&c, false), path).await;
            assert!(
                page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
                "{path}"
            );
            assert!(!page.body.contains("<script>alert(1)"), "{path}");
        }
    })
}

#[test]
fn pages_carry_security_headers_and_a_nonce_for_the_only_inline_script() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let page = get(dashboard_router(&c, false), "/tenants").await;
        let csp = page.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self' 'nonce-"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"));
        let nonce = csp
            .split("'nonce-")
            .nth(1)
            .unwrap()
            .split('\'')
            .next()
            .unwrap();
        let inline_scripts: Vec<&str> = page
            .body
            .split("<script")
            .skip(1)
            .filter(|s| !s.trim_start().starts_with("src"))
            .collect();
        assert!(!inline_scripts.is_empty());
        for s in inline_scripts {
            assert!(
                s.contains(&format!("nonce=\"{nonce}\"")),
                "an inline script without the nonce: <script{}",
                &s[..s.len().min(120)]
            );
        }
        assert_eq!(page.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let wasm = get(
            dashboard_router(&c, false),
            "/pkg/sentry_tenants_app_bg.wasm",
        )
        .await;
        assert_eq!(wasm.status, StatusCode::OK);
        assert_eq!(wasm.headers[header::CONTENT_TYPE], "application/wasm");
    })
}

#[test]
fn html_and_wasm_are_compressed() {
    block_on(async {
        let c = cluster_with_tenants().await;
        for (path, encoding) in [
            ("/tenants", "br"),
            ("/pkg/sentry_tenants_app_bg.wasm", "gzip"),
        ] {
            let req = Request::get(path)
                .header(header::HOST, "127.0.0.1:8080")
                .header(header::ACCEPT_ENCODING, encoding)
                .body(Body::empty())
                .unwrap();
            let reply = send(dashboard_router(&c, false), req).await;
            assert_eq!(
                reply
                    .headers
                    .get(header::CONTENT_ENCODING)
                    .map(|v| v.to_str().unwrap()),
                Some(encoding),
                "{path}"
            );
        }
    })
}

/// A same-origin post must also send back the session token its page carried: without it, or with a
/// forged one, it is refused with a line that says to reload, and nothing is written; the page's own
/// token passes.
#[test]
fn a_post_without_the_pages_session_token_is_refused_and_nothing_is_written() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let token = session_of(dashboard_router(&c, false)).await;
        assert_eq!(token.len(), 64, "an HMAC-SHA256 tag in hex: {token}");
        c.log.clear();
        let forged = "0".repeat(64);
        for body in [
            "".to_owned(),
            format!("session={forged}"),
            "session=".to_owned(),
        ] {
            let reply = send(
                dashboard_router(&c, false),
                form_post("/actions/tenants/acme/suspend", &body, SAME, false),
            )
            .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{body:?}");
            assert!(reply.body.contains("reload the page"), "{}", reply.body);
        }
        assert!(c.log.writes().is_empty());
        assert!(!c.tenant("acme").await.spec.suspended);
        let reply = send(
            dashboard_router(&c, false),
            form_post(
                "/actions/tenants/acme/suspend",
                &with_session("", &token),
                SAME,
                false,
            ),
        )
        .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.body);
        assert!(c.tenant("acme").await.spec.suspended);
    })
}

#[test]
fn cross_site_posts_are_refused_and_nothing_is_written() {
    block_on(async {
        let c = cluster_with_tenants().await;
        // Even with the page's session token: the origin alone refuses these.
        let session = with_session("", &session_of(dashboard_router(&c, false)).await);
        c.log.clear();
        for origin in [Some("http://evil.example"), None] {
            let reply = send(
                dashboard_router(&c, false),
                form_post("/actions/tenants/acme/suspend", &session, origin, false),
            )
            .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{origin:?}");
        }
        let mut req = form_post("/actions/tenants/acme/suspend", &session, None, false);
        req.headers_mut()
            .insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert_eq!(
            send(dashboard_router(&c, false), req).await.status,
            StatusCode::FORBIDDEN
        );
        let get_instead = send(
            dashboard_router(&c, false),
            Request::get("/actions/tenants/acme/suspend")
                .header(header::HOST, "127.0.0.1:8080")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(get_instead.status, StatusCode::METHOD_NOT_ALLOWED);
        assert!(c.log.writes().is_empty());
        assert!(!c.tenant("acme").await.spec.suspended);
    })
}

/// A page on `rebind.example:8080` whose name was made to resolve to 127.0.0.1 is same-origin with
/// itself: the browser sends `Sec-Fetch-Site: same-origin` and an Origin equal to the Host. Only the
/// Host tells, and every route refuses it before anything else — pages, data, live events, posts.
#[test]
fn a_dns_rebinding_host_is_refused_on_every_route_and_nothing_is_written() {
    block_on(async {
        let c = cluster_with_tenants().await;
        c.log.clear();
        for path in [
            "/",
            "/tenants",
            "/tenants/acme",
            "/runs",
            "/events",
            "/pkg/sentry_tenants_app.js",
        ] {
            let reply = send(
                dashboard_router(&c, false),
                Request::get(path)
                    .header(header::HOST, "rebind.example:8080")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "GET {path}");
            assert_eq!(
                reply.body,
                "the dashboard does not answer to Host \"rebind.example:8080\": open it through 127.0.0.1, localhost or [::1] (a port-forward), or start the operator with --dashboard-allowed-host NAME"
            );
            assert!(!reply.body.contains("acme"), "GET {path} leaked a page");
        }
        let mut post = form_post(
            "/actions/tenants/acme/suspend",
            "",
            Some("http://rebind.example:8080"),
            false,
        );
        post.headers_mut()
            .insert(header::HOST, "rebind.example:8080".parse().unwrap());
        post.headers_mut()
            .insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert_eq!(
            send(dashboard_router(&c, false), post).await.status,
            StatusCode::FORBIDDEN
        );
        assert!(
            c.log.all().is_empty(),
            "nothing reached the API: {:?}",
            c.log.all()
        );
        assert!(!c.tenant("acme").await.spec.suspended);
        // The names a port-forward is reached by, on any local port, are answered.
        for host in ["127.0.0.1:9000", "localhost:8080", "[::1]:8080"] {
            let reply = send(
                dashboard_router(&c, false),
                Request::get("/tenants")
                    .header(header::HOST, host)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
            assert_eq!(reply.status, StatusCode::OK, "{host}");
        }
    })
}

/// Browsers drop tabs and newlines from a URL, so `/\t/evil.example` becomes `//evil.example`:
/// another site. A return path is checked as the browser will read it.
#[test]
fn a_crafted_return_path_cannot_send_the_browser_to_another_site() {
    block_on(async {
        let c = cluster_with_tenants().await;
        for crafted in [
            "/%09/evil.example",
            "/%0A/evil.example",
            "/%0D%0A/evil.example",
            "%09//evil.example",
            "//evil.example",
            "/%5Cevil.example",
            "https://evil.example/",
        ] {
            let reply = act(
                &c,
                "/actions/tenants/acme/suspend",
                &format!("return_to={crafted}"),
                false,
            )
            .await;
            assert_eq!(reply.status, StatusCode::SEE_OTHER, "{crafted}");
            let location = reply.headers[header::LOCATION].to_str().unwrap();
            assert!(
                location.starts_with("/tenants?notice="),
                "{crafted} sent the browser to {location:?}"
            );
        }
    })
}

/// `acme/status` addresses the status subresource and `acme,involvedObject.kind=Pod` would widen an
/// Events field selector: a page for something that cannot be a tenant's or a run's name says it does
/// not exist without asking the API anything.
#[test]
fn a_name_that_cannot_be_a_tenants_or_a_runs_never_reaches_the_api() {
    block_on(async {
        let c = cluster_with_tenants().await;
        c.log.clear();
        for path in [
            "/tenants/acme%2Fstatus",
            "/tenants/acme%2C%20involvedObject.kind%3DPod",
            "/tenants/Acme",
            "/tenants/acme%20",
            "/runs/acme-provision-1%2Fstatus",
            "/runs/ACME",
        ] {
            let reply = get(dashboard_router(&c, false), path).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}");
            // The page each kind shows when there is nothing by that name.
            let nothing = if path.starts_with("/runs/") {
                "This run has been cleaned up"
            } else {
                "This tenant does not exist"
            };
            assert!(reply.body.contains(nothing), "{path}: {}", reply.body);
        }
        assert!(c.log.all().is_empty(), "asked the API: {:#?}", c.log.all());
    })
}

/// A link can put any text in `?notice=`/`?error=`; the dashboard shows only the messages its own
/// redirects signed, and sends the browser away from a URL carrying any other (so the page hydrated
/// from the address bar shows none either).
#[test]
fn a_link_cannot_forge_a_notice_or_an_error() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let forged = "Your%20session%20expired%3A%20log%20in%20at%20evil.example";
        for query in [
            format!("notice={forged}"),
            format!("error={forged}&name=acme"),
            format!("phase=Active&notice={forged}&sig=00"),
        ] {
            let reply = get(dashboard_router(&c, false), &format!("/tenants?{query}")).await;
            assert_eq!(reply.status, StatusCode::SEE_OTHER, "{query}");
            let location = reply.headers[header::LOCATION].to_str().unwrap();
            assert!(
                location == "/tenants" || location == "/tenants?phase=Active",
                "{query} → {location}"
            );
            assert!(!reply.body.contains("evil.example"), "{query}");
        }
        // What an action's own redirect carries is shown.
        let done = act(
            &c,
            "/actions/tenants/acme/suspend",
            "return_to=%2Ftenants",
            false,
        )
        .await;
        let location = done.headers[header::LOCATION].to_str().unwrap().to_owned();
        assert!(location.contains("&sig="), "{location}");
        let page = get(dashboard_router(&c, false), &location).await;
        assert_eq!(page.status, StatusCode::OK, "{location}");
        assert!(page.body.contains("acme suspended"), "{}", page.body);
        // Server functions take arguments named like the messages (`name=`): they are data, not messages.
        let data = send(
            dashboard_router(&c, false),
            Request::get("/api/tenant?name=acme")
                .header(header::HOST, "127.0.0.1:8080")
                .header(header::ACCEPT, "application/json")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(data.status, StatusCode::OK, "{}", data.body);
        assert!(data.body.contains("acme"), "{}", data.body);
        // Its signature does not carry over to other text.
        let altered = location.replacen("notice=acme", "notice=evil", 1);
        let reply = get(dashboard_router(&c, false), &altered).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER, "{altered}");
    })
}

/// `/api/*` is the pages' read API (GET, JSON): another method gets 405 and an unknown function 404,
/// and nothing is written either way.
#[test]
fn the_read_api_answers_get_only() {
    block_on(async {
        let c = cluster_with_tenants().await;
        c.log.clear();
        let request = |method: http::Method, path: &str| {
            Request::builder()
                .method(method)
                .uri(path)
                .header(header::HOST, "127.0.0.1:8080")
                .header(header::ORIGIN, "http://127.0.0.1:8080")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from("name=acme"))
                .unwrap()
        };
        for path in [
            "/api/overview",
            "/api/tenants",
            "/api/tenant?name=acme",
            "/api/runs",
        ] {
            let read = send(
                dashboard_router(&c, false),
                request(http::Method::GET, path),
            )
            .await;
            assert_eq!(read.status, StatusCode::OK, "GET {path}: {}", read.body);
            for method in [
                http::Method::POST,
                http::Method::PUT,
                http::Method::PATCH,
                http::Method::DELETE,
            ] {
                let reply = send(dashboard_router(&c, false), request(method.clone(), path)).await;
                assert_eq!(
                    reply.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {path}: {}",
                    reply.body
                );
            }
        }
        for method in [http::Method::GET, http::Method::POST] {
            let reply = send(
                dashboard_router(&c, false),
                request(method.clone(), "/api/create_tenant"),
            )
            .await;
            assert_eq!(
                reply.status,
                StatusCode::NOT_FOUND,
                "{method} of no function: {}",
                reply.body
            );
        }
        assert!(c.log.writes().is_empty(), "{:?}", c.log.writes());
    })
}

/// An open live-updates stream never ends by itself: at shutdown it must, or the server (and the pod)
/// waits for it until the grace period kills it.
#[test]
fn shutdown_ends_open_event_streams_and_the_server_returns() {
    use sentry_tenants::web::serve::{Limits, serve};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    block_on(async {
        let c = cluster_with_tenants().await;
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let router =
            sentry_tenants_tests::dashboard::dashboard_router_until(&c, false, shutdown.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, router, Limits::default(), shutdown));
        let mut events = tokio::net::TcpStream::connect(addr).await.unwrap();
        events
            .write_all(b"GET /events HTTP/1.1\r\nhost: 127.0.0.1:8080\r\naccept: text/event-stream\r\n\r\n")
            .await
            .unwrap();
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains(": connected") {
            let mut chunk = [0u8; 512];
            let n = tokio::time::timeout(sentry_tenants_tests::PATIENCE, events.read(&mut chunk))
                .await
                .expect("the stream's first event")
                .unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..n]);
        }
        assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200 OK"));
        stop.send_replace(true);
        tokio::time::timeout(sentry_tenants_tests::PATIENCE, server)
            .await
            .expect("the server returns with the stream open")
            .unwrap();
        let mut rest = Vec::new();
        tokio::time::timeout(
            sentry_tenants_tests::PATIENCE,
            events.read_to_end(&mut rest),
        )
        .await
        .expect("the stream is closed")
        .unwrap();
    })
}

/// The operator's ServiceAccount acts for whoever reached the dashboard, so the apiserver's audit log
/// names only the operator: each action is recorded as an Event on its tenant (with the connection's
/// peer) and what it creates says the dashboard made it.
#[test]
fn every_action_is_recorded_on_its_tenant_and_marks_what_it_creates() {
    use sentry_tenants::web::serve::{Limits, serve};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    block_on(async {
        let c = cluster_with_tenants().await;
        c.log.clear();
        for (path, form) in [
            ("/actions/tenants", "name=initech&display_name=Initech"),
            ("/actions/tenants/initech/provision", ""),
            ("/actions/tenants/nobody/resume", ""),
        ] {
            let reply = act(&c, path, form, false).await;
            assert_eq!(reply.status, StatusCode::SEE_OTHER, "{path}");
        }
        // One through the server `run` uses, which knows the connection's peer.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            dashboard_router(&c, false),
            Limits::default(),
            shutdown,
        ));
        let form = with_session("", &session_of(dashboard_router(&c, false)).await);
        let mut post = tokio::net::TcpStream::connect(addr).await.unwrap();
        post.write_all(
            format!(
                "POST /actions/tenants/globex/suspend HTTP/1.1\r\nhost: 127.0.0.1:8080\r\norigin: http://127.0.0.1:8080\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{form}",
                form.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut answer = String::new();
        post.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
        let client_side = post.local_addr().unwrap().to_string();
        stop.send_replace(true);
        server.await.unwrap();

        let recorded: Vec<(String, String, String, String)> = c
            .log
            .events()
            .iter()
            .filter(|e| e["reason"] == "DashboardAction")
            .map(|e| {
                let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
                (
                    text(&e["regarding"]["name"]),
                    text(&e["action"]),
                    text(&e["type"]),
                    text(&e["note"]),
                )
            })
            .collect();
        assert_eq!(
            recorded,
            [
                ("initech".into(), "Create".into(), "Normal".into(),
                 "Create from the dashboard (peer unknown): Tenant initech created. The operator is provisioning its database and credentials.".into()),
                // Automatic (the form's default): the click names the run the reconciler would make.
                ("initech".into(), "Provision".into(), "Normal".into(),
                 "Provision from the dashboard (peer unknown): Provisioning initech: run initech-provision-10 started".into()),
                ("globex".into(), "Suspend".into(), "Normal".into(),
                 format!("Suspend from the dashboard (peer {client_side}): globex suspended: its ClickHouse logins are being locked")),
            ],
            "no Event for a tenant that does not exist"
        );
        for e in c
            .log
            .events()
            .iter()
            .filter(|e| e["reason"] == "DashboardAction")
        {
            assert_eq!(
                (
                    &e["regarding"]["apiVersion"],
                    &e["regarding"]["kind"],
                    &e["regarding"]["namespace"]
                ),
                (&json!("sentry.io/v1alpha1"), &json!("Tenant"), &json!(NS)),
                "the whole reference, so `kubectl describe tenant` and `kubectl events --for` find it"
            );
        }
        let made_by = |annotations: Option<std::collections::BTreeMap<String, String>>| {
            annotations
                .unwrap_or_default()
                .get("sentry.io/created-by")
                .cloned()
        };
        assert_eq!(
            made_by(c.tenant("initech").await.metadata.annotations),
            Some("dashboard".into())
        );
        let run = c.runjobs().get("initech-provision-10").await.unwrap();
        assert_eq!(made_by(run.metadata.annotations), Some("dashboard".into()));
    })
}

#[test]
fn read_only_mode_has_no_mutating_route_at_all() {
    block_on(async {
        let c = cluster_with_tenants().await;
        c.log.clear();
        for path in [
            "/actions/tenants",
            "/actions/tenants/acme/provision",
            "/actions/tenants/acme/suspend",
            "/actions/tenants/acme/resume",
        ] {
            let reply = send(
                dashboard_router(&c, true),
                form_post(path, "name=x", SAME, false),
            )
            .await;
            assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        }
        let page = get(dashboard_router(&c, true), "/tenants").await;
        assert!(
            !page.body.contains("/actions/"),
            "no action forms in read-only mode"
        );
        assert!(c.log.writes().is_empty());
    })
}

#[test]
fn create_without_javascript_redirects_with_the_outcome_and_keeps_what_was_typed() {
    block_on(async {
        let c = Cluster::new().await;
        let reply = act(
            &c,
            "/actions/tenants",
            "name=Bad_Name&display_name=Acme+Corp&return_to=%2Ftenants%2Fnew",
            false,
        )
        .await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        let location = reply.headers[header::LOCATION].to_str().unwrap();
        assert!(
            location
                .starts_with("/tenants/new?error=tenant%20name%20%22Bad_Name%22%20is%20invalid"),
            "{location}"
        );
        assert!(
            location.contains("name=Bad_Name") && location.contains("display_name=Acme%20Corp"),
            "{location}"
        );
        let form = get(dashboard_router(&c, false), location).await;
        assert!(
            form.body.contains("is invalid") && form.body.contains(r#"value="Acme Corp""#),
            "{}",
            form.body
        );
        assert!(
            c.tenants()
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );

        let reply = act(&c, "/actions/tenants", "name=acme&display_name=Acme", false).await;
        assert_eq!(reply.status, StatusCode::SEE_OTHER);
        assert!(
            reply.headers[header::LOCATION]
                .to_str()
                .unwrap()
                .starts_with("/tenants/acme?notice=Tenant%20acme%20created")
        );
        assert_eq!(
            c.tenant("acme").await.spec.display_name.as_deref(),
            Some("Acme")
        );
        assert_eq!(
            c.tenant("acme").await.spec.provisioning,
            ProvisioningPolicy::Automatic,
            "the form's default"
        );
        let again = act(&c, "/actions/tenants", "name=acme", true).await;
        assert_eq!(again.status, StatusCode::CONFLICT);
        assert!(again.body.contains("already exists"));
    })
}

/// The create form's provisioning choice reaches the spec; a value the CRD does not know is refused
/// with the accepted ones named, nothing is created, and the choice comes back with what was typed.
#[test]
fn create_takes_the_provisioning_policy_and_refuses_an_unknown_one() {
    block_on(async {
        let c = Cluster::new().await;
        let refused = act(
            &c,
            "/actions/tenants",
            "name=acme&provisioning=Sometimes&return_to=%2Ftenants%2Fnew",
            false,
        )
        .await;
        assert_eq!(refused.status, StatusCode::SEE_OTHER);
        let location = refused.headers[header::LOCATION].to_str().unwrap();
        assert!(
            location.starts_with(
                "/tenants/new?error=unknown%20provisioning%20policy%20%22Sometimes%22%3A%20expected%20Automatic%20or%20Manual"
            ),
            "{location}"
        );
        assert!(c.log.writes().is_empty(), "{:?}", c.log.writes());

        let echoed = act(
            &c,
            "/actions/tenants",
            "name=Bad_Name&provisioning=Manual&return_to=%2Ftenants%2Fnew",
            false,
        )
        .await;
        let location = echoed.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(location.contains("provisioning=Manual"), "{location}");
        let form = get(dashboard_router(&c, false), &location).await;
        assert!(
            form.body
                .contains(r#"<input type="radio" name="provisioning" value="Manual" checked"#),
            "the Manual choice is still selected: {}",
            form.body
        );

        let created = act(
            &c,
            "/actions/tenants",
            "name=acme&provisioning=Manual",
            true,
        )
        .await;
        assert_eq!(created.status, StatusCode::OK, "{}", created.body);
        assert!(
            created.body.contains("Provision it to create its database"),
            "{}",
            created.body
        );
        assert_eq!(
            c.tenant("acme").await.spec.provisioning,
            ProvisioningPolicy::Manual
        );
    })
}

/// The create form's reclaim choice reaches the spec (Retain when none is sent, as the form's default
/// says); a value the CRD does not know is refused with the accepted ones named and nothing created.
/// The create is sent as the operator's field manager, so `kubectl` shows who made the tenant.
#[test]
fn create_takes_the_reclaim_policy_and_refuses_an_unknown_one() {
    block_on(async {
        let c = Cluster::new().await;
        let refused = act(
            &c,
            "/actions/tenants",
            "name=acme&reclaim_policy=Later",
            true,
        )
        .await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            refused
                .body
                .contains(r#"unknown reclaim policy \"Later\": expected Retain or Delete"#),
            "{}",
            refused.body
        );
        assert!(c.log.writes().is_empty(), "{:?}", c.log.writes());

        let deleting = act(
            &c,
            "/actions/tenants",
            "name=acme&reclaim_policy=Delete",
            true,
        )
        .await;
        assert_eq!(deleting.status, StatusCode::OK, "{}", deleting.body);
        assert_eq!(
            c.tenant("acme").await.spec.reclaim_policy,
            ReclaimPolicy::Delete
        );
        assert_eq!(create_field_manager(&c, "tenants"), "sentry-tenants");

        let unsaid = act(&c, "/actions/tenants", "name=globex", true).await;
        assert_eq!(unsaid.status, StatusCode::OK, "{}", unsaid.body);
        assert_eq!(
            c.tenant("globex").await.spec.reclaim_policy,
            ReclaimPolicy::Retain
        );
    })
}

#[test]
fn provision_twice_starts_one_run() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let first = act(&c, "/actions/tenants/acme/provision", "", true).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        assert!(first.body.contains("acme-provision-1"));
        c.sync_stores().await;
        let second = act(&c, "/actions/tenants/acme/provision", "", true).await;
        assert_eq!(second.status, StatusCode::OK);
        assert!(
            second.body.contains("already being provisioned"),
            "{}",
            second.body
        );
        assert_eq!(c.log.creates_of("runjobs"), 1);
        assert_eq!(create_field_manager(&c, "runjobs"), "sentry-tenants");
        c.settle().await;
        assert_eq!(
            c.tenant("acme").await.phase(),
            Some(TenantPhase::Provisioning)
        );
        let page = get(dashboard_router(&c, false), "/tenants").await;
        assert!(
            !page
                .body
                .contains(r#"action="/actions/tenants/acme/provision""#),
            "no Provision button while one is in flight"
        );
    })
}

#[test]
fn suspend_and_resume_patch_the_spec_and_the_reconciler_does_the_rest() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let reply = act(
            &c,
            "/actions/tenants/globex/suspend",
            "return_to=%2Ftenants%3Fconfirm%3Dsuspend%26tenant%3Dglobex",
            false,
        )
        .await;
        let location = reply.headers[header::LOCATION].to_str().unwrap();
        let (unsigned, sig) = location.rsplit_once("&sig=").expect("a signed notice");
        assert_eq!(
            unsigned,
            "/tenants?notice=globex%20suspended%3A%20its%20ClickHouse%20logins%20are%20being%20locked"
        );
        assert_eq!(sig.len(), 64, "HMAC-SHA256, hex");
        c.settle().await;
        assert_eq!(
            c.tenant("globex").await.phase(),
            Some(TenantPhase::Suspended)
        );
        let runs = c.runjobs().list(&Default::default()).await.unwrap().items;
        assert!(runs.iter().any(|r| r.spec.action == RunAction::Suspend));
        let reply = act(&c, "/actions/tenants/globex/resume", "", true).await;
        assert_eq!(reply.status, StatusCode::OK);
        c.settle().await;
        assert_eq!(c.tenant("globex").await.phase(), Some(TenantPhase::Active));
        let missing = act(&c, "/actions/tenants/nobody/suspend", "", true).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
    })
}

#[test]
fn a_tenant_not_yet_in_the_cache_is_read_from_the_api() {
    block_on(async {
        let c = Cluster::new().await;
        c.create_tenant("fresh").await; // not synced into the caches
        let page = get(dashboard_router(&c, false), "/tenants/fresh").await;
        assert!(
            page.body
                .contains(r#"action="/actions/tenants/fresh/provision""#),
            "{}",
            page.body
        );
    })
}

/// Rotate starts one Rotate run for a provisioned tenant (a second click while it runs starts none)
/// and is refused, writing nothing, for a tenant with no credentials yet.
#[test]
fn rotate_starts_one_run_and_only_for_a_provisioned_tenant() {
    block_on(async {
        let c = cluster_with_tenants().await;
        c.log.clear();
        let refused = act(&c, "/actions/tenants/acme/rotate", "", true).await;
        assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
        assert!(
            refused
                .body
                .contains("acme is not provisioned yet: there are no credentials to rotate"),
            "{}",
            refused.body
        );
        assert_eq!(c.log.creates_of("runjobs"), 0);
        let page = get(dashboard_router(&c, false), "/tenants/globex").await;
        assert!(
            page.body
                .contains(r#"action="/actions/tenants/globex/rotate""#),
            "a Rotate button on a provisioned tenant"
        );
        // Its credentials Secret deleted: the page says what the button does about it.
        let lost = json!({"status": {"conditions": [{
            "type": "CredentialsSecret", "status": "False", "reason": "SecretDeleted",
            "message": "Secret globex-clickhouse was deleted", "lastTransitionTime": "2026-12-04T10:00:00Z",
        }]}});
        c.tenants()
            .patch_status("globex", &PatchParams::default(), &Patch::Merge(&lost))
            .await
            .unwrap();
        c.sync_stores().await;
        let page = get(dashboard_router(&c, false), "/tenants/globex").await;
        assert!(
            page.body.contains(
                "the credentials Secret was deleted: Rotate credentials makes it again with a new password"
            ),
            "{}",
            page.body
        );
        let first = act(&c, "/actions/tenants/globex/rotate", "", true).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        assert!(
            first
                .body
                .contains("Rotating the credentials of globex: run globex-rotate-1 started"),
            "{}",
            first.body
        );
        c.sync_stores().await;
        let second = act(&c, "/actions/tenants/globex/rotate", "", true).await;
        assert!(
            second
                .body
                .contains("globex is already having its credentials rotated by globex-rotate-1"),
            "{}",
            second.body
        );
        assert_eq!(c.log.creates_of("runjobs"), 1);
        let run = c.run("globex-rotate-1").await.unwrap();
        assert_eq!(run.spec.action, RunAction::Rotate);
    })
}

/// The tenant's page lists its copies of the credentials with their state and the provisioner's
/// word, and says how an application reads a key — a command, never a value; "Write copies now"
/// starts one Deliver run, refused for a tenant that asks for no copies or is not provisioned.
#[test]
fn the_tenant_page_lists_its_copies_and_writes_them_on_request() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let spec = json!({"spec": {"credentials": {"copies": [
            {"namespace": "payments", "secretName": "globex-db"},
            {"namespace": "reports", "secretName": "globex-ro"},
        ]}}});
        c.tenants()
            .patch("globex", &PatchParams::default(), &Patch::Merge(&spec))
            .await
            .unwrap();
        let entry_hash = |ns: &str, name: &str| {
            let entry: sentry_tenants::crd::CredentialsCopy =
                serde_json::from_value(json!({"namespace": ns, "secretName": name})).unwrap();
            entry.entry_hash()
        };
        c.patch_tenant_status(
            "globex",
            json!({"credentials": {"hash": "h1", "copies": [
                {"namespace": "payments", "secretName": "globex-db", "state": "Delivered",
                 "entryHash": entry_hash("payments", "globex-db"), "credentialsHash": "h1",
                 "at": "2026-12-01T12:00:00Z"},
                {"namespace": "reports", "secretName": "globex-ro", "state": "NoConsent",
                 "entryHash": entry_hash("reports", "globex-ro"),
                 "message": "namespace reports has not consented to copies", "at": "2026-12-01T12:00:00Z"},
            ]}}),
        )
        .await;
        c.sync_stores().await;

        let page = get(dashboard_router(&c, false), "/tenants/globex").await;
        let body = &page.body;
        assert!(body.contains("Copies of the credentials"), "{body}");
        assert!(
            body.contains("<td>payments</td><td><code>globex-db</code></td><td>up to date</td>"),
            "{body}"
        );
        assert!(
            body.contains("<td>reports</td><td><code>globex-ro</code></td><td>waiting for consent</td><td>namespace reports has not consented to copies</td>"),
            "{body}"
        );
        assert!(
            body.contains(
                "kubectl -n payments get secret globex-db -o jsonpath='{.data.uri}' | base64 -d"
            ),
            "{body}"
        );
        assert!(body.contains(r#"action="/actions/tenants/globex/deliver""#));

        c.log.clear();
        let started = act(&c, "/actions/tenants/globex/deliver", "", true).await;
        assert_eq!(started.status, StatusCode::OK, "{}", started.body);
        assert!(
            started.body.contains(
                "Writing the copies of the credentials of globex: run globex-deliver-1 started"
            ),
            "{}",
            started.body
        );
        assert_eq!(
            c.run("globex-deliver-1").await.unwrap().spec.action,
            RunAction::Deliver
        );
        c.sync_stores().await;
        let again = act(&c, "/actions/tenants/globex/deliver", "", true).await;
        assert!(
            again.body.contains(
                "globex is already having its copies of the credentials written by globex-deliver-1"
            ),
            "a double click starts one run: {}",
            again.body
        );
        assert_eq!(c.log.creates_of("runjobs"), 1);

        let unprovisioned = act(&c, "/actions/tenants/acme/deliver", "", true).await;
        assert_eq!(unprovisioned.status, StatusCode::CONFLICT);
        assert!(
            unprovisioned
                .body
                .contains("acme is not provisioned yet: there are no credentials to deliver"),
            "{}",
            unprovisioned.body
        );
        c.report_provisioned("acme").await;
        c.sync_stores().await;
        let none = act(&c, "/actions/tenants/acme/deliver", "", true).await;
        assert_eq!(none.status, StatusCode::CONFLICT);
        assert!(
            none.body
                .contains("acme asks for no copies of its credentials (spec.credentials.copies)"),
            "{}",
            none.body
        );
    })
}

/// Revoke asks first (a link to the page with `?confirm=revoke`, whose dialog posts the action),
/// starts one Revoke run, and is refused while a Rotate of the same tenant runs: two credentials changes
/// at once would race for the pending password.
#[test]
fn revoke_asks_first_starts_one_run_and_never_beside_a_rotation() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let page = get(dashboard_router(&c, false), "/tenants/globex").await;
        assert!(
            page.body
                .contains(r#"href="/tenants/globex?confirm=revoke&amp;tenant=globex""#),
            "a Revoke link that asks first: {}",
            page.body
        );
        assert!(
            !page
                .body
                .contains(r#"action="/actions/tenants/globex/revoke""#)
        );
        let asked = get(
            dashboard_router(&c, false),
            "/tenants/globex?confirm=revoke&tenant=globex",
        )
        .await;
        assert!(
            asked
                .body
                .contains(r#"action="/actions/tenants/globex/revoke""#)
                && asked.body.contains("every other stops working at once"),
            "{}",
            asked.body
        );

        let refused = act(&c, "/actions/tenants/acme/revoke", "", true).await;
        assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
        assert!(
            refused
                .body
                .contains("acme is not provisioned yet: there are no credentials to revoke"),
            "{}",
            refused.body
        );

        c.log.clear();
        let rotating = act(&c, "/actions/tenants/globex/rotate", "", true).await;
        assert_eq!(rotating.status, StatusCode::OK, "{}", rotating.body);
        c.sync_stores().await;
        let beside = act(&c, "/actions/tenants/globex/revoke", "", true).await;
        assert_eq!(beside.status, StatusCode::CONFLICT, "{}", beside.body);
        assert!(
            beside.body.contains(
                "globex is having its credentials or their copies written by globex-rotate-1 (Rotate): try again once it has finished"
            ),
            "{}",
            beside.body
        );
        assert_eq!(c.log.creates_of("runjobs"), 1);

        c.settle().await; // the run's Job made
        c.job_succeeded("globex-rotate-1").await;
        c.settle().await;
        let revoked = act(&c, "/actions/tenants/globex/revoke", "", true).await;
        assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
        assert!(
            revoked
                .body
                .contains("Revoking every earlier password of globex: run globex-revoke-1 started"),
            "{}",
            revoked.body
        );
        let run = c.run("globex-revoke-1").await.unwrap();
        assert_eq!(run.spec.action, RunAction::Revoke);
    })
}

/// Delete asks first, saying what the tenant's reclaim policy will do, and goes ahead only with the
/// tenant's name typed; the Tenant then waits for its Deprovision run behind the reclaim finalizer.
#[test]
fn delete_names_the_reclaim_policy_and_needs_the_tenants_name_typed() {
    block_on(async {
        let c = cluster_with_tenants().await;
        let patch = json!({"spec": {"reclaimPolicy": "Delete"}});
        c.tenants()
            .patch("globex", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        c.settle().await;
        let page = get(dashboard_router(&c, false), "/tenants/acme?confirm=delete").await;
        assert!(
            page.body.contains("reclaimPolicy Retain: its ClickHouse logins are locked; its database, user and credentials Secret are kept, and a new tenant named acme takes them over."),
            "{}",
            page.body
        );
        let page = get(
            dashboard_router(&c, false),
            "/tenants/globex?confirm=delete",
        )
        .await;
        assert!(
            page.body.contains("reclaimPolicy Delete: its ClickHouse database with all its data, its user and its credentials Secret are dropped. This cannot be undone."),
            "{}",
            page.body
        );
        assert!(page.body.contains(r#"name="confirm_name""#));
        c.log.clear();
        for typed in ["", "acme", "globe"] {
            let refused = act(
                &c,
                "/actions/tenants/globex/delete",
                &format!("confirm_name={typed}"),
                true,
            )
            .await;
            assert_eq!(
                refused.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{typed:?}"
            );
            assert!(
                refused
                    .body
                    .contains("type the tenant's name, globex, to delete it"),
                "{}",
                refused.body
            );
        }
        assert!(c.log.writes().is_empty(), "{:?}", c.log.writes());
        let done = act(
            &c,
            "/actions/tenants/globex/delete",
            "confirm_name=globex",
            true,
        )
        .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(
            done.body.contains(
                "Deleting globex: its reclaimPolicy Delete is carried out before it goes"
            ),
            "{}",
            done.body
        );
        assert_eq!(
            redirect_of(&done),
            "/tenants",
            "the page goes to the list: the tenant's own page is about to be gone"
        );
        c.settle().await;
        let globex = c.tenant("globex").await;
        assert_eq!(globex.phase(), Some(TenantPhase::Terminating));
        // Generation 2 (the reclaimPolicy change): its Deprovision run is named for it.
        assert!(c.run("globex-deprovision-20").await.is_some());
    })
}

#[test]
fn limits_are_set_at_create_and_changed_on_the_tenant_page_and_bad_ones_write_nothing() {
    block_on(async {
        let c = Cluster::new().await;
        let refused = act(
            &c,
            "/actions/tenants",
            "name=acme&max_memory_per_query=4GB&queries_per_hour=10&return_to=%2Ftenants%2Fnew",
            false,
        )
        .await;
        let location = refused.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(location.contains("max_memory_per_query=4GB"), "{location}");
        assert!(c.log.writes().is_empty(), "{:?}", c.log.writes());
        let form = get(dashboard_router(&c, false), &location).await;
        assert!(
            form.body.contains(r#"name="queries_per_hour""#) && form.body.contains(r#"value="10""#),
            "what was typed comes back: {}",
            form.body
        );
        assert!(form.body.contains("must be 1 to 9999 followed by Mi or Gi"));

        let created = act(
            &c,
            "/actions/tenants",
            "name=acme&max_memory_per_query=2Gi&max_execution_seconds=&queries_per_hour=500",
            true,
        )
        .await;
        assert_eq!(created.status, StatusCode::OK, "{}", created.body);
        let limits = c.tenant("acme").await.spec.limits.unwrap();
        assert_eq!(limits.max_memory_per_query.as_deref(), Some("2Gi"));
        assert_eq!(
            (limits.max_execution_seconds, limits.queries_per_hour),
            (None, Some(500))
        );
        c.settle().await;
        let page = get(dashboard_router(&c, false), "/tenants/acme").await;
        assert!(
            page.body
                .contains("2Gi memory per query, 500 queries per hour"),
            "{}",
            page.body
        );
        assert!(page.body.contains(r#"href="/tenants/acme?edit=limits""#));
        let form = get(dashboard_router(&c, false), "/tenants/acme?edit=limits").await;
        assert!(
            form.body
                .contains(r#"action="/actions/tenants/acme/limits""#)
                && form.body.contains(r#"value="2Gi""#)
                && form.body.contains(r#"value="500""#),
            "the form holds the spec's limits: {}",
            form.body
        );

        // Without JavaScript a refused change comes back into the form with what was typed.
        let refused = act(
            &c,
            "/actions/tenants/acme/limits",
            "queries_per_hour=0&return_to=%2Ftenants%2Facme%3Fedit%3Dlimits",
            false,
        )
        .await;
        let location = refused.headers[header::LOCATION]
            .to_str()
            .unwrap()
            .to_owned();
        let again = get(dashboard_router(&c, false), &location).await;
        assert!(
            again.body.contains(r#"value="0""#) && again.body.contains("from 1 to 100000000"),
            "{location}: {}",
            again.body
        );

        // Changed on the tenant page: a removed limit goes, a new one comes.
        let changed = act(
            &c,
            "/actions/tenants/acme/limits",
            "max_memory_per_query=&max_concurrent_queries=3&queries_per_hour=500",
            true,
        )
        .await;
        assert_eq!(changed.status, StatusCode::OK, "{}", changed.body);
        assert!(
            changed.body.contains(
                "3 concurrent queries, 500 queries per hour: they apply when it is provisioned"
            ),
            "{}",
            changed.body
        );
        assert_eq!(
            redirect_of(&changed),
            "/tenants/acme",
            "back to the tenant's page, out of the form"
        );
        let limits = c.tenant("acme").await.spec.limits.unwrap();
        assert_eq!(limits.max_memory_per_query, None);
        assert_eq!(limits.max_concurrent_queries, Some(3));

        // Out of bounds: refused, the spec untouched; all empty: no limits at all.
        let before = c.log.writes().len();
        let bad = act(
            &c,
            "/actions/tenants/acme/limits",
            "max_concurrent_queries=1001",
            true,
        )
        .await;
        assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
        assert!(bad.body.contains("from 1 to 1000"), "{}", bad.body);
        let writes = c.log.writes();
        assert_eq!(writes.len(), before, "{writes:?}");
        let cleared = act(
            &c,
            "/actions/tenants/acme/limits",
            "queries_per_hour=",
            true,
        )
        .await;
        assert_eq!(cleared.status, StatusCode::OK, "{}", cleared.body);
        assert_eq!(c.tenant("acme").await.spec.limits, None);
        let missing = act(
            &c,
            "/actions/tenants/globex/limits",
            "queries_per_hour=5",
            true,
        )
        .await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.body);
    })
}

/// The overview's charts and its needs-attention list, rendered on the server from the caches.
#[test]
fn the_overview_charts_runs_and_phases_and_lists_what_needs_attention() {
    block_on(async {
        let c = cluster_with_tenants().await;
        // A run that failed and one that succeeded, both still listed.
        c.create_run("acme", RunAction::Provision, "acme-provision-1")
            .await;
        c.create_run("globex", RunAction::Suspend, "globex-suspend-1")
            .await;
        c.settle().await;
        c.job_running("acme-provision-1").await;
        c.job_running("globex-suspend-1").await;
        c.clock.advance(jiff::SignedDuration::from_secs(90));
        c.job_failed(
            "acme-provision-1",
            "BackoffLimitExceeded",
            "clickhouse unreachable",
        )
        .await;
        c.job_succeeded("globex-suspend-1").await;
        c.settle().await;

        let page = get(dashboard_router(&c, false), "/").await;
        assert_eq!(page.status, StatusCode::OK);
        let body = &page.body;
        assert!(body.contains("Needs attention"), "{body}");
        assert!(
            body.contains(r#"href="/tenants/acme""#) && body.contains("Provisioning failed"),
            "the failed tenant is listed: {body}"
        );
        assert!(
            body.contains(r#"href="/runs/acme-provision-1""#)
                && body.contains("Provision run failed"),
            "and its failed run: {body}"
        );
        assert!(
            body.contains(
                "2 runs finished in the last 24 hours, 1 of them failed; the busiest hour had 2 runs"
            ),
            "the runs chart's summary: {body}"
        );
        assert!(body.contains(r#"role="img""#) && body.contains("<svg"));
        assert!(
            body.contains("Provision: median 1m 30s, p95 1m 30s (1 runs)"),
            "durations per action: {body}"
        );
        assert!(
            body.contains("1 Active, 1 Failed"),
            "tenants by phase: {body}"
        );
    })
}

/// No address the dashboard redirects to leaves its origin, whatever the request's path begins with:
/// `//host`, `/\host` (browsers read `\` as `/`), and their percent-encoded forms, on every route, with
/// an unsigned message (which the dashboard strips by redirecting to the same address) and without.
#[test]
fn no_redirect_leaves_the_origin_whatever_the_path_begins_with() {
    block_on(async {
        let c = Cluster::new().await;
        c.create_tenant("acme").await;
        c.settle().await;
        let routes = [
            "/",
            "/tenants",
            "/tenants/new",
            "/tenants/acme",
            "/runs",
            "/nope",
        ];
        let hosts = [
            "//evil.example",
            "///evil.example",
            "/\\evil.example",
            "/\\/evil.example",
            "/%2F%2Fevil.example",
            "/%2f/evil.example",
            "/%5Cevil.example",
            "/%5C%5Cevil.example",
        ];
        let mut sent = 0;
        let mut redirects = 0;
        for host in hosts {
            for route in routes {
                for query in ["?notice=x", "?error=y&phase=Active", ""] {
                    let path = format!("{host}{route}{query}");
                    // A path the http crate cannot even parse (a raw `\`) never reaches the router:
                    // hyper answers 400 to it first.
                    let Ok(uri) = path.parse::<http::Uri>() else {
                        continue;
                    };
                    sent += 1;
                    let reply = get(dashboard_router(&c, false), &uri.to_string()).await;
                    if !reply.status.is_redirection() {
                        continue;
                    }
                    redirects += 1;
                    let location = reply.headers[header::LOCATION].to_str().unwrap();
                    let leaves = !location.starts_with('/')
                        || location[1..].starts_with(['/', '\\'])
                        || location.contains("://");
                    assert!(!leaves, "{path} redirected to {location}");
                }
            }
        }
        // The test is about something: the `//host` forms reach the router and are redirected.
        assert!(sent >= 4 * routes.len() * 3, "{sent} requests sent");
        assert!(redirects >= 2 * routes.len() * 2, "{redirects} redirects");
    });
}

/// The overview names the Lease's holder, read from the API at most once per
/// `LEADER_READ_EVERY` however many times the page is rendered (each render here defeats the page
/// cache): page views cost no API request each, and a new leader shows within those seconds.
#[test]
fn the_overview_reads_the_leader_lease_once_per_interval_not_per_view() {
    block_on(async {
        use k8s_openapi::api::coordination::v1::Lease;
        use kube::api::{Api, Patch, PatchParams, PostParams};
        let c = cluster_with_tenants().await;
        let leases: Api<Lease> = Api::namespaced(c.admin.clone(), sentry_tenants_tests::NS);
        let holder = |who: &str| {
            serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "sentry-tenants-leader"}, "spec": {"holderIdentity": who}})
        };
        leases
            .create(
                &PostParams::default(),
                &serde_json::from_value(holder("pod-a")).unwrap(),
            )
            .await
            .unwrap();
        let router = dashboard_router(&c, false);
        let lease_reads = || c.log.count(|r| r.path.contains("/leases/"));
        c.log.clear();
        for view in 0..5 {
            let page = get(router.clone(), &format!("/?view={view}")).await;
            assert!(page.body.contains("<code>pod-a</code>"), "{}", page.body);
        }
        assert_eq!(lease_reads(), 1, "one read for five views");

        leases
            .patch(
                "sentry-tenants-leader",
                &PatchParams::default(),
                &Patch::Merge(holder("pod-b")),
            )
            .await
            .unwrap();
        c.clock.advance(
            sentry_tenants::web::backend::LEADER_READ_EVERY - jiff::SignedDuration::from_millis(1),
        );
        let page = get(router.clone(), "/?view=stale").await;
        assert!(
            page.body.contains("<code>pod-a</code>"),
            "still the one read"
        );
        c.clock.advance(jiff::SignedDuration::from_millis(1));
        let page = get(router.clone(), "/?view=fresh").await;
        assert!(page.body.contains("<code>pod-b</code>"), "{}", page.body);
        assert_eq!(lease_reads(), 2);
    })
}
