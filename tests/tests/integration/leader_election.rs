//! Leader election on a Lease: only one replica reconciles; an expired or released Lease moves on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{Method, Request};
use jiff::SignedDuration;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::Api;
use kube::client::{Body, Client};
use sentry_tenants::clock::Clock;
use sentry_tenants::crd::RunAction;
use sentry_tenants::leader::{LEASE_NAME, LeaderElection};
use sentry_tenants_tests::{Cluster, NS, Recorded, status_body};
use tokio::sync::watch;
use tokio::time::Instant;

fn elector(c: &Cluster, who: &str, clock: &Clock) -> LeaderElection {
    LeaderElection::new(
        Api::<Lease>::namespaced(c.admin.clone(), NS),
        who,
        Duration::from_secs(15),
        clock.clone(),
    )
}

/// Two replicas electing over one in-memory API, with a clock the test moves.
async fn two_replicas() -> (Cluster, Clock, LeaderElection, LeaderElection) {
    let c = Cluster::new().await;
    let clock = Clock::manual(c.clock.now());
    let a = elector(&c, "replica-a", &clock);
    let b = elector(&c, "replica-b", &clock);
    (c, clock, a, b)
}

#[tokio::test]
async fn only_one_of_two_replicas_leads_while_the_lease_is_renewed() {
    let (_c, clock, a, b) = two_replicas().await;
    assert!(a.try_acquire_or_renew().await.unwrap());
    assert!(!b.try_acquire_or_renew().await.unwrap());
    for _ in 0..3 {
        clock.advance(SignedDuration::from_secs(5));
        assert!(a.try_acquire_or_renew().await.unwrap(), "renewal keeps it");
        assert!(!b.try_acquire_or_renew().await.unwrap());
    }
}

/// client-go holds a Lease while the time it was last seen changed plus its duration is after now:
/// at the deadline itself it has expired.
#[tokio::test]
async fn a_lease_expired_exactly_one_duration_after_it_was_last_seen_changed_is_taken_over() {
    let (c, clock, a, b) = two_replicas().await;
    assert!(a.try_acquire_or_renew().await.unwrap());
    assert!(
        !b.try_acquire_or_renew().await.unwrap(),
        "b sees a's Lease: first seen now"
    );
    clock.advance(SignedDuration::from_millis(14_999));
    assert!(
        !b.try_acquire_or_renew().await.unwrap(),
        "a millisecond left"
    );
    clock.advance(SignedDuration::from_millis(1));
    assert!(
        b.try_acquire_or_renew().await.unwrap(),
        "at the deadline: taken over"
    );
    assert!(
        !a.try_acquire_or_renew().await.unwrap(),
        "the old leader does not take it back"
    );
    let lease = Api::<Lease>::namespaced(c.admin.clone(), NS)
        .get(LEASE_NAME)
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

/// Expiry is what this replica has watched, not the holder's `renewTime` against its own clock: a
/// holder whose clock is a minute behind keeps its Lease while it renews, and one that stops renewing
/// loses it a Lease duration after the other replica last saw it change.
#[tokio::test]
async fn a_holder_with_a_skewed_clock_keeps_its_lease_while_it_renews() {
    let c = Cluster::new().await;
    let b_clock = Clock::manual(c.clock.now());
    let a_clock = Clock::manual(c.clock.now() - SignedDuration::from_secs(60));
    let a = elector(&c, "replica-a", &a_clock);
    let b = elector(&c, "replica-b", &b_clock);
    assert!(a.try_acquire_or_renew().await.unwrap());
    for _ in 0..6 {
        assert!(
            !b.try_acquire_or_renew().await.unwrap(),
            "a renews: b never takes over, whatever a's clock says"
        );
        a_clock.advance(SignedDuration::from_secs(5));
        b_clock.advance(SignedDuration::from_secs(5));
        assert!(a.try_acquire_or_renew().await.unwrap());
    }
    // a stops renewing: b takes over once it has seen the Lease unchanged for 15 s, not before.
    assert!(!b.try_acquire_or_renew().await.unwrap());
    b_clock.advance(SignedDuration::from_secs(14));
    assert!(!b.try_acquire_or_renew().await.unwrap(), "not expired yet");
    b_clock.advance(SignedDuration::from_secs(2));
    assert!(
        b.try_acquire_or_renew().await.unwrap(),
        "expired: taken over"
    );
}

#[tokio::test]
async fn a_released_lease_is_taken_at_once() {
    let (_c, _clock, a, b) = two_replicas().await;
    assert!(a.try_acquire_or_renew().await.unwrap());
    a.release().await.unwrap();
    assert!(b.try_acquire_or_renew().await.unwrap());
}

#[tokio::test]
async fn a_replica_that_does_not_lead_reconciles_nothing() {
    let c = Cluster::new().await;
    c.create_tenant("acme").await;
    c.create_run("acme", RunAction::Provision, "acme-provision-1")
        .await;
    c.set_leader(false);
    c.settle().await;
    assert!(c.log.writes().is_empty(), "{:?}", c.log.writes());
    c.set_leader(true);
    c.settle().await;
    assert_eq!(c.log.creates_of("jobs"), 1);
}

async fn lease(c: &Cluster) -> LeaseSpec {
    Api::<Lease>::namespaced(c.admin.clone(), NS)
        .get(LEASE_NAME)
        .await
        .expect("the Lease exists")
        .spec
        .expect("a spec")
}

/// An elector on the operator's client: its requests are recorded and can be answered by the test.
fn recorded_elector(c: &Cluster, who: &str, lease: Duration) -> LeaderElection {
    LeaderElection::new(
        Api::namespaced(c.client.clone(), NS),
        who,
        lease,
        c.clock.clone(),
    )
}

fn is_lease_write(r: &Recorded, method: Method) -> bool {
    r.method == method && r.path.ends_with(&format!("/leases/{LEASE_NAME}"))
}

#[tokio::test]
async fn the_first_replica_creates_the_lease_with_its_name_duration_times_and_labels() {
    let c = Cluster::new().await;
    let a = recorded_elector(&c, "replica-a", Duration::from_secs(20));
    assert!(a.try_acquire_or_renew().await.unwrap());
    let now = Some(MicroTime(c.clock.now()));
    let spec = lease(&c).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
    assert_eq!(spec.lease_duration_seconds, Some(20));
    assert_eq!(spec.acquire_time, now);
    assert_eq!(spec.renew_time, now);
    assert_eq!(spec.lease_transitions, Some(0));
    let labels = Api::<Lease>::namespaced(c.admin.clone(), NS)
        .get(LEASE_NAME)
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/component")
            .map(String::as_str),
        Some("leader-election")
    );
    assert_eq!(
        labels.get("app.kubernetes.io/part-of").map(String::as_str),
        Some("sentry-tenants")
    );
}

