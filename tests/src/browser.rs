//! Real headless Chromium (Debian's `chromium` + `chromium-driver`), driven over WebDriver with
//! fantoccini, against the real dashboard router served on 127.0.0.1.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

pub use crate::PATIENCE;
use crate::processes::Owned;
use crate::{Cluster, free_port};

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// A chromedriver process and the Chromium it starts, all killed on drop.
pub struct Driver {
    child: Option<Owned>,
    port: u16,
    profile: PathBuf,
}

impl Driver {
    pub fn start() -> Self {
        for bin in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: run `bash scripts/setup.sh` (it installs Debian's chromium and chromium-driver)"
            );
        }
        let port = free_port();
        let child = Owned::spawn(
            Command::new(CHROMEDRIVER)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = std::env::temp_dir().join(format!(
            "sentry-tenants-chromium-{}-{port}",
            std::process::id()
        ));
        Self {
            child: Some(child),
            port,
            profile,
        }
    }

    /// A browser session; `javascript: false` turns scripts off for the whole profile.
    pub async fn session(&self, javascript: bool) -> Client {
        self.session_with(javascript, false).await
    }

    /// [`Self::session`] with the system's colour scheme dark (`prefers-color-scheme: dark`) when `dark`.
    pub async fn session_with(&self, javascript: bool, dark: bool) -> Client {
        let mut prefs = json!({});
        if !javascript {
            prefs = json!({"profile.managed_default_content_settings.javascript": 2});
        }
        let profile = self.profile.join(match (javascript, dark) {
            (true, false) => "js",
            (false, false) => "nojs",
            (true, true) => "js-dark",
            (false, true) => "nojs-dark",
        });
        let scheme = if dark {
            "--force-dark-mode"
        } else {
            "--no-default-browser-check"
        };
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--window-size=1280,900", format!("--user-data-dir={}", profile.display()), scheme,
                ],
                "prefs": prefs,
            }
        });
        let caps = caps.as_object().unwrap().clone().into_iter().collect();
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a WebDriver session with headless Chromium")
    }
}

