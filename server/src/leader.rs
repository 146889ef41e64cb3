//! Leader election on a `coordination.k8s.io` Lease: every replica serves the dashboard, only the
//! holder of the Lease reconciles. Writes use the Lease's resourceVersion, so two replicas racing for
//! an expired Lease cannot both win.
//!
//! Expiry is judged on this replica's own clock, as client-go does: a Lease has expired when this
//! replica has seen it unchanged for its whole duration — never by comparing the holder's `renewTime`,
//! written with the holder's clock, with ours (clocks apart by more than a third of the Lease would
//! give two leaders).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
// tokio's clock, not std's: the same in production, and a test can pause it.
use tokio::time::Instant;

use crate::clock::Clock;

/// The Lease of an unsharded install (and of a sharded one's main operator); each shard has its own.
pub const LEASE_NAME: &str = "sentry-tenants-leader";

/// The Lease of shard `shard`'s replicas (`install --shards`).
pub fn shard_lease(shard: &str) -> String {
    format!("{LEASE_NAME}-{shard}")
}

pub struct LeaderElection {
    api: Api<Lease>,
    lease: String,
    identity: String,
    lease_duration: Duration,
    clock: Clock,
    /// The other holder's record as last seen, and when (on our clock) it was first seen so.
    observed: std::sync::Mutex<Option<(Record, Timestamp)>>,
}

/// What changes whenever a holder renews: who, its `renewTime` and the duration it claims.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    renewed: Option<Timestamp>,
    seconds: Option<i32>,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Self {
        Self {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renewed: spec.renew_time.as_ref().map(|t| t.0),
            seconds: spec.lease_duration_seconds,
        }
    }
}

impl LeaderElection {
    pub fn new(
        api: Api<Lease>,
        identity: impl Into<String>,
        lease_duration: Duration,
        clock: Clock,
    ) -> Self {
        Self {
            api,
            lease: LEASE_NAME.to_owned(),
            identity: identity.into(),
            lease_duration,
            clock,
            observed: std::sync::Mutex::new(None),
        }
    }

    /// Elects on the Lease named `lease` instead (a shard's).
    pub fn on_lease(self, lease: String) -> Self {
        Self { lease, ..self }
    }

    /// Whether another holder's Lease has gone unrenewed for its whole duration, as this replica has
    /// watched it: the clock starts when the record is first seen as it is now.
    fn expired(&self, spec: &LeaseSpec, now: Timestamp) -> bool {
        if spec.renew_time.is_none() {
            return true;
        }
        let record = Record::of(spec);
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        let since = match observed.as_ref() {
            Some((seen, at)) if *seen == record => *at,
            _ => {
                *observed = Some((record.clone(), now));
                now
            }
        };
        let duration = SignedDuration::from_secs(i64::from(record.seconds.unwrap_or(15)));
        // client-go holds a Lease while `observedTime + duration` is after now: at the deadline
        // itself it has expired.
        since
            .checked_add(duration)
            .is_ok_and(|deadline| deadline <= now)
    }

    /// One round: take the Lease if it is free or expired, renew it if ours. Returns whether we lead.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = self.clock.now();
        let Some(mut lease) = self.api.get_opt(&self.lease).await? else {
            return self.create(now).await;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let ours = holder == self.identity;
        if !ours && !holder.is_empty() && !self.expired(spec, now) {
            return Ok(false);
        }
        if !ours {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(self.lease_duration.as_secs() as i32);
        spec.renew_time = Some(MicroTime(now));
        // `replace` sends the resourceVersion we read: a concurrent writer makes this a 409, not a tie.
        match self
            .api
            .replace(&self.lease, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn create(&self, now: Timestamp) -> Result<bool, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.lease.clone()),
                labels: Some(crate::labels::of_component("leader-election")),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.identity.clone()),
                lease_duration_seconds: Some(self.lease_duration.as_secs() as i32),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up on shutdown so the next replica need not wait for it to expire.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.lease).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        self.api
            .replace(&self.lease, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    /// Renews every third of the lease duration and publishes leadership on `leader`. A replica that
    /// cannot renew in time steps down before its Lease expires, so two leaders never overlap: a round
    /// is cut short when it would outlast the Lease it renewed last (kube's client has no read
    /// timeout, and a hung request must not keep the flag up while another replica takes over).
    pub async fn run(self, leader: watch::Sender<bool>, mut shutdown: watch::Receiver<bool>) {
        let period = self.lease_duration / 3;
        let mut last_renewed: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let bound = self.round_bound(last_renewed);
            let leading = match tokio::time::timeout(bound, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    // The Lease says renewed at the round's start: count from there.
                    last_renewed = Some(started);
                    true
                }
                Ok(Ok(false)) => false,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "leader election round failed");
                    self.still_ours(last_renewed)
                }
                Err(_) => {
                    tracing::warn!(
                        after = ?bound,
                        "leader election round did not answer in time; stepping down"
                    );
                    false
                }
            };
            if !leading {
                last_renewed = None;
            }
            if leader.send_if_modified(|was| std::mem::replace(was, leading) != leading) {
                tracing::info!(identity = %self.identity, leading, "leadership changed");
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = shutdown.changed() => break,
            }
        }
        leader.send_replace(false);
        if let Err(error) = self.release().await {
            tracing::warn!(%error, "could not release the leader Lease");
        }
    }

    /// How long we may keep leading after the last successful renewal: two thirds of the Lease, so
    /// we stop before any other replica may take it.
    fn leading_margin(&self) -> std::time::Duration {
        self.lease_duration * 2 / 3
    }

    fn still_ours(&self, last_renewed: Option<Instant>) -> bool {
        last_renewed.is_some_and(|t| t.elapsed() < self.leading_margin())
    }

    /// The longest one round may take: while leading, until the margin of the last renewal runs
    /// out; otherwise one margin.
    fn round_bound(&self, last_renewed: Option<Instant>) -> std::time::Duration {
        let margin = self.leading_margin();
        match last_renewed {
            Some(t) => margin.saturating_sub(t.elapsed()),
            None => margin,
        }
        .max(std::time::Duration::from_millis(1))
    }
}