/// Another replica writing first is an answer (we do not lead), not an error; any other refusal is.
#[tokio::test]
async fn a_replica_beaten_to_the_lease_does_not_lead_and_other_refusals_are_errors() {
    let c = Cluster::new().await;
    let a = recorded_elector(&c, "replica-a", Duration::from_secs(15));
    let conflict = |reason: &'static str| {
        move |m: &Method, path: &str, _: &str, _: &serde_json::Value| {
            (matches!(*m, Method::POST | Method::PUT) && path.contains("/leases"))
                .then(|| (409, status_body(409, reason, "another replica wrote first")))
        }
    };
    c.intercept.set(conflict("AlreadyExists"));
    assert!(!a.try_acquire_or_renew().await.unwrap(), "create lost");
    c.intercept.refuse(Method::POST, "/leases");
    assert!(a.try_acquire_or_renew().await.is_err(), "a 500 on create");

    c.intercept.clear();
    assert!(a.try_acquire_or_renew().await.unwrap());
    c.intercept.set(conflict("Conflict"));
    assert!(!a.try_acquire_or_renew().await.unwrap(), "renewal lost");
    c.intercept
        .refuse(Method::PUT, "/leases/sentry-tenants-leader");
    assert!(a.try_acquire_or_renew().await.is_err(), "a 500 on renewal");
    assert_eq!(c.log.count(|r| is_lease_write(r, Method::PUT)), 2);
}

#[tokio::test]
async fn releasing_touches_only_our_own_lease() {
    let (c, _clock, a, b) = two_replicas().await;
    b.release().await.expect("no Lease yet: nothing to release");
    assert!(a.try_acquire_or_renew().await.unwrap());
    b.release().await.unwrap();
    let spec = lease(&c).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
    assert!(spec.renew_time.is_some());
    a.release().await.unwrap();
    let spec = lease(&c).await;
    assert_eq!(spec.holder_identity, None);
    assert_eq!(spec.renew_time, None);
}

/// `c.client` behind a switch that leaves every request unanswered while it is on: an apiserver that
/// took the connection and went silent.
fn silenceable(c: &Cluster) -> (Client, Arc<AtomicBool>) {
    let silent = Arc::new(AtomicBool::new(false));
    let switch = Arc::clone(&silent);
    let inner = c.client.clone();
    let service = tower::service_fn(move |req: Request<Body>| {
        let inner = inner.clone();
        let silent = switch.load(Ordering::SeqCst);
        async move {
            if silent {
                std::future::pending::<()>().await;
            }
            inner.send(req).await
        }
    });
    (Client::new(service, NS), silent)
}

