# syntax=docker/dockerfile:1
# svcplane container image: `svcplane run` (controllers + admission webhook).
#
#   docker build -t svcplane:0.1.0 .
#
# NOTE: this Dockerfile has NOT been built here: the development machine has
# no Docker/BuildKit engine. Its Rust build step is the command CI runs
# (`cargo build --release --locked -p svcplane-controller`); the runtime image
# and user match charts/svcplane (runAsUser/runAsGroup 65532, read-only root).

# ---- build --------------------------------------------------------------------
FROM rust:1.95 AS builder
WORKDIR /src
# The whole workspace (every member's manifest must be present for --locked);
# .dockerignore keeps target/, .git, the chart and the Go test harness out.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p svcplane-controller \
 && install -D -m 0755 target/release/svcplane /out/svcplane

# ---- runtime ------------------------------------------------------------------
# distroless/cc: glibc + libgcc, no shell, no package manager. rustls with ring
# means no OpenSSL is needed. The :nonroot tag already runs as 65532; it is set
# explicitly so `runAsNonRoot` can verify a numeric user.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="svcplane" \
      org.opencontainers.image.description="Kubernetes Service-networking control plane: EndpointSlice/Endpoints/mirroring controllers and a ClusterIP/NodePort admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=builder /out/svcplane /svcplane
USER 65532:65532
# 8080: plain-HTTP admin (/metrics, /livez, /readyz); 9443: HTTPS webhook.
EXPOSE 8080 9443
ENTRYPOINT ["/svcplane"]
CMD ["run"]
