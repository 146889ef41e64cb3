//! Every cross-crate test of sentry-tenants in one binary: one link of the operator, the dashboard and
//! their dependencies instead of one per file. Each module is one area; see the README's verification
//! section for what each proves.

mod api_outage;
mod auto_provision;
mod clickhouse_live;
mod clickhouse_parser;
mod clickhouse_tls;
mod copies;
mod crd_schema;
mod dashboard_http;
mod e2e_clickhouse;
mod fault_drills;
mod harness_clock;
mod image_push;
mod input_sweep;
mod install_bundle;
mod installer;
mod leader_election;
mod limits;
mod operator_process;
mod permissions;
mod provisioner;
mod reclaim;
mod run_cap;
mod runjob_rules;
mod secret_loss;
mod shards;
mod stale_cache_drill;
mod stand_in_rules;
mod tenant_rules;
mod uninstall_check;
mod watch_wiring;
mod write_budget;
