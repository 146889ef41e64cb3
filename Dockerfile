# The operator image: one static-ish binary on distroless, non-root. `sentry-tenants install`'s default
# --image is the reference this builds (a test keeps it equal to the binary's DEFAULT_IMAGE):
#   docker build -t ghcr.io/sentry-tenants/sentry-tenants:v0.1.0 .
#   docker push ghcr.io/sentry-tenants/sentry-tenants:v0.1.0
# For another registry, tag and push it there and install with --image REF. Without Docker, the binary
# makes this image itself: `sentry-tenants image export` / `image push` / `install --push-image`
# (docs/install.md, "The image"); a test keeps their declarations equal to these.

FROM rust:1.95-bookworm AS build
WORKDIR /src
# The wasm target builds the dashboard bundle that the binary embeds.
RUN rustup target add wasm32-unknown-unknown
COPY . .
RUN cargo build --release --locked -p sentry-tenants \
 && cp target/release/sentry-tenants /sentry-tenants

# glibc + CA certificates, no shell, no package manager; UID/GID 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/sentry-tenants/sentry-tenants" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /sentry-tenants /usr/local/bin/sentry-tenants
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/sentry-tenants"]
CMD ["run"]
