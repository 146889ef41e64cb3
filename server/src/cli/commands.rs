//! The subcommands as a person types them: their arguments, and what each runs and prints.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use super::dashboard;
use crate::flags::ValueError;
use crate::install::apply::AdminCredentials;
use crate::install::check::{self, all_passed};
use crate::install::{InstallOptions, Progress, UninstallOptions, Values, install, uninstall};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Yaml,
}

#[derive(Args, Debug, Clone)]
pub struct InstallArgs {
    /// Namespace to install into (created if missing).
    #[arg(long, short = 'n', default_value = crate::flags::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Operator image (also the provisioning Jobs' image).
    #[arg(long, default_value = crate::DEFAULT_IMAGE)]
    pub image: String,
    /// Push this binary's image to REPOSITORY[:TAG] first (as `image push`), then install it pinned
    /// to the pushed digest: one command for a cluster that pulls only from its own registry.
    #[arg(long, value_name = "REPOSITORY[:TAG]", conflicts_with = "image")]
    pub push_image: Option<String>,
    #[command(flatten)]
    pub registry: crate::image::RegistryArgs,
    /// A `docker-registry` Secret in the namespace that the operator's and the Jobs' pods pull the
    /// image with (put on their ServiceAccounts), for a registry that wants credentials.
    #[arg(long, value_name = "SECRET")]
    pub image_pull_secret: Option<String>,
    /// Operator replicas; one leads, all serve the dashboard. With --shards: replicas of each shard.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=10))]
    pub replicas: u8,
    /// Split reconciling between these shards (comma-separated names): a Deployment
    /// `sentry-tenants-shard-<name>` and a Lease each. A tenant is reconciled by the shard its
    /// `sentry.io/shard` label names; the main Deployment labels unlabelled tenants (by a hash of
    /// the name) and, like every replica, serves the whole dashboard.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub shards: Vec<String>,
    /// ClickHouse HTTP endpoint the provisioner talks to.
    #[arg(long, default_value = crate::flags::DEFAULT_CLICKHOUSE_URL)]
    pub clickhouse_url: String,
    /// Secret (keys `username`, `password`) holding the ClickHouse admin credentials; only the provisioning
    /// Jobs read it.
    #[arg(long, default_value = "clickhouse-admin")]
    pub clickhouse_admin_secret: String,
    /// Run every provisioning statement `ON CLUSTER` this ClickHouse cluster. Provision then refuses a
    /// cluster whose users are not kept in a replicated user directory.
    #[arg(long)]
    pub clickhouse_cluster: Option<String>,
    /// What new tenants' ClickHouse names start with: database `<prefix>_<tenant>`, user
    /// `<prefix>_<tenant>_user`. Default: `st` and a hash of --namespace, so two installs of a cluster
    /// never share one; installs in different clusters sharing one ClickHouse pass their own.
    /// Tenants keep the names they have when it changes (installs made before prefixes existed named
    /// them `tenant_…`; pass `--clickhouse-prefix tenant` to name new ones so too).
    #[arg(long)]
    pub clickhouse_prefix: Option<String>,
    /// ConfigMap in the namespace with the CA bundle (key `ca.crt`, PEM) that verifies an `https://`
    /// --clickhouse-url, instead of the system's roots; mounted into every provisioning Job.
    #[arg(long)]
    pub clickhouse_ca_configmap: Option<String>,
    /// Runs that may have a Job (a pod, a ClickHouse session) at once; further runs wait, oldest
    /// first. Bounds the load a burst of Tenants puts on the nodes and on ClickHouse.
    #[arg(
        long,
        default_value_t = crate::config::DEFAULT_MAX_CONCURRENT_RUNS,
        value_parser = clap::value_parser!(u16).range(1..=crate::config::MAX_CONCURRENT_RUNS_LIMIT as i64)
    )]
    pub max_concurrent_runs: u16,
    /// Read the ClickHouse admin password from standard input (one line) and create or update the
    /// admin Secret with it and --clickhouse-admin-user; without it, the Secret must already exist.
    #[arg(long)]
    pub clickhouse_admin_password_stdin: bool,
    /// The ClickHouse admin account's name, stored with --clickhouse-admin-password-stdin.
    #[arg(
        long,
        default_value = "sentry_admin",
        requires = "clickhouse_admin_password_stdin"
    )]
    pub clickhouse_admin_user: String,
    /// Serve the dashboard without any mutating route, and drop the RBAC those routes would need.
    /// The safe choice on a shared cluster: the dashboard acts as the operator's ServiceAccount.
    #[arg(long)]
    pub read_only_dashboard: bool,
    /// Also create two ClusterRoles that add tenants and runjobs to the built-in view, edit and admin
    /// roles, so namespace viewers and editors can `kubectl get`/edit tenants. Off by default; the
    /// only ClusterRoles sentry-tenants ever creates.
    #[arg(long)]
    pub aggregate_to_view_edit: bool,
    /// Also create NetworkPolicies: the operator pod admits traffic only on its probe/metrics port,
    /// the provisioning pods admit none. Off by default: it takes effect only where the cluster's
    /// network plugin enforces NetworkPolicy.
    #[arg(long)]
    pub network_policy: bool,
    /// With --network-policy: only pods of this namespace may reach the metrics port (repeat for
    /// several, e.g. where Prometheus runs); without it, any pod may.
    #[arg(
        long = "metrics-from-namespace",
        value_name = "NAMESPACE",
        requires = "network_policy"
    )]
    pub metrics_from_namespaces: Vec<String>,
    /// Also ship monitoring: a ServiceMonitor and a PrometheusRule with the operator's alerts (applied
    /// only where the Prometheus Operator's CRDs exist; skipped with a note otherwise), and a Grafana
    /// dashboard in a ConfigMap labelled grafana_dashboard=1.
    #[arg(long)]
    pub monitoring: bool,
    /// Print the bundle instead of applying it; needs no cluster (for GitOps).
    #[arg(long)]
    pub dry_run: bool,
    /// Output format of the printed bundle (implies --dry-run).
    #[arg(long, short = 'o', value_enum)]
    pub output: Option<Output>,
    /// Wait until the operator is rolled out.
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub wait: bool,
    /// How long to wait for CRDs and the rollout (a Go duration: 90s, 5m, 1m30s).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Take over fields another field manager owns instead of stopping.
    #[arg(long)]
    pub force_conflicts: bool,
}

