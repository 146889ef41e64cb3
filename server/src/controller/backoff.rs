//! How long a failed reconcile waits before its retry: exponential in the object's consecutive
//! failures, capped, and jittered, so that a fault that failed many objects at once (an apiserver
//! restart, a network blip) does not bring them all back in the same instant, and an object that keeps
//! failing costs less and less. A success forgets the object's failures.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

/// The longest wait between two tries of one object.
pub const MAX_DELAY: Duration = Duration::from_secs(300);

/// Consecutive failures per object (its `ObjectRef` as text).
#[derive(Debug, Default)]
pub struct ErrorBackoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl ErrorBackoff {
    /// Counts one more failure of `key`; returns how many in a row it has had, this one included.
    pub fn failed(&self, key: &str) -> u32 {
        let mut failures = self.failures.lock().expect("backoff lock");
        let n = failures.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    pub fn succeeded(&self, key: &str) {
        self.failures.lock().expect("backoff lock").remove(key);
    }

    /// The wait before the retry of `key`'s `failures`th failure in a row.
    pub fn delay(&self, key: &str, base: Duration, failures: u32) -> Duration {
        delay(base, failures, random_fraction(key, failures))
    }
}

/// `base · 2^(failures−1)`, capped at [`MAX_DELAY`], of which the upper half is scaled by `jitter`
/// (in `[0, 1)`): "equal jitter", never shorter than half the exponential step.
pub fn delay(base: Duration, failures: u32, jitter: f64) -> Duration {
    capped_delay(base, MAX_DELAY, failures, jitter)
}

/// [`delay`] with a cap of its own.
fn capped_delay(base: Duration, cap: Duration, failures: u32, jitter: f64) -> Duration {
    let exponent = failures.saturating_sub(1).min(20);
    let step = base.saturating_mul(1 << exponent).min(cap);
    let half = step / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

/// The first wait of a broken watch before it lists again.
const WATCH_BASE: Duration = Duration::from_millis(500);
/// The longest wait of a broken watch before it lists again.
pub const WATCH_MAX_DELAY: Duration = Duration::from_secs(8);

/// How long a broken watch waits before it lists and watches again: 0.5 s, doubling up to
/// [`WATCH_MAX_DELAY`], equal jitter; reset by the watch's next success. client-go's reflectors and
/// kube-runtime's default wait up to 30 s, and jitter doubles that: made for the thousands of
/// kubelets and controllers that hit an apiserver coming back. An operator is a few replicas with
/// four watches each, and after an apiserver restart (every control-plane upgrade) its runs should
/// move again within seconds of the API answering, not a minute later.
#[derive(Debug, Default)]
pub struct WatchBackoff {
    failures: u32,
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        let jitter = random_fraction("watch", self.failures);
        Some(capped_delay(
            WATCH_BASE,
            WATCH_MAX_DELAY,
            self.failures,
            jitter,
        ))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A fraction in `[0, 1)` that differs between calls: std's `RandomState` is seeded randomly per
/// thread and re-keyed on every construction, which is all jitter needs (no crate for it).
fn random_fraction(key: &str, failures: u32) -> f64 {
    let bits = std::hash::RandomState::new().hash_one((key, failures));
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_per_failure_up_to_the_cap_with_jitter_in_its_upper_half() {
        let base = Duration::from_secs(1);
        let ms = |failures, jitter| delay(base, failures, jitter).as_millis();
        assert_eq!(ms(1, 0.0), 500);
        assert_eq!(ms(1, 0.5), 750);
        assert_eq!(ms(2, 0.0), 1_000);
        assert_eq!(ms(3, 1.0), 4_000);
        assert_eq!(ms(9, 0.0), 128_000);
        assert_eq!(ms(10, 0.0), 150_000, "2^9 s is capped at 300 s");
        assert_eq!(ms(10, 1.0), 300_000);
        assert_eq!(ms(u32::MAX, 0.25), 187_500);
        assert_eq!(ms(0, 0.0), 500, "a first failure however counted");
    }

    #[test]
    fn a_broken_watch_retries_within_half_a_second_to_eight_and_starts_over_after_a_success() {
        use kube::runtime::utils::Backoff;
        let within = |d: Duration, step_ms: u64| {
            let step = Duration::from_millis(step_ms);
            assert!(
                (step / 2..=step).contains(&d),
                "{d:?} not in the upper half of {step:?}"
            );
        };
        let mut watch = WatchBackoff::default();
        for step_ms in [500, 1_000, 2_000, 4_000, 8_000, 8_000, 8_000] {
            within(watch.next().unwrap(), step_ms);
        }
        for _ in 0..100 {
            within(watch.next().unwrap(), 8_000);
        }
        watch.reset();
        within(watch.next().unwrap(), 500);
        within(watch.next().unwrap(), 1_000);
    }

    #[test]
    fn failures_count_per_object_and_a_success_forgets_them() {
        let backoff = ErrorBackoff::default();
        assert_eq!(backoff.failed("Tenant.v1alpha1.sentry.io/acme.ns"), 1);
        assert_eq!(backoff.failed("Tenant.v1alpha1.sentry.io/acme.ns"), 2);
        assert_eq!(backoff.failed("Tenant.v1alpha1.sentry.io/other.ns"), 1);
        backoff.succeeded("Tenant.v1alpha1.sentry.io/acme.ns");
        assert_eq!(backoff.failed("Tenant.v1alpha1.sentry.io/acme.ns"), 1);
    }

    #[test]
    fn jitter_spreads_retries_within_the_step() {
        let backoff = ErrorBackoff::default();
        let delays: std::collections::BTreeSet<Duration> = (0..50)
            .map(|_| backoff.delay("k", Duration::from_secs(4), 1))
            .collect();
        assert!(
            delays.len() > 40,
            "50 draws gave {} distinct delays",
            delays.len()
        );
        assert!(
            delays
                .iter()
                .all(|d| (Duration::from_secs(2)..=Duration::from_secs(4)).contains(d)),
            "{delays:?}"
        );
    }
}
