//! `sentry-tenants run`: the operator process. Caches, leader election, both controllers and the
//! probe server, with a graceful shutdown on SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::OperatorConfig;
use crate::controller::{Context, Stores, run_controllers};
use crate::leader::LeaderElection;
use crate::telemetry::{Metrics, ShardLabel};
use crate::web::permissions::Permissions;
use crate::web::{ProbeState, probe_router};

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: OperatorConfig,
    /// Address of `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "SENTRY_TENANTS_PROBE_ADDR", default_value = "[::]:8081")]
    pub probe_addr: SocketAddr,
    /// Identity in the leader Lease (the pod name in a Deployment).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Lease duration; the leader renews every third of it.
    #[arg(long, default_value = "15", value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(3..=300))]
    pub lease_seconds: u64,
    /// Address of the dashboard. Loopback by default: `sentry-tenants dashboard` (a port-forward)
    /// reaches it, other pods cannot.
    #[arg(
        long,
        env = "SENTRY_TENANTS_DASHBOARD_ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub dashboard_addr: SocketAddr,
    /// Another Host name the dashboard answers to (besides 127.0.0.1, localhost and [::1], on any
    /// port): for a proxy or ingress in front of it. Repeatable, or comma-separated in the variable.
    #[arg(
        long,
        env = "SENTRY_TENANTS_DASHBOARD_ALLOWED_HOSTS",
        value_delimiter = ',',
        value_name = "NAME"
    )]
    pub dashboard_allowed_host: Vec<String>,
    /// Serve the dashboard without any mutating route.
    #[arg(long, env = "SENTRY_TENANTS_READ_ONLY_DASHBOARD", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub read_only_dashboard: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    args.config.validate()?;
    let client = crate::cluster::connect().await?;
    crate::cluster::ensure_crds_installed(&client, &args.config.shared.namespace).await?;

    let metrics = Arc::new(Metrics::default());
    let (stores, writers) = Stores::shared();
    let (leader_tx, leader_rx) = watch::channel(false);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let ctx = Arc::new(Context::new(
        client.clone(),
        args.config.clone(),
        stores.clone(),
        Arc::clone(&metrics),
        Clock::System,
        leader_rx.clone(),
    ));

    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let election = LeaderElection::new(
        Api::<Lease>::namespaced(client.clone(), &args.config.shared.namespace),
        identity.clone(),
        Duration::from_secs(args.lease_seconds),
        Clock::System,
    )
    .on_lease(ctx.sharding.lease_name());
    let election = tokio::spawn(election.run(leader_tx, shutdown_rx.clone()));
    let shard = ShardLabel {
        shard: ctx.sharding.mine().unwrap_or_default().to_owned(),
    };
    tokio::spawn(track_leadership(leader_rx, Arc::clone(&metrics), shard));

    let listener = listen_dual_stack(args.probe_addr)
        .with_context(|| format!("cannot listen on {}", args.probe_addr))?;
    let probes = probe_router(ProbeState {
        stores: stores.clone(),
        metrics,
        namespace: args.config.shared.namespace.clone(),
        slots: Arc::clone(&ctx.slots),
    });
    let probe_server = tokio::spawn(crate::web::serve::serve(
        listener,
        probes,
        crate::web::serve::Limits::probes(),
        shutdown_rx.clone(),
    ));
    tracing::info!(namespace = %args.config.shared.namespace, %identity, probe = %args.probe_addr, shard = ctx.sharding.mine(), "operator starting");

    let (read_only, permissions) = dashboard_permissions(&client, &args, shutdown_rx.clone()).await;
    let dashboard = crate::web::dashboard::router(crate::web::dashboard::Dashboard {
        backend: Arc::new(crate::web::backend::ClusterBackend {
            client: client.clone(),
            stores: stores.clone(),
            namespace: args.config.shared.namespace.clone(),
            permissions,
            acting_as: crate::web::actions::ActingAs::Operator,
            clock: Clock::System,
            leader: Default::default(),
            rows: Some(Default::default()),
        }),
        actions: Arc::new(crate::web::actions::Actions {
            client: client.clone(),
            stores: stores.clone(),
            namespace: args.config.shared.namespace.clone(),
            acting_as: crate::web::actions::ActingAs::Operator,
        }),
        changes: stores.changes.subscribe(),
        read_only,
        allowed_hosts: crate::web::hosts::AllowedHosts::new(&args.dashboard_allowed_host),
        shutdown: shutdown_rx.clone(),
        keep_fragments: true,
    });
    let dashboard_listener = tokio::net::TcpListener::bind(args.dashboard_addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.dashboard_addr))?;
    let dashboard_server = tokio::spawn(crate::web::serve::serve(
        dashboard_listener,
        dashboard,
        crate::web::serve::Limits::default(),
        shutdown_rx.clone(),
    ));
    tracing::info!(dashboard = %args.dashboard_addr, read_only, "dashboard listening");

    let controllers = tokio::spawn(run_controllers(ctx, writers, wait_for(shutdown_rx)));
    crate::signals::shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight reconciles");
    shutdown_tx.send_replace(true);
    let _ = controllers.await;
    let _ = election.await;
    let _ = probe_server.await;
    let _ = dashboard_server.await;
    tracing::info!("stopped");
    Ok(())
}

