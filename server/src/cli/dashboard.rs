//! `dashboard`: port-forwards a local port to an operator pod's dashboard through the Kubernetes API.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use tokio::net::TcpListener;

/// Port the dashboard listens on inside the pod (127.0.0.1 there).
pub const DASHBOARD_PORT: u16 = 8080;
pub const OPERATOR_SELECTOR: &str =
    "app.kubernetes.io/name=sentry-tenants,app.kubernetes.io/component=operator";

/// The pod to forward to: a Ready one, the newest first (a rollout's new pod over an old one).
pub fn pick_pod(pods: &[Pod]) -> Option<&Pod> {
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    pods.iter()
        .filter(|p| ready(p) && p.metadata.deletion_timestamp.is_none())
        .max_by_key(|p| p.metadata.creation_timestamp.clone())
}

/// 127.0.0.1:`port` (0: a free one), where a dashboard is served on this machine.
pub async fn listen_on_loopback(port: u16) -> anyhow::Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| {
        anyhow::anyhow!("cannot listen on 127.0.0.1:{port}: {e} (choose another with --port)")
    })
}

pub async fn dashboard(
    client: Client,
    namespace: &str,
    local_port: u16,
    open_browser: bool,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let list = pods
        .list(&ListParams::default().labels(OPERATOR_SELECTOR))
        .await
        .map_err(|e| {
            anyhow::anyhow!(crate::cluster::describe(
                &format!("list the operator pods in {namespace}"),
                &e
            ))
        })?;
    let pod = pick_pod(&list.items)
        .ok_or_else(|| anyhow::anyhow!("no ready operator pod in namespace {namespace}: run `sentry-tenants check -n {namespace}`"))?
        .name_any();
    let listener = listen_on_loopback(local_port).await?;
    let url = format!("http://127.0.0.1:{}/", listener.local_addr()?.port());
    eprintln!("Dashboard: {url}  (forwarding to pod {namespace}/{pod}; Ctrl-C to stop)");
    if open_browser {
        open_in_browser(&url);
    }
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (mut conn, _) = accepted?;
                let pods = pods.clone();
                let pod = pod.clone();
                tokio::spawn(async move {
                    if let Err(error) = forward(&pods, &pod, &mut conn).await {
                        eprintln!("forwarding failed: {error}");
                    }
                });
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

async fn forward(
    pods: &Api<Pod>,
    pod: &str,
    conn: &mut tokio::net::TcpStream,
) -> anyhow::Result<()> {
    let mut pf = pods.portforward(pod, &[DASHBOARD_PORT]).await?;
    let mut upstream = pf
        .take_stream(DASHBOARD_PORT)
        .ok_or_else(|| anyhow::anyhow!("port-forward gave no stream"))?;
    tokio::io::copy_bidirectional(conn, &mut upstream).await?;
    drop(upstream);
    // Once both directions ended cleanly (the browser closed its connection), the forwarder's own
    // close can only report that it was already closing ("Sending after closing"): nothing to say.
    let _ = pf.join().await;
    Ok(())
}

/// Opens the URL with the desktop's opener when there is one; silently does nothing on a server.
pub fn open_in_browser(url: &str) {
    for opener in ["xdg-open", "open"] {
        if std::process::Command::new(opener)
            .arg(url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .is_ok()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, created: &str, ready: bool, deleting: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created,
                         "deletionTimestamp": if deleting { Some("2026-11-30T12:00:00Z") } else { None }},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    #[test]
    fn picks_the_newest_ready_pod_that_is_not_going_away() {
        let pods = [
            pod("old", "2026-11-01T00:00:00Z", true, false),
            pod("new-not-ready", "2026-11-03T00:00:00Z", false, false),
            pod("newer-terminating", "2026-11-04T00:00:00Z", true, true),
            pod("new", "2026-11-02T00:00:00Z", true, false),
        ];
        assert_eq!(
            pick_pod(&pods).map(|p| p.name_any()),
            Some("new".to_owned())
        );
        assert!(pick_pod(&pods[1..3]).is_none());
    }
}
