//! Rendered list pages, reused while nothing they show can have changed: the same URL, the same
//! version of the caches (the change counter the live updates follow) and the same second of the
//! server clock (pages carry the server's time, to the second). Ten browsers on the tenants list, or
//! one reloading it, cost one render a second at most. Each reuse gets a fresh CSP nonce.
//!
//! Only pages drawn entirely from the caches are kept: the overview, the tenants list, the runs list.
//! A tenant's or a run's page reads Events or a pod's log from the API on every view and is never reused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::watch;

use crate::clock::Clock;

/// Paths whose pages come from the caches alone.
const CACHEABLE: [&str; 3] = ["/", "/tenants", "/runs"];
/// A rendered page larger than this is not kept.
const MAX_PAGE: usize = 4 << 20;
/// Pages kept for one (caches version, second): the distinct list views people have open. The key is
/// the whole URL, so without a bound a client sending a new query string with every request would make
/// the server keep every page it rendered within the second.
const MAX_KEPT: usize = 64;

#[derive(Clone)]
pub struct PageCache {
    changes: watch::Receiver<u64>,
    clock: Clock,
    entries: Arc<Mutex<Entries>>,
}

#[derive(Default)]
struct Entries {
    /// (caches version, second) the kept pages were rendered at; older ones are dropped wholesale.
    at: (u64, i64),
    pages: HashMap<String, Kept>,
}

#[derive(Clone)]
struct Kept {
    headers: HeaderMap,
    /// The page cut at each occurrence of its nonce, so a reuse is one copy with the new nonce between.
    pieces: Vec<Bytes>,
    nonce: String,
}

impl Kept {
    fn new(headers: HeaderMap, body: &Bytes, nonce: String) -> Self {
        let mut pieces = Vec::new();
        let mut from = 0;
        for at in memchr::memmem::find_iter(body, nonce.as_bytes()) {
            pieces.push(body.slice(from..at));
            from = at + nonce.len();
        }
        pieces.push(body.slice(from..));
        Self {
            headers,
            pieces,
            nonce,
        }
    }

    fn body_with(&self, nonce: &str) -> Bytes {
        let len = self.pieces.iter().map(Bytes::len).sum::<usize>()
            + nonce.len() * (self.pieces.len() - 1);
        let mut body = Vec::with_capacity(len);
        for (i, piece) in self.pieces.iter().enumerate() {
            if i > 0 {
                body.extend_from_slice(nonce.as_bytes());
            }
            body.extend_from_slice(piece);
        }
        body.into()
    }
}

impl PageCache {
    pub fn new(changes: watch::Receiver<u64>, clock: Clock) -> Self {
        Self {
            changes,
            clock,
            entries: Arc::default(),
        }
    }

    fn now(&self) -> (u64, i64) {
        (*self.changes.borrow(), self.clock.now().as_second())
    }

    fn get(&self, key: &str) -> Option<Kept> {
        let now = self.now();
        let entries = self.entries.lock().unwrap();
        (entries.at == now).then(|| entries.pages.get(key).cloned())?
    }

    fn put(&self, key: String, at: (u64, i64), kept: Kept) {
        let mut entries = self.entries.lock().unwrap();
        if entries.at != at {
            entries.pages.clear();
            entries.at = at;
        }
        if entries.pages.len() < MAX_KEPT {
            entries.pages.insert(key, kept);
        }
    }
}

/// The middleware: serves a kept page with a new nonce, or renders and keeps it.
pub async fn reuse_rendered_pages(
    State(cache): State<PageCache>,
    request: Request,
    next: Next,
) -> Response {
    let cacheable = request.method() == Method::GET && CACHEABLE.contains(&request.uri().path());
    if !cacheable {
        return next.run(request).await;
    }
    let key = request.uri().to_string();
    if let Some(kept) = cache.get(&key) {
        return with_fresh_nonce(kept);
    }
    // The versions before rendering: a change during the render must not be hidden behind them.
    let at = cache.now();
    let response = next.run(request).await;
    let Some(nonce) = nonce_of(response.headers()) else {
        return response;
    };
    if response.status() != StatusCode::OK {
        return response;
    }
    let (parts, body) = response.into_parts();
    match read_at_most(body, MAX_PAGE).await {
        Read::Whole(body) => {
            cache.put(key, at, Kept::new(parts.headers.clone(), &body, nonce));
            Response::from_parts(parts, Body::from(body))
        }
        Read::PassOn(body) => Response::from_parts(parts, body),
    }
}

