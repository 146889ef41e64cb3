//! SSE fan-out: 100 browsers' worth of `/events` connections on loopback; a change to the caches is
//! announced and the time until each connection has the event is taken, trial after trial.

use std::time::{Duration, Instant};

use sentry_tenants_tests::Cluster;
use sentry_tenants_tests::dashboard::dashboard_router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::figure;
use crate::report::Section;

const CLIENTS: usize = 100;
const TRIALS: usize = 30;
/// The stream coalesces changes over this long before it sends (see `web::dashboard::events`).
const COALESCING_MS: f64 = 100.0;

pub async fn measure(c: &Cluster) -> Section {
    let app = dashboard_router(c, false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let (arrivals_tx, mut arrivals) = mpsc::unbounded_channel::<(usize, Instant)>();
    let mut clients = Vec::new();
    for id in 0..CLIENTS {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                format!(
                    "GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let tx = arrivals_tx.clone();
        clients.push(tokio::spawn(read_events(id, stream, tx)));
    }
    // Every client connected (its "connected" comment arrived) before the first trial.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut last = Vec::new();
    let mut spread = Vec::new();
    for _ in 0..TRIALS {
        let announced = Instant::now();
        c.ctx.stores.changes.notify();
        let mut times = Vec::with_capacity(CLIENTS);
        while times.len() < CLIENTS {
            let (_, at) = tokio::time::timeout(Duration::from_secs(5), arrivals.recv())
                .await
                .expect("every client gets the event within 5 s")
                .expect("clients alive");
            times.push(at.duration_since(announced).as_secs_f64() * 1000.0);
        }
        let first = times.iter().copied().fold(f64::INFINITY, f64::min);
        let max = times.iter().copied().fold(0.0, f64::max);
        last.push(max);
        spread.push(max - first);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for client in clients {
        client.abort();
    }
    server.abort();
    Section::new(
        format!("Live updates (SSE), {CLIENTS} clients"),
        vec![
            figure("change → last client, p50", percentile(&last, 50.0), "ms")
                .note(format!("includes the stream's {COALESCING_MS:.0} ms coalescing window")),
            figure("change → last client, max", percentile(&last, 100.0), "ms"),
            figure(
                "first → last client, p50",
                percentile(&spread, 50.0),
                "ms",
            )
            .note("the fan-out itself"),
            figure("first → last client, max", percentile(&spread, 100.0), "ms"),
        ],
    )
    .remark(format!(
        "{TRIALS} trials; each announces one change to the caches (as a watch event does) and waits for all \
         {CLIENTS} HTTP/1.1 connections to read the `data:` line."
    ))
}

/// Reads one client's stream, reporting the moment each `data:` line arrives.
async fn read_events(
    id: usize,
    mut stream: TcpStream,
    tx: mpsc::UnboundedSender<(usize, Instant)>,
) {
    const MARK: &[u8] = b"data:";
    let mut buf = vec![0u8; 4096];
    // The last bytes of the previous read: a mark split across two reads is still found, and a carry
    // shorter than the mark cannot hold a whole one to count twice.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let at = Instant::now();
        carry.extend_from_slice(&buf[..n]);
        let events = carry.windows(MARK.len()).filter(|w| *w == MARK).count();
        for _ in 0..events {
            if tx.send((id, at)).is_err() {
                return;
            }
        }
        let keep = carry.len().min(MARK.len() - 1);
        carry.drain(..carry.len() - keep);
    }
}

pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[rank.min(v.len() - 1)]
}