impl InstallArgs {
    pub fn values(&self) -> anyhow::Result<Values> {
        Ok(Values {
            namespace: self.namespace.clone(),
            // Validated as a reference now; pinned to the pushed digest before anything is applied.
            image: self
                .push_image
                .clone()
                .unwrap_or_else(|| self.image.clone()),
            replicas: self.replicas,
            clickhouse_url: self.clickhouse_url.clone(),
            clickhouse_admin_secret: self.clickhouse_admin_secret.clone(),
            clickhouse_cluster: self.clickhouse_cluster.clone(),
            clickhouse_prefix: self.clickhouse_prefix.clone().unwrap_or_else(|| {
                crate::names::ClickHousePrefix::for_namespace(&self.namespace).to_string()
            }),
            clickhouse_ca_configmap: self.clickhouse_ca_configmap.clone(),
            max_concurrent_runs: self.max_concurrent_runs,
            read_only_dashboard: self.read_only_dashboard,
            aggregate_to_view_edit: self.aggregate_to_view_edit,
            network_policy: self.network_policy,
            metrics_from_namespaces: self.metrics_from_namespaces.clone(),
            image_pull_secret: self.image_pull_secret.clone(),
            monitoring: self.monitoring,
            shards: self.shards.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
        .validate()?)
    }
}

/// A failed pre-install check as the error that stops `install`, with its hint.
fn passed(line: check::CheckLine) -> anyhow::Result<()> {
    match &line.hint {
        Some(hint) => anyhow::bail!("{}: {hint}", line.what),
        None => Ok(()),
    }
}

/// A Go duration, as kubectl takes one: `90s`, `5m`, `1m30s`, `1h`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let parsed: kube::core::Duration = s.parse().map_err(|_| {
        format!("invalid duration {s:?}: use a Go duration such as 90s, 5m, 1m30s or 1h")
    })?;
    if parsed.is_negative() {
        return Err(format!("invalid duration {s:?}: it cannot be negative"));
    }
    Ok(parsed.into())
}

