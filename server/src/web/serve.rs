//! Serving the dashboard. `axum::serve` sets no timer, so hyper's header-read deadline never fires: a
//! client that opens connections and sends a header slowly (or nothing after one request) holds them
//! forever, and nothing bounds how many. It also waits at shutdown for every response to end, and an
//! open `/events` stream never does, so a pod kept its port until the grace period killed it. Here each
//! request's header must arrive within a deadline (which also ends idle keep-alive connections),
//! connections past a cap are answered 503 and closed, and shutdown stops accepting, lets requests in
//! flight finish and ends event streams (their handler watches the same signal). The operator's probe
//! and metrics port is served by the same loop, with a cap per client address besides: any pod can
//! reach it, and one pod's slowloris must not take the slots the kubelet's probes need.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// The address a request's connection came from (behind a port-forward: the forwarder's end), for
/// the dashboard's record of who acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// What is served, for the log and the 503's text ("the dashboard").
    pub server: &'static str,
    /// How long a request's header may take to arrive, counted from when the connection is ready
    /// for it: a slow header, and an idle keep-alive connection, end after it.
    pub header_read_timeout: Duration,
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Open connections from one IP address at most; one more is answered 503 and closed. None for
    /// the dashboard: behind a port-forward every connection comes from the forwarder's address.
    pub max_per_peer: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            server: "the dashboard",
            header_read_timeout: Duration::from_secs(15),
            max_connections: 256,
            max_per_peer: None,
        }
    }
}

impl Limits {
    /// The probe and metrics port. The kubelet probes it from the node's address and Prometheus
    /// scrapes it from its own; a few connections each is all they hold. A client that opens more
    /// gets 503s for them and the others keep theirs. A probe waits a second at most (the kubelet's
    /// default timeout), so a header has 5 s.
    pub fn probes() -> Self {
        Self {
            server: "the probe server",
            header_read_timeout: Duration::from_secs(5),
            max_connections: 1024,
            max_per_peer: Some(8),
        }
    }
}

/// Open connections per client address, each held by a [`PeerSlot`].
#[derive(Default)]
struct PeerCounts(Mutex<HashMap<IpAddr, usize>>);

/// One open connection of `ip`'s, counted until dropped.
struct PeerSlot {
    counts: Arc<PeerCounts>,
    ip: IpAddr,
}