/// `run` for `who` on a 15 s Lease, in a task; the test's paused clock decides when its rounds come.
struct Running {
    leading: watch::Receiver<bool>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    started: Instant,
}

fn run(c: &Cluster, client: Client, who: &str) -> Running {
    let elector = LeaderElection::new(
        Api::namespaced(client, NS),
        who,
        Duration::from_secs(15),
        c.clock.clone(),
    );
    let (leader, leading) = watch::channel(false);
    let (shutdown, stop) = watch::channel(false);
    let started = Instant::now();
    let task = tokio::spawn(elector.run(leader, stop));
    Running {
        leading,
        shutdown,
        task,
        started,
    }
}

impl Running {
    /// Waits for the next change of the leadership flag: its value and when it came. On the paused
    /// clock a minute passes at once when nothing else is due, so a change that never comes fails here
    /// at once instead of hanging the test.
    async fn next_change(&mut self) -> (bool, Duration) {
        tokio::time::timeout(Duration::from_secs(60), self.leading.changed())
            .await
            .expect("a change within a minute of the paused clock")
            .expect("run is alive");
        (*self.leading.borrow_and_update(), self.started.elapsed())
    }

    async fn stop(self) {
        self.shutdown.send_replace(true);
        self.task.await.unwrap();
        assert!(!*self.leading.borrow(), "not leading once stopped");
    }
}

async fn sleep_until_ms(started: Instant, millis: u64) {
    tokio::time::sleep_until(started + Duration::from_millis(millis)).await;
}

/// Renewal every third of the Lease (5 s); a failed renewal keeps the flag up only while the last
/// good one is less than two thirds of the Lease (10 s) old, so no other replica can have taken it.
#[tokio::test(start_paused = true)]
async fn a_leader_renews_every_third_of_its_lease_and_steps_down_two_thirds_after_its_last_renewal()
{
    let c = Cluster::new().await;
    let (client, _) = silenceable(&c);
    let mut a = run(&c, client, "replica-a");
    assert_eq!(
        a.next_change().await,
        (true, Duration::ZERO),
        "leads at once"
    );
    sleep_until_ms(a.started, 5_500).await;
    assert_eq!(
        c.log.count(|r| is_lease_write(r, Method::PUT)),
        1,
        "renewed at 5 s"
    );
    assert!(
        !a.leading.has_changed().unwrap(),
        "a renewal changes nothing"
    );

    c.intercept
        .refuse(Method::PUT, "/leases/sentry-tenants-leader");
    sleep_until_ms(a.started, 10_500).await;
    let refused = |r: &Recorded| is_lease_write(r, Method::PUT) && r.status == 500;
    assert_eq!(c.log.count(refused), 1, "the 10 s renewal failed");
    assert!(*a.leading.borrow(), "the 5 s renewal still holds");
    assert!(!a.leading.has_changed().unwrap());
    assert_eq!(
        a.next_change().await,
        (false, Duration::from_secs(15)),
        "steps down at the 15 s round: 10 s after the last renewal"
    );
    c.intercept.clear();
    a.stop().await;
}

/// A renewal that never answers is cut short when the last renewal is two thirds of the Lease old:
/// the flag goes down before any other replica may take the Lease. Shutting down gives it up.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewal_hangs_steps_down_before_its_lease_could_expire() {
    let c = Cluster::new().await;
    let (client, silent) = silenceable(&c);
    let mut a = run(&c, client, "replica-a");
    assert_eq!(a.next_change().await, (true, Duration::ZERO));
    sleep_until_ms(a.started, 2_000).await;
    silent.store(true, Ordering::SeqCst);
    assert_eq!(
        a.next_change().await,
        (false, Duration::from_secs(10)),
        "the 5 s round is given up 10 s after the renewal at 0 s"
    );
    silent.store(false, Ordering::SeqCst);
    a.stop().await;
    assert_eq!(lease(&c).await.holder_identity, None, "released");
}

#[tokio::test(start_paused = true)]
async fn a_replica_that_never_leads_leaves_the_holder_alone_when_it_stops() {
    let c = Cluster::new().await;
    let b = recorded_elector(&c, "replica-b", Duration::from_secs(15));
    assert!(b.try_acquire_or_renew().await.unwrap());
    let (client, _) = silenceable(&c);
    let a = run(&c, client, "replica-a");
    // The harness's clock stands still: b's Lease never looks expired to a.
    sleep_until_ms(a.started, 60_000).await;
    assert!(!a.leading.has_changed().unwrap(), "never led");
    a.stop().await;
    assert_eq!(
        lease(&c).await.holder_identity.as_deref(),
        Some("replica-b")
    );
}
