//! `check`: preflight (`--pre`) and post-install health, as ✓/✗ lines with a hint for every ✗.

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::monitoring::MONITORING_CRDS;
use super::{DEPLOYMENT, SHARD_DEPLOYMENTS};
use crate::leader::LEASE_NAME;

/// Oldest Kubernetes we support: CRD validation rules (CEL) are GA from 1.29, and we test the
/// Kubernetes 1.32 API types.
pub const MIN_KUBERNETES: (u32, u32) = (1, 30);

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckLine {
    pub ok: bool,
    pub what: String,
    pub hint: Option<String>,
}

impl CheckLine {
    fn pass(what: impl Into<String>) -> Self {
        Self {
            ok: true,
            what: what.into(),
            hint: None,
        }
    }
    fn fail(what: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            ok: false,
            what: what.into(),
            hint: Some(hint.into()),
        }
    }
    /// The line about shard `shard`'s part.
    fn for_shard(self, shard: &str) -> Self {
        Self {
            what: format!("shard {shard}: {}", self.what),
            ..self
        }
    }
}

impl fmt::Display for CheckLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.hint {
            None => write!(f, "✓ {}", self.what),
            Some(hint) => write!(f, "✗ {}\n    hint: {hint}", self.what),
        }
    }
}

const UNREACHABLE_HINT: &str = "check the current kubeconfig context (kubectl config current-context) and that the cluster is up";

/// Before install: can we reach the cluster, is it new enough, may we create what install creates,
/// and is the ClickHouse admin Secret `admin_secret` there for the provisioning Jobs?
pub async fn preflight(
    client: &Client,
    namespace: &str,
    admin_secret: &str,
    monitoring: bool,
) -> Vec<CheckLine> {
    let mut out = Vec::new();
    match client.apiserver_version().await {
        Ok(info) => {
            out.push(CheckLine::pass(format!(
                "Kubernetes API reachable ({})",
                info.git_version
            )));
            out.push(version_line(&info.major, &info.minor, &info.git_version));
        }
        Err(e) => {
            out.push(CheckLine::fail(
                crate::cluster::describe("reach the Kubernetes API", &e),
                UNREACHABLE_HINT,
            ));
            return out;
        }
    }
    let reviews = [
        (
            "create",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            None,
        ),
        ("create", "", "namespaces", None),
        (
            "create",
            "rbac.authorization.k8s.io",
            "roles",
            Some(namespace),
        ),
        (
            "create",
            "rbac.authorization.k8s.io",
            "rolebindings",
            Some(namespace),
        ),
        ("create", "", "serviceaccounts", Some(namespace)),
        ("create", "apps", "deployments", Some(namespace)),
        // The two consent ClusterRoles (manifests/credentials.yaml).
        ("create", "rbac.authorization.k8s.io", "clusterroles", None),
    ];
    for (verb, group, resource, ns) in reviews {
        out.push(access_line(client, verb, group, resource, ns).await);
    }
    if monitoring {
        out.extend(monitoring_lines(client, namespace).await);
    }
    out.push(admin_secret_line(client, namespace, admin_secret).await);
    out
}

/// What `install --monitoring` needs: per Prometheus Operator kind, the permission to create its
/// objects where the cluster has its CRD — where it has none, install leaves them out, which is no
/// failure — and the permission to create the Grafana dashboard's ConfigMap.
async fn monitoring_lines(client: &Client, namespace: &str) -> Vec<CheckLine> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::new();
    for (group, _, kind, crd) in MONITORING_CRDS {
        let resource = crd.split_once('.').map_or(*crd, |(plural, _)| plural);
        out.push(match crds.get_opt(crd).await {
            Ok(Some(_)) => access_line(client, "create", group, resource, Some(namespace)).await,
            Ok(None) => CheckLine::pass(format!(
                "no {kind} CRD ({crd}, the Prometheus Operator's): install --monitoring leaves the {kind} out; \
                 run it again once the CRD is installed"
            )),
            Err(e) => CheckLine::fail(
                crate::cluster::describe(&format!("read the CRD {crd}"), &e),
                "check your account",
            ),
        });
    }
    out.push(access_line(client, "create", "", "configmaps", Some(namespace)).await);
    out
}

