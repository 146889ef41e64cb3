//! Serving the dashboard. `axum::serve` sets no timer, so hyper's header-read deadline never fires: a
//! client that opens connections and sends a header slowly (or nothing after one request) holds them
//! forever, and nothing bounds how many. It also waits at shutdown for every response to end, and an
//! open `/events` stream never does, so a pod kept its port until the grace period killed it. Here each
//! request's header must arrive within a deadline (which also ends idle keep-alive connections),
//! connections past a cap are answered 503 and closed, and shutdown stops accepting, lets requests in
//! flight finish and ends event streams (their handler watches the same signal).

use std::pin::pin;
use std::sync::Arc;
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
    /// How long a request's header may take to arrive, counted from when the connection is ready
    /// for it: a slow header, and an idle keep-alive connection, end after it.
    pub header_read_timeout: Duration,
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(15),
            max_connections: 256,
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
    let mut connections = JoinSet::new();
    let mut accepting = pin!(stopped(shutdown.clone()));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: the next accept may work.
                Err(error) => {
                    tracing::warn!(%error, "dashboard: cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut accepting => break,
        };
        match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => {
                let app = app.clone();
                let shutdown = shutdown.clone();
                connections.spawn(async move {
                    serve_connection(stream, Peer(peer), app, limits, shutdown).await;
                    drop(permit);
                });
            }
            Err(_) => {
                connections.spawn(refuse(stream));
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
async fn refuse(mut stream: TcpStream) {
    const BODY: &str = "the dashboard has too many open connections; try again\n";
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nretry-after: 1\r\n\r\n{BODY}",
        BODY.len()
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
