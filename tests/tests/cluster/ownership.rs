//! Installs sharing one ClickHouse server, each with a Tenant `acme` (reclaimPolicy Delete), on the
//! real control plane: each operator and its provisioning Jobs as the node runs them in containers.
//! Installs in two namespaces get two name prefixes, so their `acme`s have names of their own. An
//! install given another's prefix (as two clusters' installs would be if nobody passed
//! `--clickhouse-prefix`) derives the same names, and the owner marks alone keep it off the first's
//! user and database.

use kube::api::Api;
use sentry_tenants::crd::{RunJob, RunPhase, Tenant, TenantPhase};
use sentry_tenants::install::Values;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;
use sentry_tenants_tests::cluster_tier::Setup;
use sentry_tenants_tests::control_plane::{wait_gone, wait_until};

use crate::provision::{password, tenant_in_phase};
use crate::setup;

const ADMIN: (&str, &str) = ("ch-admin", "ch-admin-password");

const ACME_DELETE: &str = "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: acme\nspec:\n  reclaimPolicy: Delete\n";

async fn delete_acme(s: &Setup) {
    let (ok, _, err) = s.plane.kubectl(
        &["delete", "tenant", "acme", "-n", &s.ns, "--wait=false"],
        None,
    );
    assert!(ok, "{err}");
    wait_gone(&Api::<Tenant>::namespaced(s.admin.clone(), &s.ns), "acme").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installs_sharing_one_clickhouse_never_touch_each_others_tenant_of_the_same_name() {
    let first = setup("owner-first").await;
    let second = first.another_namespace("owner-second").await;
    let third = first.another_namespace("owner-third").await;
    let ch = ClickHouseStandIn::start(&first.plane.host_address(), ADMIN.0, ADMIN.1).await;
    first.install_with_clickhouse(&ch.url, ADMIN).await;
    second.install_with_clickhouse(&ch.url, ADMIN).await;
    let first_prefix = first.ch_database("acme").replace("_acme", "");
    let same_prefix = Values {
        clickhouse_url: ch.url.clone(),
        clickhouse_prefix: first_prefix,
        ..third.values()
    };
    third.install_with(ADMIN, same_prefix).await;

    first.apply(ACME_DELETE);
    let theirs = tenant_in_phase(&first, "acme", TenantPhase::Active).await;
    let their_password = password(&first, "acme").await;
    let (their_user, their_database) = (first.ch_user("acme"), first.ch_database("acme"));
    assert!(ch.may_log_in(&their_user, &their_password));

    // The second install's acme has names of its own: both are Active.
    second.apply(ACME_DELETE);
    tenant_in_phase(&second, "acme", TenantPhase::Active).await;
    let (second_user, second_database) = (second.ch_user("acme"), second.ch_database("acme"));
    assert_ne!(second_database, their_database);
    assert!(ch.has_database(&second_database));
    assert!(ch.may_log_in(&second_user, &password(&second, "acme").await));

    // The third install's acme has the first's names: its Provision run refuses, naming the owner.
    third.apply(ACME_DELETE);
    let owner = format!(
        "belongs to Tenant {}/acme (uid {})",
        first.ns,
        theirs.metadata.uid.as_deref().unwrap()
    );
    let runs: Api<RunJob> = Api::namespaced(third.admin.clone(), &third.ns);
    let said = wait_until("the third acme's Provision run to fail", async || {
        let listed = runs.list(&Default::default()).await.ok()?;
        listed
            .items
            .iter()
            .find(|r| r.phase() == Some(RunPhase::Failed))
            .and_then(|r| r.status.as_ref()?.message.clone())
    })
    .await;
    assert!(said.contains(&owner), "{said}");
    let tenants: Api<Tenant> = Api::namespaced(third.admin.clone(), &third.ns);
    assert_ne!(
        tenants.get("acme").await.unwrap().phase(),
        Some(TenantPhase::Active)
    );

    // Deleting the other two (Delete policy) drops the second's own objects and nothing of the first's.
    delete_acme(&third).await;
    delete_acme(&second).await;
    assert!(!ch.has_user(&second_user) && !ch.has_database(&second_database));
    assert!(ch.has_user(&their_user) && ch.has_database(&their_database));
    assert_eq!(ch.is_locked(&their_user), Some(false));
    assert!(
        ch.may_log_in(&their_user, &their_password),
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
    for s in [&first, &second, &third] {
        s.assert_no_forbidden();
    }
}
