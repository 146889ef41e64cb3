fn main() -> std::process::ExitCode {
    sentry_tenants::cli::main()
}
