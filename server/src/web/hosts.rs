//! DNS rebinding: a page on `rebind.example:8080` whose name is made to resolve to 127.0.0.1 is
//! same-origin with itself, so the browser lets it read every page of a local port-forward and post
//! to it — Origin checks cannot tell. The `Host` it sends still names `rebind.example`, so the
//! dashboard answers only requests whose Host is a loopback name (any port: the port-forward's local
//! port is the user's choice) or a name the operator was told to answer to.

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names a port-forward is reached by, whatever its local port.
pub const LOOPBACK: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];

/// The host names the dashboard answers to: the loopback names and `extra` (from
/// `--dashboard-allowed-host`), lowercased.
#[derive(Clone, Debug)]
pub struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    pub fn new(extra: &[String]) -> Self {
        let names = LOOPBACK
            .iter()
            .map(|h| h.to_string())
            .chain(extra.iter().map(|h| h.trim().to_ascii_lowercase()))
            .filter(|h| !h.is_empty())
            .collect();
        Self(names)
    }

    /// Whether `host` (a `Host` header: `name`, `name:port`, `[v6]:port`) names one of them.
    pub fn allows(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        self.0.contains(&name)
    }
}

/// The name part of a `Host` value, without the port (an IPv6 literal keeps its brackets).
pub fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The middleware: before anything else, a request whose Host is not allowed gets 403 and a line
/// saying how to allow it.
pub async fn only_allowed_hosts(
    State(allowed): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    match host {
        Some(host) if allowed.allows(&host) => next.run(request).await,
        host => (
            StatusCode::FORBIDDEN,
            format!(
                "the dashboard does not answer to Host {:?}: open it through 127.0.0.1, localhost or [::1] (a port-forward), or start the operator with --dashboard-allowed-host NAME",
                host.unwrap_or_default()
            ),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_on_any_port_and_configured_names_are_allowed() {
        let allowed = AllowedHosts::new(&["Dash.Example.com".to_owned()]);
        for host in [
            "127.0.0.1:8080",
            "127.0.0.1:9000",
            "127.0.0.1",
            "localhost:8080",
            "LOCALHOST:1",
            "[::1]:8080",
            "[::1]",
            "dash.example.com",
            "dash.example.com:443",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "rebind.example:8080",
            "127.0.0.1.rebind.example:8080",
            "localhost.evil:8080",
            "127.0.0.2:8080",
            "[::2]:8080",
            "",
            "dash.example.com.evil",
            "0.0.0.0:8080",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
    }

    #[test]
    fn the_port_is_cut_off_only_when_it_is_one() {
        assert_eq!(host_name("a.example:8080"), "a.example");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
        assert_eq!(host_name("a.example"), "a.example");
        assert_eq!(host_name("a.example:"), "a.example:");
        assert_eq!(host_name("a.example:80x"), "a.example:80x");
    }
}