enum Read {
    /// The whole body, at most the limit: it may be kept.
    Whole(Bytes),
    /// Larger than the limit, or cut by an error: what was read and the rest, passed on unkept.
    PassOn(Body),
}

async fn read_at_most(body: Body, limit: usize) -> Read {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    // The chunks as they come (a rendered page is mostly one): joined once at the end, not copied
    // into a buffer that grows and copies again as it goes.
    let mut read: Vec<Bytes> = Vec::new();
    let mut len = 0;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if len + chunk.len() <= limit => {
                len += chunk.len();
                read.push(chunk);
            }
            chunk => {
                let head = futures::stream::iter(read.into_iter().map(Ok));
                let rest = futures::stream::once(async { chunk }).chain(stream);
                return Read::PassOn(Body::from_stream(head.chain(rest)));
            }
        }
    }
    Read::Whole(joined(read, len))
}

/// `chunks` as one, of `len` bytes: a single chunk as it is, several copied once.
fn joined(mut chunks: Vec<Bytes>, len: usize) -> Bytes {
    if chunks.len() == 1 {
        return chunks.pop().unwrap_or_default();
    }
    let mut whole = Vec::with_capacity(len);
    for chunk in &chunks {
        whole.extend_from_slice(chunk);
    }
    whole.into()
}

/// The nonce a rendered page's CSP allows (`'nonce-…'`).
fn nonce_of(headers: &HeaderMap) -> Option<String> {
    let csp = headers
        .get(header::CONTENT_SECURITY_POLICY)?
        .to_str()
        .ok()?;
    let rest = &csp[csp.find("'nonce-")? + "'nonce-".len()..];
    Some(rest[..rest.find('\'')?].to_owned())
}

