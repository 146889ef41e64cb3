//! Leader election on the real Lease API, as the operator's ServiceAccount.

use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use sentry_tenants::clock::Clock;
use sentry_tenants::leader::{LEASE_NAME, LeaderElection};
use sentry_tenants_tests::control_plane::{FreezingRelay, client_from, wait_until};
use tokio::sync::watch;

use crate::setup;

const LEASE: Duration = Duration::from_secs(6);

/// The defect: a renew request that hangs (kube's client has no read timeout) kept the leader flag
/// up after the Lease expired and another replica had taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_that_hangs_stops_leading_before_the_lease_expires() {
    let s = setup("leader-hang").await;
    s.install_idle().await;
    let (_, kubeconfig) = s.as_account("sentry-tenants").await;
    let relay = FreezingRelay::start(s.plane.apiserver_addr()).await;
    let through_relay = client_from(&relay.kubeconfig_through(&kubeconfig)).await;
    let direct = client_from(&kubeconfig).await;

    let elector = |client: kube::Client, who: &str| {
        LeaderElection::new(Api::namespaced(client, &s.ns), who, LEASE, Clock::System)
    };
    let (a_tx, mut a) = watch::channel(false);
    let (stop_tx, stop) = watch::channel(false);
    let a_task = tokio::spawn(elector(through_relay, "replica-a").run(a_tx, stop.clone()));
    tokio::time::timeout(sentry_tenants_tests::PATIENCE, a.wait_for(|l| *l))
        .await
        .expect("replica-a leads")
        .unwrap();

    relay.freeze(true);
    let frozen_at = Instant::now();
    tokio::time::timeout(sentry_tenants_tests::PATIENCE, a.wait_for(|l| !*l))
        .await
        .expect("replica-a steps down while its renew hangs")
        .unwrap();
    let stepped_down = Timestamp::now();
    let leases: Api<Lease> = Api::namespaced(s.admin.clone(), &s.ns);
    let lease = leases.get(LEASE_NAME).await.unwrap().spec.unwrap();
    assert_eq!(lease.holder_identity.as_deref(), Some("replica-a"));
    let expires = lease.renew_time.unwrap().0 + SignedDuration::try_from(LEASE).unwrap();
    assert!(
        stepped_down < expires,
        "stepped down at {stepped_down}, after its Lease expired at {expires} ({:?} after the freeze)",
        frozen_at.elapsed()
    );

    // And the other replica takes over once the Lease has expired; never both at once.
    let (b_tx, mut b) = watch::channel(false);
    let b_task = tokio::spawn(elector(direct, "replica-b").run(b_tx, stop));
    tokio::time::timeout(sentry_tenants_tests::PATIENCE, b.wait_for(|l| *l))
        .await
        .expect("replica-b takes over")
        .unwrap();
    assert!(!*a.borrow(), "two leaders");
    assert!(Timestamp::now() > expires, "taken over only after expiry");
    wait_until("replica-b in the Lease", async || {
        let spec = leases.get(LEASE_NAME).await.ok()?.spec?;
        (spec.holder_identity.as_deref() == Some("replica-b")).then_some(())
    })
    .await;

    stop_tx.send_replace(true);
    relay.freeze(false);
    let _ = b_task.await;
    a_task.abort();
    s.assert_no_forbidden();
}
