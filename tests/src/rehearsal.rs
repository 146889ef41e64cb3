//! `SENTRY_TENANTS_TEST_FAIL`: rehearse a red run on purpose, to prove that a failing suite ends
//! promptly, says so, and leaves nothing running. Read only by the tests; the product never sees it.
//!
//! The value is a comma-separated list of:
//! - `tests`: the tests that call [`fail_here`] fail at that point, with their processes running (an
//!   operator process on the real control plane, Chromium in the browser tier);
//! - a test's own name as it passes it to [`fail_here`]: that test alone;
//! - `logins`: ClickHouse (the in-memory seam and the HTTP stand-in alike) refuses every tenant login,
//!   so no provisioning can succeed and every drill that waits for one must fail at its bound.

pub const ENV: &str = "SENTRY_TENANTS_TEST_FAIL";

fn asked(word: &str) -> bool {
    std::env::var(ENV).is_ok_and(|v| v.split(',').any(|w| w.trim() == word))
}

/// Panics here, as a failing assertion would, when the switch names `test` (or says `tests`).
pub fn fail_here(test: &str) {
    if asked("tests") || asked(test) {
        panic!("{test}: a failure rehearsed on purpose ({ENV} is set)");
    }
}

/// Whether ClickHouse is to refuse every tenant login (`logins`).
pub fn logins_refused() -> bool {
    asked("logins")
}
