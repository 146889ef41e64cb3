//! A provisioning run outlasts a short outage of the Kubernetes API: run again once the apiserver is
//! ready, for a few minutes, and only for that kind of failure. On tokio's paused clock, so the
//! minutes are virtual and exact.

use std::cell::Cell;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use kube::client::{Body, Client};
use sentry_tenants::provision::ProvisionError;
use sentry_tenants::provision::outage::{OUTAGE_BUDGET, apiserver_ready, outlasting_api_outages};
use tokio::time::Instant;

fn unavailable() -> ProvisionError {
    ProvisionError::ApiUnavailable {
        action: "get tenant acme".into(),
        detail: "client error (Connect)".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_failed_by_an_unavailable_api_runs_again_once_the_apiserver_is_ready() {
    let started = Instant::now();
    let attempts = Cell::new(0);
    let asked = Cell::new(0);
    // The apiserver: not ready when first asked, then ready.
    let readiness = [false, true, true];
    let outcome = outlasting_api_outages(
        async || {
            asked.set(asked.get() + 1);
            readiness[asked.get() - 1]
        },
        async || {
            attempts.set(attempts.get() + 1);
            match attempts.get() {
                1 | 2 => Err(unavailable()),
                n => Ok(n),
            }
        },
    )
    .await;
    assert_eq!(
        outcome.unwrap(),
        3,
        "the third run is the one that went through"
    );
    assert_eq!(asked.get(), 3);
    // Waits of 1 s (not ready), 2 s (ready: run 2), 4 s (ready: run 3).
    assert_eq!(started.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn any_other_failure_is_the_run_s_outcome_at_once() {
    let started = Instant::now();
    let attempts = Cell::new(0);
    let outcome: Result<(), _> = outlasting_api_outages(
        async || panic!("readiness is asked only after an outage"),
        async || {
            attempts.set(attempts.get() + 1);
            Err(ProvisionError::Kubernetes {
                action: "get tenant acme".into(),
                detail: "forbidden".into(),
            })
        },
    )
    .await;
    assert!(matches!(outcome, Err(ProvisionError::Kubernetes { .. })));
    assert_eq!(attempts.get(), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn an_api_that_stays_unavailable_fails_the_run_within_the_budget_with_waits_growing_to_eight_seconds()
 {
    let started = Instant::now();
    let attempts = Cell::new(0u32);
    let outcome: Result<(), _> = outlasting_api_outages(
        // Says ready, fails every request all the same (a broken webhook, say).
        async || true,
        async || {
            attempts.set(attempts.get() + 1);
            assert!(attempts.get() <= 25, "the budget ends the outage");
            Err(unavailable())
        },
    )
    .await;
    let error = outcome.unwrap_err();
    assert!(error.is_api_unavailable(), "{error}");
    assert_eq!(OUTAGE_BUDGET, Duration::from_secs(180));
    // Runs at 0, 1, 3, 7 s, then every 8 s up to 175 s; one more wait would end past 180 s.
    assert_eq!(started.elapsed(), Duration::from_secs(175));
    assert_eq!(attempts.get(), 4 + 21);
}

/// A wait that ends exactly when the budget does is still waited, and the run tried once more.
#[tokio::test(start_paused = true)]
async fn a_run_may_start_again_at_the_budget_s_last_second() {
    let started = Instant::now();
    let attempts = Cell::new(0u32);
    let outcome: Result<(), _> = outlasting_api_outages(
        async || true,
        async || {
            attempts.set(attempts.get() + 1);
            if attempts.get() == 2 {
                // A long run that fails at 174 s: waits of 2 s (to 176) and 4 s (to 180) follow.
                tokio::time::sleep(Duration::from_secs(173)).await;
            }
            Err(unavailable())
        },
    )
    .await;
    assert!(outcome.is_err());
    assert_eq!(attempts.get(), 4, "runs at 0, 1, 176 and 180 s");
    assert_eq!(started.elapsed(), Duration::from_secs(180));
}

/// An apiserver stand-in that answers every request with `status`, and records the paths asked.
fn answering(status: u16, asked: Arc<Mutex<Vec<String>>>) -> Client {
    let service = tower::service_fn(move |req: Request<Body>| {
        asked.lock().unwrap().push(req.uri().path().to_owned());
        async move {
            let response = http::Response::builder()
                .status(status)
                .body(Body::from(b"ok".to_vec()))
                .unwrap();
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    Client::new(service, "default")
}

#[tokio::test]
async fn the_apiserver_is_ready_when_its_readyz_answers_ok() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    assert!(apiserver_ready(&answering(200, Arc::clone(&asked))).await);
    for not_ready in [500, 503, 403] {
        assert!(
            !apiserver_ready(&answering(not_ready, Arc::clone(&asked))).await,
            "{not_ready}"
        );
    }
    assert_eq!(*asked.lock().unwrap(), ["/readyz"; 4]);
}