impl Driver {
    /// chromedriver and every Chromium process it started, alive now.
    pub fn processes(&self) -> std::collections::BTreeSet<u32> {
        self.child
            .as_ref()
            .map(Owned::processes)
            .unwrap_or_default()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        drop(self.child.take()); // Chromium gone before its profile is removed
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// The dashboard served on a loopback port over the in-memory cluster, with a background loop that
/// plays the operator (reconcile everything, every 100 ms) and moves the cluster's clock with real time.
pub struct Served {
    pub url: String,
    pub cluster: Arc<Cluster>,
    /// The `/events` streams the server is sending.
    pub streams: Arc<StreamGauge>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How many `/events` streams are open now, and the most ever open at once.
#[derive(Default)]
pub struct StreamGauge {
    open: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

impl StreamGauge {
    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
    pub fn peak(&self) -> usize {
        self.peak.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Counts a response body while it is being sent: one more when made, one fewer when dropped (the
/// browser closed the stream, or the server ended it).
struct Counted(Arc<StreamGauge>);

impl Counted {
    fn new(gauge: &Arc<StreamGauge>) -> Self {
        let now = gauge.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        gauge
            .peak
            .fetch_max(now, std::sync::atomic::Ordering::SeqCst);
        Self(Arc::clone(gauge))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0
            .open
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `router` with its `/events` responses counted in `gauge`.
fn counting_streams(router: axum::Router, gauge: Arc<StreamGauge>) -> axum::Router {
    use futures::StreamExt;
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let gauge = Arc::clone(&gauge);
            async move {
                let counted = (request.uri().path() == "/events").then(|| Counted::new(&gauge));
                let response = next.run(request).await;
                match counted {
                    None => response,
                    Some(counted) => response.map(|body| {
                        axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
                            let _held = &counted;
                            chunk
                        }))
                    }),
                }
            }
        },
    ))
}

impl Served {
    /// Serves `cluster` from now on. Its clock goes on from where the test left it, at the pace of real
    /// time: a run finished just before keeps its whole TTL, whatever today's date is.
    pub async fn start(cluster: Cluster, read_only: bool) -> Self {
        let cluster = Arc::new(cluster);
        let streams = Arc::new(StreamGauge::default());
        let router = counting_streams(
            crate::dashboard::dashboard_router(&cluster, read_only),
            Arc::clone(&streams),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        let c = Arc::clone(&cluster);
        let operator = tokio::spawn(async move {
            let mut last = Instant::now();
            loop {
                let now = Instant::now();
                c.clock
                    .advance(jiff::SignedDuration::try_from(now - last).unwrap_or_default());
                last = now;
                c.reconcile_all_once().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self {
            url,
            cluster,
            streams,
            tasks: vec![server, operator],
        }
    }

    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Waits for the RunJob reconciler to have made the Job `name`. A page shows a run as soon as its
    /// RunJob exists, one operator pass before its Job does; the Job controller a test plays can only
    /// act on a Job that exists.
    pub async fn job_made(&self, name: &str) {
        eventually(&format!("the Job {name} made by the operator"), || async {
            self.cluster.job(name).await.is_some()
        })
        .await;
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Polls `check` until it holds; panics only after [`PATIENCE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("still waiting after {PATIENCE:?} for: {what}");
}

/// Browser tests take turns: two Chromium instances on two cores slow each other into timeouts.
pub fn one_browser_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The rendered text of the first element matching `css`, or "" if there is none.
pub async fn text(client: &Client, css: &str) -> String {
    read_in_page(client, "e.innerText", css, None).await
}

/// The attribute `name` of the first element matching `css`, or "" if there is none.
pub async fn attr(client: &Client, css: &str, name: &str) -> String {
    read_in_page(client, "e.getAttribute(arguments[1])", css, Some(name)).await
}

/// Finds the element and reads it in one script run: a live update that replaces `<main>` between
/// a WebDriver find and a second WebDriver read would leave a stale element, read as "".
async fn read_in_page(client: &Client, read: &str, css: &str, arg: Option<&str>) -> String {
    let script =
        format!("const e = document.querySelector(arguments[0]); return e ? ({read}) ?? '' : '';");
    let mut args = vec![serde_json::json!(css)];
    args.extend(arg.map(|a| serde_json::json!(a)));
    match client.execute(&script, args).await {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// Waits until the page has hydrated and its event stream is open (the header says "● Live").
pub async fn wait_live(client: &Client) {
    eventually("the page to hydrate and connect to /events", || async {
        text(client, ".live").await == "● Live"
    })
    .await;
}

/// Saves a screenshot under `target/screenshots/` (not committed).
pub async fn screenshot(client: &Client, name: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// A TCP relay between the browser and the dashboard that can cut every connection — a dropped network
/// — and keep refusing for a while, without touching the server.
pub struct Relay {
    pub url: String,
    cut: Arc<tokio::sync::watch::Sender<u64>>,
    down: Arc<std::sync::atomic::AtomicBool>,
    /// Connections dropped while down: each one the browser tried and lost.
    refused: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    pub async fn start(upstream: &str) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let cut = Arc::new(tokio::sync::watch::channel(0u64).0);
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (cut2, down2, refused2) = (Arc::clone(&cut), Arc::clone(&down), Arc::clone(&refused));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if down2.load(std::sync::atomic::Ordering::SeqCst) {
                    refused2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    continue; // dropped on the floor: connection refused, as far as the browser can tell
                }
                let upstream = upstream.clone();
                let mut cut_rx = cut2.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.changed() => {}
                    }
                });
            }
        });
        Self {
            url,
            cut,
            down,
            refused,
            task,
        }
    }

    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Cuts every open connection and refuses new ones until [`Relay::restore`].
    pub fn cut(&self) {
        self.down.store(true, std::sync::atomic::Ordering::SeqCst);
        self.cut.send_modify(|v| *v += 1);
    }

    /// How many connections the relay has dropped while cut.
    pub fn refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn restore(&self) {
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// axe-core's rules for WCAG 2.0 and 2.1, levels A and AA.
pub const WCAG_AA: [&str; 4] = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"];

/// Runs axe-core (npm, `tests/axe`, installed by `scripts/setup.sh`) on the page the browser shows, for
/// [`WCAG_AA`]; one line per violation: rule, help text and the elements it found.
pub async fn axe_violations(client: &Client) -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/axe/node_modules/axe-core/axe.min.js"
    );
    let source = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("{path}: {e} (run `bash scripts/setup.sh`: it installs axe-core)")
    });
    // WebDriver scripts run outside the page's Content-Security-Policy, as a browser extension would.
    client
        .execute(&format!("{source}\nreturn typeof axe;"), vec![])
        .await
        .expect("load axe-core");
    let tags = serde_json::json!(WCAG_AA);
    let run = r#"
        const done = arguments[arguments.length - 1];
        axe.run(document, { runOnly: { type: 'tag', values: arguments[0] }, resultTypes: ['violations'] })
          .then(r => done(r.violations.map(v =>
              v.id + ' (' + v.impact + '): ' + v.help + ' — ' +
              v.nodes.map(n => n.target.join(' ')).join(', '))))
          .catch(e => done(['axe-core failed: ' + e]));
    "#;
    let answer = client
        .execute_async(run, vec![tags])
        .await
        .expect("run axe-core");
    serde_json::from_value(answer).expect("a list of violations")
}
