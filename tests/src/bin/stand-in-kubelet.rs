//! The stand-in kubelet of the real control plane tier, as a process `scripts/cluster.sh` starts. Test
//! code only: see `sentry_tenants_tests::kubelet` and the README for what it does and does not do.

use std::path::PathBuf;

use clap::Parser;
use sentry_tenants_tests::control_plane::client_from;
use sentry_tenants_tests::kubelet::{self, Config, sandbox::Network};

#[derive(Parser)]
struct Args {
    /// Credentials the kubelet acts with (the cluster's admin kubeconfig).
    #[arg(long)]
    kubeconfig: PathBuf,
    #[arg(long, default_value = "stand-in")]
    node_name: String,
    /// The pod network's bridge and its /24 (`10.244.X`).
    #[arg(long)]
    bridge: String,
    #[arg(long)]
    subnet: String,
    /// The apiserver's port, reached by pods at the bridge's gateway address.
    #[arg(long)]
    apiserver_port: u16,
    /// `repository=binary`: pods of that image run that binary.
    #[arg(long = "image", value_parser = parse_image)]
    images: Vec<(String, PathBuf)>,
    #[arg(long)]
    state_dir: PathBuf,
    #[arg(long)]
    serving_cert: PathBuf,
    #[arg(long)]
    serving_key: PathBuf,
    #[arg(long)]
    client_ca: PathBuf,
    #[arg(long, default_value_t = 0)]
    port: u16,
}

fn parse_image(s: &str) -> Result<(String, PathBuf), String> {
    let (repo, bin) = s.split_once('=').ok_or("expected repository=binary")?;
    Ok((repo.to_owned(), PathBuf::from(bin)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(false)
        .init();
    let args = Args::parse();
    let client = client_from(&args.kubeconfig).await;
    kubelet::run(Config {
        client,
        node: args.node_name,
        api_port: args.apiserver_port,
        images: args.images,
        network: Network {
            bridge: args.bridge,
            prefix: args.subnet,
        },
        state_dir: args.state_dir,
        serving_cert: args.serving_cert,
        serving_key: args.serving_key,
        client_ca: args.client_ca,
        port: args.port,
    })
    .await
}
