//! What tests on the real control plane share: a namespace of each test's own, install helpers, the
//! operator's code run in-process as its ServiceAccount on real watches, and turns: most tests share the
//! cluster, a test that restarts part of it runs alone.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use sentry_tenants::clock::Clock;
use sentry_tenants::config::OperatorConfig;
use sentry_tenants::controller::{Context, Stores, run_controllers};
use sentry_tenants::crd::RunJob;
use sentry_tenants::install::{InstallOptions, Progress, Values, install};
use sentry_tenants::telemetry::Metrics;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock, watch};

use crate::control_plane::{
    ControlPlane, client_from, control_plane, fresh_namespace, service_account_kubeconfig,
};

/// An image no registry serves: the kubelet leaves its pods waiting (`ErrImagePull`, then
/// `ImagePullBackOff`): the name does not resolve.
pub const IDLE_IMAGE: &str = "registry.invalid/sentry-tenants:idle";

/// The cluster, an admin client, a namespace of the test's own, and the test's turn on the cluster.
pub struct Setup {
    pub plane: &'static ControlPlane,
    pub admin: Client,
    pub ns: String,
    _turn: Turn,
}

/// Held for a whole test: shared by the tests that only use the cluster, exclusive for one that stops
/// a part of it (every other test would see its API calls fail meanwhile).
#[allow(dead_code)] // held, never read: dropping the guard ends the turn
enum Turn {
    Shared(OwnedRwLockReadGuard<()>),
    Alone(OwnedRwLockWriteGuard<()>),
    /// Within the turn of the test's first namespace.
    Within,
}

fn turns() -> Arc<RwLock<()>> {
    static TURNS: std::sync::LazyLock<Arc<RwLock<()>>> =
        std::sync::LazyLock::new(|| Arc::new(RwLock::new(())));
    Arc::clone(&TURNS)
}

/// A test that shares the cluster with the others running at the same time.
pub async fn setup(prefix: &str) -> Setup {
    let turn = Turn::Shared(turns().read_owned().await);
    setup_in_turn(prefix, turn).await
}

/// A test that has the cluster to itself: it waits for the running tests to end, and the next ones wait
/// for it (the lock is fair, so none overtakes it).
pub async fn setup_alone(prefix: &str) -> Setup {
    let turn = Turn::Alone(turns().write_owned().await);
    setup_in_turn(prefix, turn).await
}

async fn setup_in_turn(prefix: &str, turn: Turn) -> Setup {
    let plane = control_plane();
    let admin = plane.admin().await;
    let ns = fresh_namespace(&admin, prefix).await;
    Setup {
        plane,
        admin,
        ns,
        _turn: turn,
    }
}

/// A test that passed stops the operator pods it installed: the node's CPU is real, and each pod's
/// request holds a share of it until the pod is gone. The namespace and everything else in it stay (a
/// deleted namespace takes the RoleBindings before the pods, and the audit check would see a pod still
/// acting on its way out); a failed test leaves its pods running for inspection.
impl Drop for Setup {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "cluster tier: namespace {} kept as it was for inspection",
                self.ns
            );
            self.print_what_the_namespace_holds();
            return;
        }
        let (ok, _, err) = self.plane.kubectl(
            &[
                "delete",
                "deployments",
                "--all",
                "-n",
                &self.ns,
                "--wait=false",
            ],
            None,
        );
        assert!(ok, "stopping the operator pods of {}: {err}", self.ns);
    }
}

impl Setup {
    /// What a failed test's namespace holds, on stderr: a CI log is all there is to read after the
    /// machine is gone. The objects, the events in order, and the last lines of every operator and
    /// provisioner pod (and of the ones before a restart).
    fn print_what_the_namespace_holds(&self) {
        let ns = self.ns.as_str();
        let selector = "app.kubernetes.io/component in (operator,provisioner)";
        let asks: [&[&str]; 4] = [
            &["get", "tenants,runjobs,jobs,pods", "-o", "wide", "-n", ns],
            &["get", "events", "--sort-by=.lastTimestamp", "-n", ns],
            &["logs", "-l", selector, "--prefix", "--tail=40", "-n", ns],
            &[
                "logs",
                "-l",
                selector,
                "--prefix",
                "--tail=40",
                "--previous",
                "-n",
                ns,
            ],
        ];
        for args in asks {
            let (_, out, err) = self.plane.kubectl(args, None);
            eprintln!("cluster tier: kubectl {}\n{out}{err}", args.join(" "));
        }
    }

    /// A second namespace of the test's own, in the same turn (a second install, say).
    pub async fn another_namespace(&self, prefix: &str) -> Setup {
        setup_in_turn(prefix, Turn::Within).await
    }

