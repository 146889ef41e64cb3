//! The ClickHouse HTTP stand-in as a process, for trying sentry-tenants on the local control plane
//! (`scripts/try.sh`). Test code: not a ClickHouse server — see `sentry_tenants_tests::clickhouse_stand_in`.

use clap::Parser;
use sentry_tenants_tests::clickhouse_stand_in::ClickHouseStandIn;

#[derive(Parser)]
struct Args {
    /// Address to listen on (the pod network's gateway, so pods reach it).
    #[arg(long)]
    listen: String,
    #[arg(long)]
    admin_user: String,
    /// The admin's password (from the environment, so it is not on the command line).
    #[arg(long, env = "CLICKHOUSE_STAND_IN_ADMIN_PASSWORD")]
    admin_password: String,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let server =
        ClickHouseStandIn::start(&args.listen, &args.admin_user, &args.admin_password).await;
    println!("{}", server.url);
    let _ = tokio::signal::ctrl_c().await;
    drop(server);
}
