//! The process's secret, made at start-up, which never leaves the process. It does two things:
//! - The messages a no-JS form post leaves for the page it redirects to (`?notice=`, `?error=`, and on
//!   an error what was typed) are signed, so a link cannot make the dashboard say something it did not:
//!   "your session expired, log in at …" in the dashboard's own frame would be a phishing page on our
//!   origin. A redirect answered by another process (a restart in between) just loses its message.
//! - It makes the dashboard's session token ([`session_token`]): every page's forms carry it, and
//!   `/actions/…` refuses a post that does not send it back — a second lock beside the same-origin
//!   check, which no other page can open (it cannot read ours) and a restart changes.

use std::sync::LazyLock;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use ring::hmac;

/// Query parameters that carry a redirect's message; `sig` signs them.
pub const MESSAGE_PARAMS: [&str; 4] = ["notice", "error", "name", "display_name"];
const SIG: &str = "sig";

static KEY: LazyLock<hmac::Key> = LazyLock::new(|| {
    let rng = ring::rand::SystemRandom::new();
    hmac::Key::generate(hmac::HMAC_SHA256, &rng).expect("the OS random source works")
});

/// What the session token signs.
const SESSION: &[u8] = b"sentry-tenants dashboard session";

/// The token this process's pages carry in their forms (a `session` field), hex.
pub fn session_token() -> String {
    hex(hmac::sign(&KEY, SESSION).as_ref())
}

/// Whether `sent` is this process's session token (compared in constant time).
pub fn is_session_token(sent: &str) -> bool {
    unhex(sent).is_some_and(|bytes| hmac::verify(&KEY, SESSION, &bytes).is_ok())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `k=v` pairs of `query` (as they stand, still percent-encoded) that are messages, in order.
fn messages(query: &str) -> Vec<&str> {
    query
        .split('&')
        .filter(|p| {
            let key = p.split('=').next().unwrap_or_default();
            MESSAGE_PARAMS.contains(&key)
        })
        .collect()
}

fn tag(messages: &[&str]) -> hmac::Tag {
    hmac::sign(&KEY, messages.join("&").as_bytes())
}

/// `url` (a path and a percent-encoded query with messages in it) with its signature appended.
pub fn signed_url(url: &str) -> String {
    match url.split_once('?') {
        Some((path, query)) => format!("{path}?{}", signed(query)),
        None => url.to_owned(),
    }
}

/// `query` (already percent-encoded, messages in it) with its signature appended.
pub fn signed(query: &str) -> String {
    format!("{query}&{SIG}={}", hex(tag(&messages(query)).as_ref()))
}

/// Whether `query`'s messages carry our signature (a query without messages needs none).
pub fn is_signed(query: &str) -> bool {
    let found = messages(query);
    if found.is_empty() {
        return true;
    }
    let sig = query
        .split('&')
        .find_map(|p| p.strip_prefix("sig="))
        .unwrap_or_default();
    let Some(bytes) = unhex(sig) else {
        return false;
    };
    hmac::verify(&KEY, found.join("&").as_bytes(), &bytes).is_ok()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The same address without messages or signature.
pub fn without_messages(path_and_query: &str) -> String {
    without_params(path_and_query, |_| false)
}

/// The same address without messages, signature, or any parameter `also` names.
pub fn without_params(path_and_query: &str, also: impl Fn(&str) -> bool) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| {
            let key = p.split('=').next().unwrap_or_default();
            !MESSAGE_PARAMS.contains(&key) && key != SIG && !also(key)
        })
        .collect();
    if kept.is_empty() {
        path.to_owned()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// The middleware: a page requested with messages we did not sign is redirected to the same address
/// without them.
pub async fn only_signed_messages(request: Request, next: Next) -> Response {
    // leptos_axum registers the server functions (`#[server(prefix = "/api")]`) among the page routes;
    // their query holds arguments (`name=acme`), not messages.
    if request.uri().path().starts_with("/api/") {
        return next.run(request).await;
    }
    let query = request.uri().query().unwrap_or_default();
    if is_signed(query) {
        return next.run(request).await;
    }
    let here = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    Redirect::to(&same_origin(&without_messages(here))).into_response()
}

/// A redirect target that can only mean this origin. The request's own path may begin `//host/` or
/// `/\host/` (browsers read `\` as `/`), which a browser would follow to another host; leading
/// slashes and backslashes collapse to one `/`.
pub fn same_origin(path_and_query: &str) -> String {
    format!("/{}", path_and_query.trim_start_matches(['/', '\\']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_query_verifies_and_any_change_to_a_message_breaks_it() {
        let query = signed("phase=Active&notice=acme%20suspended");
        assert!(is_signed(&query));
        assert!(!is_signed(&query.replace("acme", "evil")));
        assert!(!is_signed(&format!("{query}&error=x")));
        assert!(!is_signed("notice=hi"));
        assert!(!is_signed("notice=hi&sig=zz"));
        assert!(
            is_signed("phase=Active&page=2"),
            "no message, nothing to sign"
        );
        assert!(
            is_signed(&query.replace("phase=Active", "phase=Failed")),
            "other parameters are not messages"
        );
    }

    #[test]
    fn messages_and_the_signature_are_removed_the_rest_kept() {
        assert_eq!(
            without_messages("/tenants?phase=Active&notice=x&sig=ab&name=a&page=2"),
            "/tenants?phase=Active&page=2"
        );
        assert_eq!(
            without_messages("/tenants?error=x&display_name=y"),
            "/tenants"
        );
        assert_eq!(without_messages("/tenants"), "/tenants");
    }

    #[test]
    fn a_redirect_never_leaves_the_origin() {
        for (path, local) in [
            ("/tenants?phase=Active", "/tenants?phase=Active"),
            ("//evil.example/x", "/evil.example/x"),
            ("/\\evil.example/x", "/evil.example/x"),
            ("///\\//evil.example", "/evil.example"),
            ("/", "/"),
        ] {
            assert_eq!(same_origin(path), local, "{path}");
        }
    }
}