    /// The ClickHouse database an install in this namespace gives `tenant` (the default prefix).
    pub fn ch_database(&self, tenant: &str) -> String {
        let name = sentry_tenants::names::TenantName::parse(tenant).expect("a valid tenant name");
        sentry_tenants::names::ClickHousePrefix::for_namespace(&self.ns).database(&name)
    }

    /// The ClickHouse user an install in this namespace gives `tenant`.
    pub fn ch_user(&self, tenant: &str) -> String {
        sentry_tenants::names::clickhouse_user(&self.ch_database(tenant))
    }

    /// The operator's settings for this namespace, its Jobs running the cluster's image of it.
    pub fn operator_config(&self) -> OperatorConfig {
        OperatorConfig {
            image: self.plane.image(),
            ..OperatorConfig::for_namespace(&self.ns)
        }
    }

    pub fn values(&self) -> Values {
        self.plane.install_values(&self.ns)
    }

    /// [`Self::values`] with an image the kubelet cannot pull.
    pub fn idle_values(&self) -> Values {
        Values {
            image: IDLE_IMAGE.to_owned(),
            ..self.values()
        }
        .validate()
        .expect("valid values")
    }

    /// `sentry-tenants run` itself, as a process of its own in the test's namespace, acting with
    /// `kubeconfig` (the operator's ServiceAccount) and provisioning against `clickhouse_url`; killed
    /// when the guard goes, `Owned::terminate` for its graceful shutdown.
    pub fn operator_process(
        &self,
        kubeconfig: &std::path::Path,
        clickhouse_url: &str,
        identity: &str,
    ) -> crate::processes::Owned {
        let binary = self.plane.project_binary();
        crate::processes::Owned::spawn(
            std::process::Command::new(&binary)
                .args(["run", "--namespace", &self.ns])
                .args(["--image", &self.plane.image()])
                .args(["--clickhouse-url", clickhouse_url, "--identity", identity])
                .args(["--probe-addr", "127.0.0.1:0"])
                .args(["--dashboard-addr", "127.0.0.1:0"])
                .env("KUBECONFIG", kubeconfig)
                .env("NO_COLOR", "1")
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::inherit()),
        )
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()))
    }

    /// `install` into the test's namespace with an image nobody can pull, so the operator's pods wait
    /// (`ErrImagePull`) instead of reconciling: for tests that run the operator's code in-process, or
    /// none at all, and must not share the namespace with a second operator.
    pub async fn install_idle(&self) {
        let opts = InstallOptions {
            wait: false,
            ..InstallOptions::default()
        };
        install(&self.admin, &self.idle_values(), &opts, &Progress::Quiet)
            .await
            .unwrap_or_else(|e| panic!("install into {}: {e}", self.ns));
    }

    /// `install` as a user would run it: the ClickHouse admin Secret first, then install, waiting
    /// for the operator's rollout (its pods run on the cluster's node).
    pub async fn install_with_clickhouse(&self, url: &str, admin: (&str, &str)) {
        self.install_replicas(url, admin, 1).await;
    }

    /// The ClickHouse admin Secret, as a person creates it before `install`.
    pub async fn create_admin_secret(&self, admin: (&str, &str)) {
        let secrets: Api<Secret> = Api::namespaced(self.admin.clone(), &self.ns);
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "clickhouse-admin"},
            "stringData": {"username": admin.0, "password": admin.1},
        }))
        .expect("a Secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create the admin Secret");
    }

    pub async fn install_replicas(&self, url: &str, admin: (&str, &str), replicas: u8) {
        let values = Values {
            clickhouse_url: url.to_owned(),
            replicas,
            ..self.values()
        };
        self.install_with(admin, values).await;
    }

    /// The admin Secret, then `install` of `values`, waiting for the rollout.
    pub async fn install_with(&self, admin: (&str, &str), values: Values) {
        self.create_admin_secret(admin).await;
        let values = values.validate().expect("valid values");
        let opts = InstallOptions {
            timeout: crate::PATIENCE,
            ..InstallOptions::default()
        };
        install(&self.admin, &values, &opts, &Progress::Quiet)
            .await
            .unwrap_or_else(|e| panic!("install into {}: {e}", self.ns));
    }

    /// `kubectl patch` of a tenant's `spec.suspended`, as a person at a terminal would.
    pub fn set_suspended(&self, tenant: &str, suspended: bool) {
        let patch = format!(r#"{{"spec":{{"suspended":{suspended}}}}}"#);
        let args = [
            "patch", "tenant", tenant, "-n", &self.ns, "--type", "merge", "-p", &patch,
        ];
        let (ok, _, err) = self.plane.kubectl(&args, None);
        assert!(ok, "kubectl patch refused: {err}");
    }

    /// `kubectl apply -n <ns> -f -` of `yaml`; panics with kubectl's message if refused.
    pub fn apply(&self, yaml: &str) {
        let (ok, _, err) = self
            .plane
            .kubectl(&["apply", "-n", &self.ns, "-f", "-"], Some(yaml));
        assert!(ok, "kubectl apply refused:\n{yaml}\n{err}");
    }

    /// Names of the RunJobs in the namespace now.
    pub async fn run_names(&self) -> Vec<String> {
        let runs: Api<RunJob> = Api::namespaced(self.admin.clone(), &self.ns);
        runs.list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("list runs in {}: {e}", self.ns))
            .items
            .iter()
            .map(|r| r.name_any())
            .collect()
    }

    /// A ServiceAccount of the namespace bound (RoleBinding, by kubectl) to the built-in `cluster_role`.
    pub fn account_bound_to(&self, account: &str, cluster_role: &str) {
        let role = format!("--clusterrole={cluster_role}");
        let subject = format!("--serviceaccount={}:{account}", self.ns);
        for args in [
            vec!["create", "serviceaccount", account, "-n", &self.ns],
            vec![
                "create",
                "rolebinding",
                account,
                &role,
                &subject,
                "-n",
                &self.ns,
            ],
        ] {
            let (ok, _, err) = self.plane.kubectl(&args, None);
            assert!(ok, "kubectl {args:?}: {err}");
        }
    }

    /// A client authenticated as one of the namespace's ServiceAccounts.
    pub async fn as_account(&self, account: &str) -> (Client, PathBuf) {
        let path = service_account_kubeconfig(self.plane, &self.admin, &self.ns, account).await;
        (client_from(&path).await, path)
    }

    /// Who holds the operator's leader Lease in this namespace, if anyone.
    pub async fn lease_holder(&self) -> Option<String> {
        self.holder_of(sentry_tenants::leader::LEASE_NAME).await
    }

    /// Who holds Lease `lease` in this namespace, if anyone.
    pub async fn holder_of(&self, lease: &str) -> Option<String> {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.admin.clone(), &self.ns);
        leases.get_opt(lease).await.ok()??.spec?.holder_identity
    }

    /// Successful creates of `resource` named `name` in this namespace, from the audit log.
    pub fn creates(&self, resource: &str, name: &str) -> usize {
        self.plane
            .audit_events()
            .iter()
            .filter(|e| e["verb"] == "create" && e["objectRef"]["resource"] == resource)
            .filter(|e| e["objectRef"]["namespace"] == self.ns.as_str())
            .filter(|e| e["objectRef"]["name"] == name && e["responseStatus"]["code"] == 201)
            .count()
    }

    /// When the Job controller first wrote that Job `name` in this namespace finished (a true
    /// `SuccessCriteriaMet`, `Complete` or `Failed` condition): the arrival of that status write, from the
    /// audit log, which logs these writes with their body (scripts/cluster.sh).
    pub fn job_finished_at(&self, name: &str) -> Option<jiff::Timestamp> {
        self.plane
            .audit_events()
            .iter()
            .filter(|e| {
                e["objectRef"]["resource"] == "jobs" && e["objectRef"]["subresource"] == "status"
            })
            .filter(|e| {
                e["objectRef"]["namespace"] == self.ns.as_str() && e["objectRef"]["name"] == name
            })
            .filter(|e| crate::control_plane::is_finishing_job_status(e))
            .filter_map(|e| e["requestReceivedTimestamp"].as_str()?.parse().ok())
            .min()
    }

    /// Fails on any request of our accounts in this namespace that the apiserver forbade.
    pub fn assert_no_forbidden(&self) {
        let forbidden = self.plane.forbidden_for_our_accounts(&self.ns);
        assert!(
            forbidden.is_empty(),
            "the RBAC we ship forbade: {forbidden:#?}"
        );
    }
}