/// Listens on `addr`. The IPv6 any-address (`[::]`, the probe default) takes IPv4 too, whatever the
/// node's `net.ipv6.bindv6only`: the kubelet probes the pod's IP, which is IPv4, IPv6 or either in a
/// dual-stack cluster. A kernel without IPv6 gets the IPv4 any-address on the same port instead.
pub fn listen_dual_stack(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let any_v6 = matches!(addr, SocketAddr::V6(a) if a.ip().is_unspecified());
    let socket = match Socket::new(Domain::for_address(addr), Type::STREAM, None) {
        Ok(socket) => socket,
        Err(e) if any_v6 && e.raw_os_error() == Some(libc_eafnosupport()) => {
            tracing::warn!(%addr, "IPv6 is not available: listening on IPv4 only");
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            return listen_dual_stack(v4);
        }
        Err(e) => return Err(e),
    };
    if any_v6 {
        socket.set_only_v6(false)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// `EAFNOSUPPORT` on Linux: the address family (here IPv6) is not supported by the kernel.
const fn libc_eafnosupport() -> i32 {
    97
}

/// Whether the dashboard is read-only, and what its pages offer. It offers an action only if this
/// operator's account may carry it out; installed with `--read-only-dashboard`, its Role has no
/// `create` on tenants, and the dashboard then turns read-only by itself (no action route at all)
/// instead of showing buttons that would fail.
async fn dashboard_permissions(
    client: &Client,
    args: &RunArgs,
    shutdown: watch::Receiver<bool>,
) -> (bool, Permissions) {
    use sentry_tenants_app::model::Allowed;
    if args.read_only_dashboard {
        return (true, Permissions::fixed(Allowed::NONE));
    }
    let reviewed = Permissions::reviewed(
        client.clone(),
        args.config.shared.namespace.clone(),
        shutdown,
    )
    .await;
    if reviewed.now().create {
        (false, reviewed)
    } else {
        tracing::info!("this account may not create tenants: the dashboard is read-only");
        (true, Permissions::fixed(Allowed::NONE))
    }
}

async fn track_leadership(
    mut leader: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
    shard: ShardLabel,
) {
    let gauge = metrics.is_leader.get_or_create(&shard).clone();
    loop {
        gauge.set(i64::from(*leader.borrow_and_update()));
        if leader.changed().await.is_err() {
            return;
        }
    }
}

/// A future that resolves when the shutdown flag is raised; cloneable for each component.
fn wait_for(
    mut shutdown: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static {
    let fut = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    futures::FutureExt::shared(Box::pin(fut))
}

fn default_identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "sentry-tenants".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each connection the listener accepts, by the family of the address it came from.
    async fn accepted_from(
        listener: &tokio::net::TcpListener,
        connect_to: SocketAddr,
    ) -> std::net::IpAddr {
        let (client, accepted) = tokio::join!(
            tokio::net::TcpStream::connect(connect_to),
            listener.accept()
        );
        client.expect("connects");
        accepted.expect("accepts").1.ip()
    }

    #[tokio::test]
    async fn the_ipv6_any_address_accepts_ipv4_and_ipv6_clients() {
        let listener = listen_dual_stack("[::]:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        let v4 = accepted_from(&listener, SocketAddr::from(([127, 0, 0, 1], port))).await;
        assert_eq!(v4.to_string(), "::ffff:127.0.0.1", "an IPv4 client, mapped");
        let v6 = accepted_from(&listener, format!("[::1]:{port}").parse().unwrap()).await;
        assert_eq!(v6.to_string(), "::1");
    }

    #[tokio::test]
    async fn an_ipv4_address_is_listened_on_as_given() {
        let listener = listen_dual_stack("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.is_ipv4());
        assert_eq!(
            accepted_from(&listener, addr).await.to_string(),
            "127.0.0.1"
        );
    }
}