/// The keys the provisioning Jobs read from the ClickHouse admin Secret.
pub const ADMIN_SECRET_KEYS: [&str; 2] = ["username", "password"];

/// Whether the ClickHouse admin Secret exists with both keys, non-empty. Only key names are looked
/// at and reported, never values.
pub async fn admin_secret_line(client: &Client, namespace: &str, name: &str) -> CheckLine {
    let what = format!("ClickHouse admin Secret {namespace}/{name}");
    let create = format!(
        "create it (kubectl -n {namespace} create secret generic {name} --from-literal=username=… \
         --from-literal=password=…), or let install create it: --clickhouse-admin-password-stdin"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets.get_opt(name).await {
        Ok(Some(secret)) => {
            let missing = missing_admin_keys(&secret);
            if missing.is_empty() {
                CheckLine::pass(format!("{what} has the keys username and password"))
            } else {
                CheckLine::fail(
                    format!("{what} lacks the keys {}", missing.join(", ")),
                    format!("add them: kubectl -n {namespace} edit secret {name}"),
                )
            }
        }
        Ok(None) => CheckLine::fail(format!("{what} does not exist"), create),
        Err(e) => CheckLine::fail(
            crate::cluster::describe(&format!("get Secret {namespace}/{name}"), &e),
            match e {
                kube::Error::Api(_) => {
                    "the provisioning Jobs read this Secret; an account that may read it can check it"
                }
                _ => UNREACHABLE_HINT,
            },
        ),
    }
}

/// The Secret of `--image-pull-secret`: present, and of the type the kubelet reads pull credentials
/// from.
pub async fn pull_secret_line(client: &Client, namespace: &str, name: &str) -> CheckLine {
    const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
    let what = format!("image pull Secret {namespace}/{name}");
    let create = format!(
        "create it: kubectl -n {namespace} create secret docker-registry {name} --docker-server=<registry> \
         --docker-username=<user> --docker-password=<password> (an account that may pull, not push)"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets.get_opt(name).await {
        Ok(Some(secret)) if secret.type_.as_deref() == Some(DOCKER_CONFIG_JSON) => {
            CheckLine::pass(format!("{what} is a {DOCKER_CONFIG_JSON} Secret"))
        }
        Ok(Some(secret)) => CheckLine::fail(
            format!(
                "{what} is of type {}, not {DOCKER_CONFIG_JSON}",
                secret.type_.as_deref().unwrap_or("Opaque")
            ),
            create,
        ),
        Ok(None) => CheckLine::fail(format!("{what} does not exist"), create),
        Err(e) => CheckLine::fail(
            crate::cluster::describe(&format!("get Secret {namespace}/{name}"), &e),
            UNREACHABLE_HINT,
        ),
    }
}

/// The CA ConfigMap of `--clickhouse-ca-configmap`: present, with a `ca.crt` holding at least one
/// PEM certificate (what the provisioner will trust).
pub async fn ca_configmap_line(client: &Client, namespace: &str, name: &str) -> CheckLine {
    use k8s_openapi::api::core::v1::ConfigMap;
    let key = crate::controller::job::CA_KEY;
    let what = format!("ClickHouse CA ConfigMap {namespace}/{name}");
    let create = format!(
        "create it: kubectl -n {namespace} create configmap {name} --from-file={key}=<your CA bundle>.pem"
    );
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match maps.get_opt(name).await {
        Ok(Some(map)) => {
            let pem = map.data.as_ref().and_then(|d| d.get(key));
            match pem.map(|p| crate::tls::pem_certificates(p.as_bytes())) {
                Some(Ok(n)) => CheckLine::pass(format!("{what} has {n} certificate(s) in {key}")),
                Some(Err(e)) => CheckLine::fail(format!("{what}: {key} is unusable: {e}"), create),
                None => CheckLine::fail(format!("{what} has no key {key}"), create),
            }
        }
        Ok(None) => CheckLine::fail(format!("{what} does not exist"), create),
        Err(e) => CheckLine::fail(
            crate::cluster::describe(&format!("get ConfigMap {namespace}/{name}"), &e),
            UNREACHABLE_HINT,
        ),
    }
}

/// The admin keys `secret` lacks or holds empty, in [`ADMIN_SECRET_KEYS`] order.
pub fn missing_admin_keys(secret: &Secret) -> Vec<&'static str> {
    let has = |key: &str| {
        let in_data = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .is_some_and(|v| !v.0.is_empty());
        let in_string_data = secret
            .string_data
            .as_ref()
            .and_then(|d| d.get(key))
            .is_some_and(|v| !v.is_empty());
        in_data || in_string_data
    };
    ADMIN_SECRET_KEYS
        .into_iter()
        .filter(|key| !has(key))
        .collect()
}

fn version_line(major: &str, minor: &str, git: &str) -> CheckLine {
    let num = |s: &str| s.trim_end_matches('+').parse::<u32>().ok();
    match (num(major), num(minor)) {
        (Some(ma), Some(mi)) if (ma, mi) >= MIN_KUBERNETES => CheckLine::pass(format!(
            "Kubernetes {git} is supported (>= {}.{})",
            MIN_KUBERNETES.0, MIN_KUBERNETES.1
        )),
        _ => CheckLine::fail(
            format!(
                "Kubernetes {git} is older than {}.{}",
                MIN_KUBERNETES.0, MIN_KUBERNETES.1
            ),
            "upgrade the cluster: the CRDs use validation rules and the operator is built against the 1.32 API",
        ),
    }
}

async fn access_line(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    ns: Option<&str>,
) -> CheckLine {
    let scope = ns.map(|n| format!(" in namespace {n}")).unwrap_or_default();
    let what = format!("may {verb} {resource}{scope}");
    match crate::cluster::access_review(client, ns, group, (verb, resource)).await {
        Ok(status) if status.allowed => CheckLine::pass(what),
        Ok(status) => {
            let reason = status.reason.filter(|s| !s.is_empty());
            CheckLine::fail(
                format!(
                    "{what}: denied{}",
                    reason.map(|r| format!(" ({r})")).unwrap_or_default()
                ),
                "install needs a cluster-admin-like account once (CRDs and RBAC); ask your cluster admin or use one",
            )
        }
        Err(e) => CheckLine::fail(
            crate::cluster::describe(&format!("review access to {verb} {resource}"), &e),
            "check your account",
        ),
    }
}

/// What `version` reports of an install: the operator Deployment's version label, image and replicas.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    pub namespace: String,
    pub version: String,
    pub image: String,
    pub replicas: i32,
    pub available_replicas: i32,
}