pub async fn run_install(args: InstallArgs) -> anyhow::Result<()> {
    let mut values = args.values()?;
    let push_to = args
        .push_image
        .as_deref()
        .map(crate::image::registry::Reference::parse)
        .transpose()?;
    if args.dry_run || args.output.is_some() {
        if args.clickhouse_admin_password_stdin {
            anyhow::bail!(
                "--clickhouse-admin-password-stdin cannot be used with --dry-run: a printed bundle must not carry a password; create the Secret with your secrets tooling"
            );
        }
        // The digest the push would give, known without pushing: the image is this binary's.
        if let Some(reference) = &push_to {
            values.image = reference.by_digest(&crate::image::of_this_binary()?.digest());
        }
        print!("{}", values.render_yaml());
        return Ok(());
    }
    if args.clickhouse_admin_password_stdin && args.registry.password_stdin {
        anyhow::bail!(
            "--clickhouse-admin-password-stdin and --registry-password-stdin both read standard input: create the ClickHouse admin Secret first, or log in to the registry (docker login) and drop --registry-password-stdin"
        );
    }
    let clickhouse_admin = match args.clickhouse_admin_password_stdin {
        true => Some(admin_from_stdin(&args.clickhouse_admin_user)?),
        false => None,
    };
    let client = crate::cluster::connect().await?;
    let ns = &values.namespace;
    if clickhouse_admin.is_none() {
        passed(check::admin_secret_line(&client, ns, &values.clickhouse_admin_secret).await)?;
    }
    if let Some(ca) = &values.clickhouse_ca_configmap {
        passed(check::ca_configmap_line(&client, ns, ca).await)?;
    }
    if let Some(secret) = &values.image_pull_secret {
        passed(check::pull_secret_line(&client, ns, secret).await)?;
    }
    // Pushed once everything else is known to be in place, and before anything is applied: a
    // refused login leaves the cluster as it was.
    if let Some(reference) = &push_to {
        values.image = crate::image::push(reference, &args.registry, false).await?;
        eprintln!("Pushed {}", values.image);
    }
    let progress = Progress::for_stderr();
    let opts = InstallOptions {
        force_conflicts: args.force_conflicts,
        wait: args.wait,
        timeout: args.timeout,
        clickhouse_admin,
        ..InstallOptions::default()
    };
    let report = install(&client, &values, &opts, &progress).await;
    progress.finish();
    let report = report?;
    let ns = &values.namespace;
    eprintln!(
        "\nsentry-tenants {} installed in namespace {ns}: {} objects applied{}.",
        values.version,
        report.applied.len(),
        if report.pruned.is_empty() {
            String::new()
        } else {
            format!(", {} pruned", report.pruned.len())
        }
    );
    if !args.wait {
        eprintln!(
            "Not waiting for the rollout, so nothing was pruned (that happens only after a rollout succeeded); follow it with: sentry-tenants check -n {ns}"
        );
    }
    eprintln!("Open the dashboard:  sentry-tenants dashboard -n {ns}");
    eprintln!(
        "  (or: kubectl -n {ns} port-forward deploy/sentry-tenants 8080 and open http://127.0.0.1:8080/)"
    );
    eprintln!("Check the install:   sentry-tenants check -n {ns}");
    print_who_can_act(&client, ns, values.read_only_dashboard).await;
    Ok(())
}

/// Who reaches the dashboard — whoever may port-forward to the operator's pod — and acts, through
/// it, as the operator's ServiceAccount.
async fn print_who_can_act(client: &kube::Client, ns: &str, read_only: bool) {
    const SHOWN: usize = 20;
    if read_only {
        eprintln!(
            "\nThe dashboard is read-only: whoever may port-forward to its pod may look, nobody may act."
        );
        return;
    }
    let who = match crate::install::who_can::port_forwarders(client, ns).await {
        Ok(who) => who,
        Err(e) => {
            let why = crate::cluster::describe("list the RBAC that grants port-forward", &e);
            eprintln!("\nWho can act through the dashboard: unknown ({why})");
            return;
        }
    };
    eprintln!(
        "\nWho can act through the dashboard (may port-forward to its pod in {ns}; every action there runs as the operator's ServiceAccount):"
    );
    for (subject, via) in who.iter().take(SHOWN) {
        let via: Vec<&str> = via.iter().map(String::as_str).collect();
        eprintln!("  {subject} (through {})", via.join(", "));
    }
    if who.len() > SHOWN {
        eprintln!("  … and {} more", who.len() - SHOWN);
    }
    eprintln!("On a shared cluster, install with --read-only-dashboard.");
}

