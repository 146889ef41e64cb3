//! Install: API requests `install` makes per object it applies, on a first install and on a re-run,
//! against the in-memory API (with the harness playing the Deployment controller).

use std::time::Duration;

use http::Method;
use sentry_tenants::install::{InstallOptions, Progress, install};
use sentry_tenants_tests::{Cluster, NS, Recorded, install_values};

use crate::figure;
use crate::report::{Goal, Section};

pub async fn measure() -> Section {
    let c = Cluster::new().await;
    let values = install_values(NS);
    let opts = InstallOptions {
        poll: Duration::from_millis(50),
        timeout: Duration::from_secs(30),
        ..InstallOptions::default()
    };
    let mut figures = Vec::new();
    for label in ["first install", "re-run (upgrade with no change)"] {
        c.log.clear();
        let report = tokio::select! {
            report = install(&c.client, &values, &opts, &Progress::Quiet) => report,
            () = c.play_deployment_controller() => unreachable!("plays the controller until the install ends"),
        };
        let report = report.expect("install succeeds");
        let log = c.log.all();
        let objects = report.applied.len() as f64;
        figures.push(
            figure(
                format!("{label}: API requests per object applied"),
                log.len() as f64 / objects,
                "requests",
            )
            .goal(Goal::AtMost(1.2))
            .note(format!(
                "{} requests for {objects} objects: {}",
                log.len(),
                by_method(&log)
            ))
            .why_missed(PRUNE_LISTS_KEPT),
        );
    }
    Section::new("Install", figures).remark(
        "Every request counts: server-side applies, the reads that wait for the CRDs to be Established \
         and for the rollout, and the lists that find objects to prune.",
    )
}

const PRUNE_LISTS_KEPT: &str = "the lists are the prune sweep, one label-selected list per kind an install \
    creates (6 namespaced kinds and CRDs). Kept on purpose: it finds what an interrupted or older install left, \
    which an inventory of the last install would miss. The waits already read the apply answers, so a re-run costs \
    no extra GET for an Established CRD or an unchanged Deployment; without the sweep it would be 13 requests (1.08)";

fn by_method(log: &[Recorded]) -> String {
    let count = |m: &Method, list: bool| {
        log.iter()
            .filter(|r| r.method == *m && (r.method != Method::GET || list == is_list(r)))
            .count()
    };
    format!(
        "{} applies (PATCH), {} gets, {} lists, {} other",
        count(&Method::PATCH, false),
        count(&Method::GET, false),
        count(&Method::GET, true),
        log.iter()
            .filter(|r| r.method != Method::PATCH && r.method != Method::GET)
            .count()
    )
}

/// A GET of a collection rather than of one object.
fn is_list(r: &Recorded) -> bool {
    let segments = r.path.trim_matches('/').split('/').count();
    let namespaced = r.path.contains("/namespaces/");
    // /api/v1/namespaces/{ns}/{resource} or /apis/{group}/{version}/namespaces/{ns}/{resource}
    let core = r.path.starts_with("/api/");
    match (core, namespaced) {
        (true, true) => segments == 5,
        (false, true) => segments == 6,
        (true, false) => segments == 3,
        (false, false) => segments == 4,
    }
}
