//! Leader election on a Lease: only one replica reconciles; an expired or released Lease moves on.

use std::time::Duration;

use jiff::SignedDuration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use sentry_tenants::clock::Clock;
use sentry_tenants::crd::RunAction;
use sentry_tenants::leader::{LEASE_NAME, LeaderElection};
use sentry_tenants_tests::{Cluster, NS};

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

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_old_leader_steps_down() {
    let (c, clock, a, b) = two_replicas().await;
    assert!(a.try_acquire_or_renew().await.unwrap());
    assert!(!b.try_acquire_or_renew().await.unwrap(), "b sees a's Lease");
    clock.advance(SignedDuration::from_secs(14));
    assert!(!b.try_acquire_or_renew().await.unwrap(), "not expired yet");
    clock.advance(SignedDuration::from_secs(2));
    assert!(
        b.try_acquire_or_renew().await.unwrap(),
        "expired: taken over"
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
