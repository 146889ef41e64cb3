//! The suite's clock logic at two different wall-clock dates: a test must not depend on today's date
//! relative to a fixed instant (a run finished on a cluster started at one date and then served must
//! keep its TTL, not be overdue or decades away).

use jiff::{SignedDuration, Timestamp};
use sentry_tenants_tests::Cluster;
use sentry_tenants_tests::browser::Served;

async fn time_left_to_cleanup_once_served(start: Timestamp) -> SignedDuration {
    let cluster = Cluster::starting_at(start).await;
    cluster.with_a_failed_provision_run().await;
    let served = Served::start(cluster, false).await;
    let c = &served.cluster;
    let cleanup_at = c
        .run("acme-provision-1")
        .await
        .unwrap()
        .status
        .unwrap()
        .cleanup_at;
    cleanup_at
        .expect("a finished run has a cleanup time")
        .0
        .duration_since(c.clock.now())
}

#[tokio::test]
async fn a_served_cluster_keeps_a_finished_runs_ttl_at_any_wall_clock_date() {
    for start in ["2026-11-30T12:00:00Z", "2031-07-15T03:30:00Z"] {
        let left = time_left_to_cleanup_once_served(start.parse().unwrap()).await;
        // The default TTL is 300 s; serving takes a moment of real time, never minutes.
        assert!(
            left > SignedDuration::from_secs(240) && left <= SignedDuration::from_secs(300),
            "cluster started at {start}: {left:?} left before cleanup, want just under 300 s"
        );
    }
}

#[tokio::test]
async fn a_new_cluster_starts_at_the_wall_clock_in_whole_seconds() {
    let before = Timestamp::now().as_second();
    let started = Cluster::new().await.clock.now();
    let after = Timestamp::now().as_second();
    assert_eq!(started.subsec_nanosecond(), 0, "{started}");
    assert!((before..=after).contains(&started.as_second()), "{started}");
}