impl PeerCounts {
    fn take(self: &Arc<Self>, ip: IpAddr, cap: Option<usize>) -> Option<PeerSlot> {
        let mut counts = self.0.lock().expect("peer counts");
        let open = counts.entry(ip).or_default();
        if cap.is_some_and(|cap| *open >= cap) {
            return None;
        }
        *open += 1;
        Some(PeerSlot {
            counts: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().expect("peer counts");
        if let Some(open) = counts.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// Resolves when `shutdown` says true; never, if its sender is gone without saying so.
pub async fn stopped(mut shutdown: watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Serves `app` on `listener` until `shutdown`, then lets every open connection finish its request.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let peers = Arc::new(PeerCounts::default());
    let mut connections = JoinSet::new();
    let mut accepting = pin!(stopped(shutdown.clone()));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: the next accept may work.
                Err(error) => {
                    tracing::warn!(%error, server = limits.server, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut accepting => break,
        };
        let slot = peers.take(peer.ip(), limits.max_per_peer);
        match (slot, Arc::clone(&permits).try_acquire_owned()) {
            (Some(slot), Ok(permit)) => {
                let app = app.clone();
                let shutdown = shutdown.clone();
                connections.spawn(async move {
                    serve_connection(stream, Peer(peer), app, limits, shutdown).await;
                    drop((permit, slot));
                });
            }
            _ => {
                connections.spawn(refuse(stream, limits.server));
            }
        }
        // Reap finished connections as we go, so the set holds only open ones.
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(
    stream: TcpStream,
    peer: Peer,
    app: Router,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let service = TowerToHyperService::new(
        tower::ServiceBuilder::new()
            .layer(axum::Extension(peer))
            .service(app),
    );
    let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
    tokio::select! {
        _ = connection.as_mut() => return,
        () = stopped(shutdown) => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}

/// One connection too many: a short 503 and the connection closed, without reading its request.
async fn refuse(mut stream: TcpStream, server: &str) {
    let body = format!("{server} has too many open connections; try again\n");
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// How long a test waits before calling a hang a hang; every wait ends as soon as what it waits
    /// for happens.
    const PATIENCE: Duration = Duration::from_secs(120);

    async fn started(
        limits: Limits,
    ) -> (SocketAddr, watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, shutdown) = watch::channel(false);
        let app = Router::new().route("/", get(|| async { "ok" }));
        let server = tokio::spawn(serve(listener, app, limits, shutdown));
        (addr, stop, server)
    }

    /// A connection that has sent one whole request for `/`.
    async fn asked(addr: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        stream
    }

    /// Everything the server sends until it closes the connection.
    async fn until_closed(stream: &mut TcpStream) -> String {
        let mut out = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut out))
            .await
            .expect("the server closed the connection")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn a_header_that_does_not_arrive_in_time_loses_its_connection() {
        let limits = Limits {
            header_read_timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        let (addr, _stop, _server) = started(limits).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n")
            .await
            .unwrap();
        let said = until_closed(&mut slow).await;
        assert!(!said.contains("200 OK"), "{said}");
        // An idle connection after a request ends the same way.
        let mut idle = asked(addr).await;
        let said = until_closed(&mut idle).await;
        assert!(said.starts_with("HTTP/1.1 200 OK"), "{said}");
    }

    #[tokio::test]
    async fn a_connection_past_the_cap_is_answered_503_and_closed() {
        let limits = Limits {
            max_connections: 1,
            ..Limits::default()
        };
        let (addr, _stop, _server) = started(limits).await;
        // The one allowed connection, held open and served.
        let mut held = asked(addr).await;
        let mut first = [0u8; 15];
        held.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 200 OK");
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let said = until_closed(&mut extra).await;
        assert!(
            said.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{said}"
        );
        assert!(
            said.ends_with("too many open connections; try again\n"),
            "{said}"
        );
        drop(held);
    }

    /// The probe port's slowloris: 1,000 connections from one address that never send a header. It
    /// holds 8 of them, answers the rest 503 at once, and drops the 8 at the header deadline; a
    /// probe from another address (the kubelet's) is answered all along.
    #[tokio::test]
    async fn a_slowloris_from_one_address_never_takes_the_probes_slots() {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(2),
            ..Limits::probes()
        };
        let (addr, _stop, _server) = started(limits).await;
        let mut attack = Vec::new();
        for _ in 0..1000 {
            attack.push(TcpStream::connect(addr).await.unwrap());
        }
        let kubelet = async || {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            let mut probe = socket.connect(addr).await.unwrap();
            probe
                .write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            until_closed(&mut probe).await
        };
        let started = std::time::Instant::now();
        let said = kubelet().await;
        assert!(said.starts_with("HTTP/1.1 200 OK"), "{said}");
        eprintln!("a probe during the slowloris took {:?}", started.elapsed());
        // Every one of the attack's connections ends: 992 refused at once, 8 at the deadline.
        let mut refused = 0;
        for stream in &mut attack {
            let said = until_closed(stream).await;
            if said.starts_with("HTTP/1.1 503 Service Unavailable\r\n") {
                assert!(
                    said.ends_with("the probe server has too many open connections; try again\n")
                );
                refused += 1;
            } else {
                assert_eq!(said, "", "a held connection ends without an answer");
            }
        }
        assert_eq!(refused, 1000 - 8);
        // Its slots are free again: the same address is served.
        let mut after = asked(addr).await;
        assert!(
            until_closed(&mut after)
                .await
                .starts_with("HTTP/1.1 200 OK")
        );
    }

    #[tokio::test]
    async fn shutdown_stops_accepting_and_returns_once_connections_end() {
        let (addr, stop, server) = started(Limits::default()).await;
        let mut open = asked(addr).await;
        let mut first = [0u8; 15];
        open.read_exact(&mut first).await.unwrap();
        stop.send_replace(true);
        tokio::time::timeout(PATIENCE, server)
            .await
            .expect("serve returns after shutdown")
            .unwrap();
        until_closed(&mut open).await;
    }
}
