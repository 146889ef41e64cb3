//! The command line: one binary, one subcommand per job.

pub mod commands;
pub mod dashboard;

use clap::{CommandFactory, Parser, Subcommand};

use crate::telemetry::{LogFormat, Verbosity, init_logging};

#[derive(Parser, Debug)]
#[command(
    name = "sentry-tenants",
    version,
    about = "Multi-tenant operator for ClickHouse-backed tenants: install, run, provision, dashboard"
)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "SENTRY_TENANTS_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    /// Log what happens underneath on stderr, the requests behind a failure included (`RUST_LOG` for more).
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,
    #[command(flatten)]
    pub cluster: crate::cluster::ClusterArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator: Tenant and RunJob controllers, leader election, probes (what the Deployment runs).
    Run(Box<crate::operator::RunArgs>),
    /// Install or upgrade the operator into the current cluster (CRDs, RBAC, Deployment), and wait for it.
    Install(Box<commands::InstallArgs>),
    /// Remove the operator; keeps CRDs and tenants unless --delete-crds.
    Uninstall(commands::UninstallArgs),
    /// Check the cluster before (--pre) or after installing; exits non-zero if anything fails.
    Check(commands::CheckArgs),
    /// Open the dashboard: through a port-forward to an operator pod (acting as the operator's
    /// ServiceAccount), or with --local served here, acting as you (your RBAC, your audit trail).
    Dashboard(commands::DashboardArgs),
    /// Let tenants' credentials be copied into a namespace (spec.credentials.copies): print the two
    /// RoleBindings by which its owner consents, or apply (--apply) or remove (--revoke) them as you.
    GrantCredentials(commands::GrantCredentialsArgs),
    /// Print the Tenant and RunJob CustomResourceDefinitions as YAML.
    Crd,
    /// The operator image, made from this binary: export it as an archive, or push it to a registry,
    /// for clusters that cannot pull the published one.
    #[command(subcommand)]
    Image(crate::image::ImageCommand),
    /// Print this CLI's version and the installed operator's (`--client` for the CLI's only).
    Version(commands::VersionArgs),
    /// Print a shell completion script: `source <(sentry-tenants completion bash)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Carry out one run action (--action) for one tenant in ClickHouse and record it on the Tenant (what RunJob pods run).
    ProvisionTenant(Box<crate::provision::ProvisionArgs>),
}

impl Cli {
    fn verbosity(&self) -> Verbosity {
        match self.command {
            _ if self.verbose => Verbosity::Verbose,
            Command::Run(_) | Command::ProvisionTenant(_) => Verbosity::Service,
            _ => Verbosity::Quiet,
        }
    }

    /// What the command calls itself in its requests' User-Agent (after `sentry-tenants/<version>`),
    /// so the apiserver's audit log tells the operator (which shard), the provisioning pods and a
    /// person's commands apart.
    fn role(&self) -> String {
        let command = match &self.command {
            Command::Run(args) => {
                return match &args.config.shard {
                    Some(shard) => format!("run shard={shard}"),
                    None => "run".to_owned(),
                };
            }
            Command::ProvisionTenant(_) => "provision-tenant",
            Command::Crd => "crd",
            Command::Image(_) => "image",
            Command::Completion { .. } => "completion",
            Command::Version(_) => "version",
            Command::Install(_) => "install",
            Command::Uninstall(_) => "uninstall",
            Command::Check(_) => "check",
            Command::Dashboard(_) => "dashboard",
            Command::GrantCredentials(_) => "grant-credentials",
        };
        command.to_owned()
    }
}

pub fn main() -> std::process::ExitCode {
    crate::cluster::choose_tls_provider();
    let cli = Cli::parse();
    init_logging(cli.log_format, cli.verbosity());
    crate::cluster::select(cli.cluster.clone());
    crate::cluster::identify_as(&cli.role());
    let result = match cli.command {
        Command::Crd => {
            print!("{}", crate::crd::crds_yaml());
            Ok(())
        }
        Command::Image(command) => runtime().block_on(crate::image::run(command)),
        Command::Completion { shell } => {
            print!("{}", completion_script(shell));
            Ok(())
        }
        Command::Version(args) => runtime().block_on(commands::run_version(args)),
        Command::Install(args) => runtime().block_on(commands::run_install(*args)),
        Command::Uninstall(args) => runtime().block_on(commands::run_uninstall(args)),
        Command::Check(args) => match runtime().block_on(commands::run_check(args)) {
            Ok(true) => Ok(()),
            Ok(false) => return std::process::ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Command::Dashboard(args) => runtime().block_on(commands::run_dashboard(args)),
        Command::GrantCredentials(args) => {
            runtime().block_on(commands::run_grant_credentials(args))
        }
        Command::ProvisionTenant(args) => runtime().block_on(crate::provision::main(*args)),
        Command::Run(args) => runtime().block_on(crate::operator::run(*args)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line, with its causes, and no backtrace: the hint is the message.
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The completion script for `shell`. clap_complete 4.6's bash script never completes a subcommand's
/// options when the binary's name has a hyphen (its dispatch and its case labels escape the name
/// differently: clap-rs/clap#6421), so bash's is generated for `sentry_tenants` and registered for
/// the real name.
pub fn completion_script(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    let name = match shell {
        clap_complete::Shell::Bash => "sentry_tenants",
        _ => "sentry-tenants",
    };
    clap_complete::generate(shell, &mut Cli::command(), name, &mut out);
    let script = String::from_utf8(out).expect("clap_complete writes UTF-8");
    match shell {
        clap_complete::Shell::Bash => script.replace(" sentry_tenants\n", " sentry-tenants\n"),
        _ => script,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the tokio runtime")
}
