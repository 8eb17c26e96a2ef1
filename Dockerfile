# The operator image: `docker build -t kwok-pools:latest .` then `kubectl apply --server-side
# -f crds/kwok-pools.yaml && kubectl apply -k config/`.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY tests tests
COPY crds crds
RUN cargo build --release --locked --bin kwok-pools

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kwok-pools /usr/local/bin/kwok-pools
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kwok-pools"]
CMD ["run", "--metrics-addr=0.0.0.0:8080", "--webhook-addr=0.0.0.0:9443"]
