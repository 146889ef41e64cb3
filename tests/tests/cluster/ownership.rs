//! Two installs sharing one ClickHouse server, each with a Tenant `acme` (reclaimPolicy Delete), on the
//! real control plane: each operator and its provisioning Jobs as the node runs them in containers. The
//! ClickHouse names of `acme` are the same for both, so the owner marks alone keep the second install
//! off the first's user and database.

use kube::api::Api;
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};

use crate::provision::{password, tenant_in_phase};
use crate::setup;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

const ACME_DELETE: &str = "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  reclaimPolicy: Delete\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_install_never_touches_the_first_installs_tenant_of_the_same_name() {
    let first = setup("owner-first").await;
    let second = first.another_namespace("owner-second").await;
    let ch = ClickHouseStandIn::start(&first.plane.host_address(), ADMIN.0, ADMIN.1).await;
    first.install_with_clickhouse(&ch.url, ADMIN).await;
    second.install_with_clickhouse(&ch.url, ADMIN).await;

    first.apply(ACME_DELETE);
    let theirs = tenant_in_phase(&first, "acme", TenantPhase::Active).await;
    let their_password = password(&first, "acme").await;
    assert!(ch.may_log_in("tenant_acme_user", &their_password));

    // The second install's acme: its Provision run refuses, naming the owner it found.
    second.apply(ACME_DELETE);
    let owner = format!(
        "belongs to Tenant {}/acme (uid {})",
        first.ns,
        theirs.metadata.uid.as_deref().unwrap()
    );
    let tenants: Api<Tenant> = Api::namespaced(second.admin.clone(), &second.ns);
    let runs: Api<RunJob> = Api::namespaced(second.admin.clone(), &second.ns);
    let said = wait_until("the second acme's Provision run to fail", async || {
        let listed = runs.list(&Default::default()).await.ok()?;
        listed
            .items
            .iter()
            .find(|r| r.phase() == Some(RunPhase::Failed))
            .and_then(|r| r.status.as_ref()?.message.clone())
    })
    .await;
    assert!(said.contains(&owner), "{said}");
    assert_ne!(
        tenants.get("acme").await.unwrap().phase(),
        Some(TenantPhase::Active)
    );

    // Deleting it (Delete policy) drops nothing of the first's.
    let (ok, _, err) = second.plane.kubectl(
        &["delete", "tenant", "acme", "-n", &second.ns, "--wait=false"],
        None,
    );
    assert!(ok, "{err}");
    wait_gone(&tenants, "acme").await;
    assert!(ch.has_user("tenant_acme_user") && ch.has_database("tenant_acme"));
    assert_eq!(ch.is_locked("tenant_acme_user"), Some(false));
    assert!(
        ch.may_log_in("tenant_acme_user", &their_password),
        "the first install's acme still logs in"
    );
    assert_eq!(
        tenant_in_phase(&first, "acme", TenantPhase::Active)
            .await
            .metadata
            .uid,
        theirs.metadata.uid
    );
    assert!(ch.refused().is_empty(), "chdb refused: {:?}", ch.refused());
    first.assert_no_forbidden();
    second.assert_no_forbidden();
}
