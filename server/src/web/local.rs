//! `dashboard --local`: the same dashboard, served by the CLI on this machine with the person's own
//! kubeconfig and context. It keeps its own watches on the namespace, every action is made with the
//! person's credentials (their RBAC decides, the API server's audit log names them), and a page shows
//! only the buttons a SelfSubjectAccessReview says they may use.

use std::sync::Arc;

use anyhow::Context as _;
use kube::Client;
use tokio::sync::watch;

use super::actions::{ActingAs, Actions};
use super::backend::ClusterBackend;
use super::dashboard::{Dashboard, router};
use super::hosts::AllowedHosts;
use super::permissions::{Permissions, may_in_group, who_am_i};
use super::serve::{Limits, serve};
use crate::clock::Clock;
use crate::controller::{Cache, Stores, watch_caches};

/// What the pages are read from: without `list` and `watch` on these there is nothing to show.
const WATCHED: [(&str, &str); 2] = [
    (crate::crd::GROUP, "tenants"),
    (crate::crd::GROUP, "runjobs"),
];

pub async fn serve_local(
    client: Client,
    namespace: &str,
    listener: tokio::net::TcpListener,
    on_listening: impl FnOnce(&str),
) -> anyhow::Result<()> {
    crate::cluster::ensure_crds_installed(&client, namespace).await?;
    for (group, resource) in WATCHED {
        for verb in ["list", "watch"] {
            if matches!(
                may_in_group(&client, namespace, group, (verb, resource)).await,
                Ok(false)
            ) {
                anyhow::bail!(
                    "you may not {verb} {resource} in {namespace}: the dashboard shows what you may read (ask for the view role, or use `sentry-tenants dashboard`)"
                );
            }
        }
    }
    // Jobs only add a run's Job state to its page; a person who may not read them still gets the rest.
    let watch_jobs = !matches!(
        may_in_group(&client, namespace, "batch", ("watch", "jobs")).await,
        Ok(false)
    );
    if !watch_jobs {
        eprintln!(
            "note: you may not watch jobs in {namespace}: run pages will not show their Job's state"
        );
    }

    let (stores, writers) = Stores::shared();
    // The markers of credentials Secrets serve the reconciler alone, which does not run here.
    stores.synced.mark(Cache::Markers);
    let jobs = watch_jobs.then_some(writers.jobs);
    tokio::spawn(watch_caches(
        client.clone(),
        namespace,
        &stores,
        (writers.tenants, writers.runjobs, jobs),
    ));
    eprintln!("Reading the tenants and runs in {namespace}…");
    tokio::select! {
        _ = stores.wait_until_ready() => {}
        _ = crate::signals::shutdown_signal() => return Ok(()),
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let who = who_am_i(&client)
        .await
        .unwrap_or_else(|| "your kubeconfig's user".to_owned());
    let acting_as = ActingAs::Person(who.clone());
    let permissions =
        Permissions::reviewed(client.clone(), namespace.to_owned(), shutdown_rx.clone()).await;
    let dashboard = router(Dashboard {
        backend: Arc::new(ClusterBackend {
            client: client.clone(),
            stores: stores.clone(),
            namespace: namespace.to_owned(),
            permissions,
            acting_as: acting_as.clone(),
            clock: Clock::System,
            leader: Default::default(),
            rows: Some(Default::default()),
        }),
        actions: Arc::new(Actions {
            client,
            stores: stores.clone(),
            namespace: namespace.to_owned(),
            acting_as,
        }),
        changes: stores.changes.subscribe(),
        read_only: false,
        allowed_hosts: AllowedHosts::new(&[]),
        shutdown: shutdown_rx.clone(),
        keep_fragments: true,
    });

    let url = format!(
        "http://127.0.0.1:{}/",
        listener
            .local_addr()
            .context("the listener's address")?
            .port()
    );
    eprintln!("Dashboard: {url}  (acting as {who} in namespace {namespace}; Ctrl-C to stop)");
    on_listening(&url);
    let server = tokio::spawn(serve(listener, dashboard, Limits::default(), shutdown_rx));
    crate::signals::shutdown_signal().await;
    shutdown_tx.send_replace(true);
    let _ = server.await;
    Ok(())
}