/// The install in `namespace`, or `None` when no operator Deployment is there.
pub async fn installed(client: &Client, namespace: &str) -> Result<Option<Installed>, kube::Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(deployments.get_opt(DEPLOYMENT).await?.map(|d| Installed {
        namespace: namespace.to_owned(),
        version: d
            .labels()
            .get("app.kubernetes.io/version")
            .cloned()
            .unwrap_or_default(),
        image: d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default(),
        replicas: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        available_replicas: d
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0),
    }))
}

/// After install: CRDs established, operator available, a fresh leader, and the same version as this CLI.
pub async fn post_install(
    client: &Client,
    namespace: &str,
    cli_version: &str,
    now: Timestamp,
) -> Vec<CheckLine> {
    let mut out = Vec::new();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crate::crd::crds() {
        let name = crd.name_any();
        out.push(match crds.get_opt(&name).await {
            Ok(Some(live)) if established(&live) => {
                CheckLine::pass(format!("CRD {name} is established"))
            }
            Ok(Some(_)) => CheckLine::fail(
                format!("CRD {name} is not established"),
                format!("kubectl describe crd {name}"),
            ),
            Ok(None) => CheckLine::fail(
                format!("CRD {name} is missing"),
                "run `sentry-tenants install`",
            ),
            Err(e) => CheckLine::fail(
                crate::cluster::describe(&format!("get CRD {name}"), &e),
                "check your kubeconfig",
            ),
        });
    }
    match installed(client, namespace).await {
        Ok(Some(Installed {
            version: installed,
            replicas: want,
            available_replicas: available,
            ..
        })) => {
            out.push(availability_line(
                "operator Deployment",
                (namespace, DEPLOYMENT),
                available,
                want,
            ));
            out.push(if installed == cli_version {
                CheckLine::pass(format!("installed version {installed} matches this CLI"))
            } else {
                CheckLine::fail(
                    format!("installed version {installed:?} differs from this CLI ({cli_version})"),
                    "run `sentry-tenants install` with this CLI to upgrade (or use the CLI of the installed version)",
                )
            });
        }
        Ok(None) => out.push(CheckLine::fail(
            format!("operator Deployment {namespace}/sentry-tenants is missing"),
            "run `sentry-tenants install`",
        )),
        Err(e) => out.push(CheckLine::fail(
            crate::cluster::describe("get the operator Deployment", &e),
            "check your kubeconfig",
        )),
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    out.push(match leases.get_opt(LEASE_NAME).await {
        Ok(Some(lease)) => lease_line(&lease, now),
        Ok(None) => CheckLine::fail(
            "no leader has been elected yet",
            format!("kubectl -n {namespace} logs deploy/sentry-tenants"),
        ),
        Err(e) => CheckLine::fail(
            crate::cluster::describe("get the leader Lease", &e),
            "check your kubeconfig",
        ),
    });
    out.extend(shard_lines(client, namespace, now).await);
    out
}

/// For each shard of a sharded install: its Deployment available, its Lease held and fresh.
async fn shard_lines(client: &Client, namespace: &str, now: Timestamp) -> Vec<CheckLine> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let shards = match deployments
        .list(&ListParams::default().labels(SHARD_DEPLOYMENTS))
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            let what = crate::cluster::describe("list the shards' Deployments", &e);
            return vec![CheckLine::fail(what, "check your kubeconfig")];
        }
    };
    let mut out = Vec::new();
    for d in shards {
        let name = d.name_any();
        let shard = d
            .labels()
            .get(crate::labels::SHARD)
            .cloned()
            .unwrap_or_default();
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let available = (d.status.as_ref())
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        let what = format!("shard {shard}: Deployment");
        out.push(availability_line(
            &what,
            (namespace, &name),
            available,
            want,
        ));
        let lease = crate::leader::shard_lease(&shard);
        out.push(match leases.get_opt(&lease).await {
            Ok(Some(lease)) => lease_line(&lease, now).for_shard(&shard),
            Ok(None) => CheckLine::fail(
                format!("shard {shard}: no leader has been elected yet"),
                format!("kubectl -n {namespace} logs deploy/{name}"),
            ),
            Err(e) => CheckLine::fail(
                crate::cluster::describe(&format!("get the Lease {lease}"), &e),
                "check your kubeconfig",
            ),
        });
    }
    out
}