/// A Manual Tenant as a person would write it for `kubectl apply` (the tests start its runs).
pub fn tenant(name: &str, suspended: bool) -> String {
    tenant_with(name, suspended, "Manual")
}

/// A Tenant with `spec.provisioning` set to `provisioning` ("Automatic" or "Manual").
pub fn tenant_with(name: &str, suspended: bool, provisioning: &str) -> String {
    format!(
        "apiVersion: sentry.io/v1alpha1\nkind: Tenant\nmetadata:\n  name: {name}\nspec:\n  suspended: {suspended}\n  provisioning: {provisioning}\n"
    )
}

/// A Provision RunJob for `tenant`, cleaned up `ttl` seconds after it finished.
pub fn provision_run(name: &str, tenant: &str, ttl: u32) -> String {
    format!(
        "apiVersion: sentry.io/v1alpha1\nkind: RunJob\nmetadata:\n  name: {name}\nspec:\n  tenant: {tenant}\n  action: Provision\n  ttlSecondsAfterFinished: {ttl}\n"
    )
}

/// Tenants `names`, each with its Provision run `<name>-provision-1`, as one `kubectl apply` document.
pub fn tenants_with_provision_runs(names: &[String], ttl: u32) -> String {
    names
        .iter()
        .map(|n| {
            format!(
                "{}---\n{}",
                tenant(n, false),
                provision_run(&format!("{n}-provision-1"), n, ttl)
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The operator's context as its ServiceAccount, leading, with caches no watch fills: for tests that
/// call a reconcile themselves, with exactly the object they hand it.
pub async fn operator_context(setup: &Setup) -> Arc<Context> {
    let (client, _) = setup.as_account("sentry-tenants").await;
    let (stores, _writers) = Stores::shared();
    let (_, leader) = watch::channel(true);
    Arc::new(Context::new(
        client,
        setup.operator_config(),
        stores,
        Arc::new(Metrics::default()),
        Clock::System,
        leader,
    ))
}

/// Both controllers running in-process as the operator's ServiceAccount, on real watches.
pub struct Operator {
    pub ctx: Arc<Context>,
    pub leader: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Operator {
    pub async fn start(setup: &Setup) -> Self {
        Self::start_leading(setup, true).await
    }

    /// With `leading: false` the caches follow the cluster but nothing reconciles (the installed
    /// operator's pod does): what a replica that lost the election serves its dashboard from.
    pub async fn start_leading(setup: &Setup, leading: bool) -> Self {
        let (client, _) = setup.as_account("sentry-tenants").await;
        let (stores, writers) = Stores::shared();
        let (leader, leader_rx) = watch::channel(leading);
        let ctx = Arc::new(Context::new(
            client,
            setup.operator_config(),
            stores,
            Arc::new(Metrics::default()),
            Clock::System,
            leader_rx,
        ));
        let (stop, mut stop_rx) = watch::channel(false);
        let shutdown = futures::FutureExt::shared(Box::pin(async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        }));
        let task = tokio::spawn(run_controllers(Arc::clone(&ctx), writers, shutdown));
        tokio::time::timeout(crate::PATIENCE, ctx.stores.wait_until_ready())
            .await
            .expect("the operator's caches to sync from their first lists");
        Self {
            ctx,
            leader,
            stop,
            task,
        }
    }

    /// The dashboard's router over this operator's caches and client, as `run` serves it.
    pub fn dashboard(&self) -> axum::Router {
        use sentry_tenants::web::actions::Actions;
        use sentry_tenants::web::backend::ClusterBackend;
        use sentry_tenants::web::dashboard::{Dashboard, router};
        use sentry_tenants::web::permissions::Permissions;
        use sentry_tenants_app::model::Allowed;
        let stores = self.ctx.stores.clone();
        let namespace = self.ctx.config.shared.namespace.clone();
        router(Dashboard {
            backend: Arc::new(ClusterBackend {
                client: self.ctx.client.clone(),
                stores: stores.clone(),
                namespace: namespace.clone(),
                permissions: Permissions::fixed(Allowed::ALL),
                acting_as: sentry_tenants::web::actions::ActingAs::Operator,
                clock: Clock::System,
                leader: Default::default(),
                rows: Some(Default::default()),
            }),
            actions: Arc::new(Actions {
                client: self.ctx.client.clone(),
                stores: stores.clone(),
                namespace,
                acting_as: sentry_tenants::web::actions::ActingAs::Operator,
            }),
            changes: stores.changes.subscribe(),
            read_only: false,
            allowed_hosts: sentry_tenants::web::hosts::AllowedHosts::new(&[]),
            shutdown: self.stop.subscribe(),
            keep_fragments: true,
        })
    }

    /// A dashboard action's form post, as the browser sends it from the dashboard's own page; panics
    /// unless it redirects back without an error.
    pub async fn act(&self, path: &str, form: &str) {
        use tower::ServiceExt;
        let session = crate::dashboard::session_of(self.dashboard()).await;
        let form = crate::dashboard::with_session(form, &session);
        let request = http::Request::post(path)
            .header(http::header::HOST, "127.0.0.1:8080")
            .header(http::header::ORIGIN, "http://127.0.0.1:8080")
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(axum::body::Body::from(form))
            .expect("a request");
        let reply = self.dashboard().oneshot(request).await.expect("a reply");
        assert_eq!(reply.status(), http::StatusCode::SEE_OTHER, "POST {path}");
        let location = reply.headers()[http::header::LOCATION]
            .to_str()
            .expect("a location");
        assert!(
            !location.contains("error="),
            "POST {path} failed: {location}"
        );
    }

    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}