/// A kept page with its nonce replaced everywhere (the CSP header and the page's script tags): a nonce is
/// never sent twice.
fn with_fresh_nonce(kept: Kept) -> Response {
    let fresh = leptos::nonce::Nonce::new().to_string();
    let body = kept.body_with(&fresh);
    let mut headers = kept.headers;
    if let Some(csp) = headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| HeaderValue::from_str(&v.replace(&kept.nonce, &fresh)).ok())
    {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.remove(header::CONTENT_LENGTH);
    let mut response = Response::new(Body::from(body));
    *response.headers_mut() = headers;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_query_string_per_request_cannot_grow_the_cache_past_its_bound() {
        let (_tx, rx) = watch::channel(0);
        let cache = PageCache::new(rx, Clock::manual("2026-12-01T12:00:00Z".parse().unwrap()));
        let at = cache.now();
        let page = || Kept::new(HeaderMap::new(), &Bytes::from_static(b"page"), "n".into());
        for i in 0..1000 {
            cache.put(format!("/tenants?x={i}"), at, page());
        }
        assert_eq!(cache.entries.lock().unwrap().pages.len(), MAX_KEPT);
        assert!(
            cache.get("/tenants?x=0").is_some(),
            "the first ones are kept"
        );
        assert!(cache.get("/tenants?x=999").is_none());
    }

    /// A router serving `page` at `path` behind the page cache, with a CSP nonce of `abc`; `renders`
    /// counts the handler's calls.
    fn serving(
        path: &str,
        page: String,
        cache: &PageCache,
        renders: Arc<std::sync::atomic::AtomicUsize>,
    ) -> axum::Router {
        axum::Router::new()
            .route(
                path,
                axum::routing::get(move || {
                    renders.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let page = page.clone();
                    async move {
                        (
                            [(header::CONTENT_SECURITY_POLICY, "script-src 'nonce-abc'")],
                            page,
                        )
                    }
                }),
            )
            .layer(axum::middleware::from_fn_with_state(
                cache.clone(),
                reuse_rendered_pages,
            ))
    }

    async fn get(app: &axum::Router, path: &str) -> (HeaderMap, Bytes) {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        (
            headers,
            response.into_body().collect().await.unwrap().to_bytes(),
        )
    }

    /// A tenants page of 100,000 tenants' first 50 rows is about 70 KB: within the limit, it is
    /// rendered once and then served from the cache, with a nonce of its own each time.
    #[tokio::test]
    async fn a_list_page_is_rendered_once_and_reused_with_a_fresh_nonce() {
        let page = format!(
            "<script nonce=\"abc\"></script>{}",
            "<tr>row</tr>".repeat(6_000)
        );
        let (_tx, rx) = watch::channel(0);
        let cache = PageCache::new(rx, Clock::manual("2026-12-01T12:00:00Z".parse().unwrap()));
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = serving("/tenants", page.clone(), &cache, renders.clone());
        let (_, first) = get(&app, "/tenants").await;
        let (headers, second) = get(&app, "/tenants").await;
        assert_eq!(first, page.as_bytes());
        assert_eq!(
            renders.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "reused, not rendered again"
        );
        let fresh = nonce_of(&headers).expect("a nonce in the reused page's policy");
        assert_ne!(fresh, "abc", "a nonce is never sent twice");
        assert_eq!(
            second,
            page.replace("nonce=\"abc\"", &format!("nonce=\"{fresh}\""))
                .as_bytes(),
            "the same page, with the policy's new nonce"
        );
    }

    /// A tenant's page reads Events from the API on every view: it is not one of the list pages, so it
    /// is rendered for every request even within one second and one version of the caches.
    #[tokio::test]
    async fn a_page_outside_the_lists_is_rendered_every_time() {
        let (_tx, rx) = watch::channel(0);
        let cache = PageCache::new(rx, Clock::manual("2026-12-01T12:00:00Z".parse().unwrap()));
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = serving("/tenants/acme", "acme".into(), &cache, renders.clone());
        get(&app, "/tenants/acme").await;
        get(&app, "/tenants/acme").await;
        assert_eq!(renders.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert!(cache.get("/tenants/acme").is_none(), "never kept");
    }

    /// 10,000 tenants with long display names render past the limit: such a page is served whole,
    /// only not kept.
    #[tokio::test]
    async fn a_page_over_the_size_limit_is_served_whole_and_not_kept() {
        let big = "x".repeat(MAX_PAGE + 1024);
        let (_tx, rx) = watch::channel(0);
        let cache = PageCache::new(rx, Clock::manual("2026-12-01T12:00:00Z".parse().unwrap()));
        let renders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let app = serving("/tenants", big.clone(), &cache, renders.clone());
        let (_, body) = get(&app, "/tenants").await;
        assert_eq!(body.len(), big.len(), "the whole page, not an empty one");
        assert_eq!(body, big.as_bytes());
        assert!(cache.get("/tenants").is_none(), "too large to keep");
        get(&app, "/tenants").await;
        assert_eq!(
            renders.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "rendered every time"
        );
    }

    /// A body in several chunks (as a streamed render sends it) is read whole and in order, whether
    /// it is kept or, past the limit, passed on.
    #[tokio::test]
    async fn a_page_in_chunks_is_read_whole_kept_or_passed_on() {
        use http_body_util::BodyExt;
        let body = || {
            let chunks = ["<p>ab", "c", "de</p>"].map(|c| Ok::<_, std::io::Error>(Bytes::from(c)));
            Body::from_stream(futures::stream::iter(chunks))
        };
        let Read::Whole(kept) = read_at_most(body(), 64).await else {
            panic!("12 bytes are within a limit of 64");
        };
        assert_eq!(kept, "<p>abcde</p>");
        let Read::PassOn(passed) = read_at_most(body(), 6).await else {
            panic!("12 bytes are past a limit of 6");
        };
        let passed = passed.collect().await.unwrap().to_bytes();
        assert_eq!(passed, "<p>abcde</p>", "what was read, then the rest");
    }

    #[test]
    fn every_occurrence_of_the_nonce_is_replaced() {
        let kept = Kept::new(
            HeaderMap::new(),
            &Bytes::from_static(
                b"<script nonce=\"OLD\">a</script><script nonce=\"OLD\">b</script>OL",
            ),
            "OLD".into(),
        );
        assert_eq!(
            kept.body_with("NEWER"),
            Bytes::from_static(
                b"<script nonce=\"NEWER\">a</script><script nonce=\"NEWER\">b</script>OL"
            )
        );
    }

    #[test]
    fn the_nonce_is_read_from_the_policy() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'self'; script-src 'self' 'nonce-abc+/=' 'wasm-unsafe-eval'",
            ),
        );
        assert_eq!(nonce_of(&h).as_deref(), Some("abc+/="));
        assert_eq!(nonce_of(&HeaderMap::new()), None);
    }
}