/// Whether Deployment `name` has all the replicas it wants available, and where to look if not.
fn availability_line(
    what: &str,
    (namespace, name): (&str, &str),
    available: i32,
    want: i32,
) -> CheckLine {
    if available >= want && want > 0 {
        CheckLine::pass(format!("{what} available ({available}/{want})"))
    } else {
        CheckLine::fail(
            format!("{what} not available ({available}/{want})"),
            format!(
                "kubectl -n {namespace} describe deployment {name}; kubectl -n {namespace} logs deploy/{name}"
            ),
        )
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

fn lease_line(lease: &Lease, now: Timestamp) -> CheckLine {
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    let fresh = spec
        .renew_time
        .is_some_and(|t| t.0.checked_add(duration).is_ok_and(|until| until >= now));
    if !holder.is_empty() && fresh {
        CheckLine::pass(format!("leader {holder} holds a fresh Lease"))
    } else if holder.is_empty() {
        CheckLine::fail(
            "the leader Lease is not held",
            "the operator pods are not running or cannot renew: check their logs",
        )
    } else {
        CheckLine::fail(
            format!("the leader Lease held by {holder} is stale"),
            "the leader stopped renewing: check the operator pods' logs",
        )
    }
}

/// Exit status of a check: success only when every line passed.
pub fn all_passed(lines: &[CheckLine]) -> bool {
    lines.iter().all(|l| l.ok)
}