#[derive(Args, Debug, Clone)]
pub struct UninstallArgs {
    #[arg(long, short = 'n', default_value = crate::flags::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Also delete the CRDs — and with them every Tenant and RunJob in the cluster.
    #[arg(long)]
    pub delete_crds: bool,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// How long to wait for the operator's pods to stop (a Go duration: 90s, 5m, 1m30s).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

pub async fn run_uninstall(args: UninstallArgs) -> anyhow::Result<()> {
    if args.delete_crds && !args.yes {
        confirm(
            "This deletes the Tenant and RunJob CRDs and every tenant object in the cluster (ClickHouse data is not touched).",
        )?;
    }
    let client = crate::cluster::connect().await?;
    let progress = Progress::for_stderr();
    let opts = UninstallOptions {
        delete_crds: args.delete_crds,
        timeout: args.timeout,
        ..UninstallOptions::default()
    };
    let report = uninstall(&client, &args.namespace, &opts, &progress).await;
    progress.finish();
    let report = report?;
    eprintln!(
        "\nsentry-tenants uninstalled from {}: {} objects deleted.",
        args.namespace,
        report.deleted.len()
    );
    if !report.left_in_clickhouse.is_empty() {
        eprintln!("Left in ClickHouse (uninstall never connects to it):");
        for line in &report.left_in_clickhouse {
            eprintln!("  - {line}");
        }
    }
    Ok(())
}

/// The admin password as one line of standard input (a pipe or a prompt without echo is the
/// caller's business), never echoed back.
fn admin_from_stdin(username: &str) -> anyhow::Result<AdminCredentials> {
    if username.is_empty() || username.chars().any(char::is_control) {
        anyhow::bail!(
            "--clickhouse-admin-user must be a non-empty name without control characters"
        );
    }
    let mut password = String::new();
    std::io::stdin().lock().read_line(&mut password)?;
    let password = password.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        anyhow::bail!(
            "--clickhouse-admin-password-stdin read no password from standard input (pipe it in: printf '%s' \"$PASSWORD\" | sentry-tenants install …)"
        );
    }
    Ok(AdminCredentials {
        username: username.to_owned(),
        password: password.to_owned(),
    })
}

fn confirm(what: &str) -> anyhow::Result<()> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        anyhow::bail!("{what} Refusing without confirmation: re-run with --yes");
    }
    eprint!("{what}\nType 'yes' to continue: ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if answer.trim() != "yes" {
        anyhow::bail!("aborted: nothing was deleted");
    }
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    #[arg(long, short = 'n', default_value = crate::flags::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Before installing: cluster reachable, version supported, permissions to install, the
    /// ClickHouse admin Secret in place.
    #[arg(long)]
    pub pre: bool,
    /// The ClickHouse admin Secret `--pre` looks for (as given to install).
    #[arg(long, default_value = "clickhouse-admin")]
    pub clickhouse_admin_secret: String,
    /// With `--pre`: also what `install --monitoring` needs (the Prometheus Operator's CRDs, the
    /// permission to create its objects and the Grafana dashboard's ConfigMap).
    #[arg(long, requires = "pre")]
    pub monitoring: bool,
    /// Print the checks as JSON or YAML (`ok`, and each check's `ok`, `what`, `hint`); the exit code is the same.
    #[arg(long, short = 'o', value_enum)]
    pub output: Option<Format>,
}

#[derive(serde::Serialize)]
struct CheckReport<'a> {
    ok: bool,
    checks: &'a [check::CheckLine],
}

fn print_as(format: Format, value: &impl serde::Serialize) -> anyhow::Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Yaml => print!("{}", serde_norway::to_string(value)?),
    }
    Ok(())
}

pub async fn run_check(args: CheckArgs) -> anyhow::Result<bool> {
    ValueError::check_namespace(&args.namespace)?;
    ValueError::check_secret(&args.clickhouse_admin_secret)?;
    let client = crate::cluster::connect().await?;
    let lines = if args.pre {
        check::preflight(
            &client,
            &args.namespace,
            &args.clickhouse_admin_secret,
            args.monitoring,
        )
        .await
    } else {
        check::post_install(
            &client,
            &args.namespace,
            env!("CARGO_PKG_VERSION"),
            jiff::Timestamp::now(),
        )
        .await
    };
    let ok = all_passed(&lines);
    match args.output {
        Some(format) => print_as(format, &CheckReport { ok, checks: &lines })?,
        None => {
            for line in &lines {
                println!("{line}");
            }
            println!(
                "{}",
                if ok {
                    "All checks passed."
                } else {
                    "Some checks failed."
                }
            );
        }
    }
    Ok(ok)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Json,
    Yaml,
}

#[derive(Args, Debug, Clone)]
pub struct VersionArgs {
    /// Namespace of the install whose version to show.
    #[arg(long, short = 'n', default_value = crate::flags::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Only this CLI's version; needs no cluster.
    #[arg(long)]
    pub client: bool,
    #[arg(long, short = 'o', value_enum)]
    pub output: Option<Format>,
}

/// The versions `version` reports: always the client's; the server's unless `--client`, `null`
/// when nothing is installed in the namespace.
#[derive(Debug, serde::Serialize)]
struct Versions {
    client: ClientVersion,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<Option<check::Installed>>,
}

