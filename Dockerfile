# The operator image: one static-ish binary on distroless, non-root. Build with
#   docker build -t registry.example.com/sentry-tenants:v0.1.0 .
# and install with `sentry-tenants install --image registry.example.com/sentry-tenants:v0.1.0`.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The wasm target builds the dashboard bundle that the binary embeds.
RUN rustup target add wasm32-unknown-unknown
COPY . .
RUN cargo build --release --locked -p sentry-tenants \
 && cp target/release/sentry-tenants /sentry-tenants

# glibc + CA certificates, no shell, no package manager; UID/GID 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /sentry-tenants /usr/local/bin/sentry-tenants
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/sentry-tenants"]
CMD ["run"]