#[derive(Debug, serde::Serialize)]
struct ClientVersion {
    version: &'static str,
}

/// Like `kubectl version`: the client's line first, so it shows even when the cluster does not answer.
pub async fn run_version(args: VersionArgs) -> anyhow::Result<()> {
    let client = ClientVersion {
        version: env!("CARGO_PKG_VERSION"),
    };
    if args.output.is_none() {
        println!("client: {}", client.version);
    }
    let server = if args.client {
        None
    } else {
        let kube = crate::cluster::connect().await?;
        let installed = check::installed(&kube, &args.namespace)
            .await
            .map_err(|e| {
                anyhow::anyhow!(crate::cluster::describe("get the operator Deployment", &e))
            })?;
        Some(installed)
    };
    let versions = Versions { client, server };
    match args.output {
        None => {
            if let Some(server) = &versions.server {
                println!("server: {}", server_line(server.as_ref(), &args.namespace));
            }
        }
        Some(format) => print_as(format, &versions)?,
    }
    Ok(())
}

fn server_line(installed: Option<&check::Installed>, namespace: &str) -> String {
    match installed {
        Some(i) => format!(
            "{} in namespace {} (image {}, {}/{} available)",
            i.version, i.namespace, i.image, i.available_replicas, i.replicas
        ),
        None => format!("not installed in namespace {namespace}"),
    }
}

#[derive(Args, Debug, Clone)]
pub struct DashboardArgs {
    #[arg(long, short = 'n', default_value = crate::flags::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Serve the dashboard from this process, acting as you: your kubeconfig's credentials make every
    /// request, so your RBAC decides what you may do (buttons you may not use are hidden) and the API
    /// server's audit log names you. Without it, the dashboard is the operator's, reached through a
    /// port-forward: it acts as the operator's ServiceAccount for anyone who may port-forward to it.
    #[arg(long)]
    pub local: bool,
    /// Local port (0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Do not try to open a browser.
    #[arg(long)]
    pub no_browser: bool,
}

pub async fn run_dashboard(args: DashboardArgs) -> anyhow::Result<()> {
    if args.local {
        let client = crate::cluster::connect().await?;
        let listener = dashboard::listen_on_loopback(args.port).await?;
        let open = |url: &str| {
            if !args.no_browser {
                dashboard::open_in_browser(url);
            }
        };
        crate::web::local::serve_local(client, &args.namespace, listener, open).await
    } else {
        let client = crate::cluster::connect_for_streams().await?;
        dashboard::dashboard(client, &args.namespace, args.port, !args.no_browser).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go_durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration("42"),
            Err(
                "invalid duration \"42\": use a Go duration such as 90s, 5m, 1m30s or 1h"
                    .to_owned()
            )
        );
        assert!(parse_duration("5 minutes").is_err());
        assert_eq!(
            parse_duration("-1s"),
            Err("invalid duration \"-1s\": it cannot be negative".to_owned())
        );
    }
}

#[derive(Args, Debug)]
pub struct GrantCredentialsArgs {
    /// The namespace the applications run in, where the copies of their credentials go.
    pub target: String,
    /// The install's namespace.
    #[arg(long, short = 'n', default_value = crate::flags::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Apply the RoleBindings now, as you: RBAC lets only someone who may write Secrets in the
    /// target namespace do so.
    #[arg(long, conflicts_with = "revoke")]
    pub apply: bool,
    /// Remove them: no new copy is written there (those made stay until their tenants or entries go).
    #[arg(long)]
    pub revoke: bool,
}

/// `grant-credentials`: print the consent bindings (for the namespace's owner to apply), or apply
/// or remove them.
pub async fn run_grant_credentials(args: GrantCredentialsArgs) -> anyhow::Result<()> {
    use crate::install::consent;
    ValueError::check_namespace(&args.namespace)?;
    ValueError::check_namespace(&args.target)?;
    let (install_ns, target) = (args.namespace.as_str(), args.target.as_str());
    if !args.apply && !args.revoke {
        print!("{}", consent::bindings_yaml(install_ns, target));
        return Ok(());
    }
    let client = crate::cluster::connect().await?;
    if args.revoke {
        consent::revoke(&client, install_ns, target).await?;
        eprintln!(
            "Namespace {target} no longer consents to credential copies from the install in {install_ns}."
        );
    } else {
        consent::grant(&client, install_ns, target).await?;
        eprintln!(
            "Namespace {target} consents to credential copies from the install in {install_ns}: tenants that list it get their copies there."
        );
    }
    Ok(())
}
