# syntax=docker/dockerfile:1
# svcplane container image: `svcplane run` (controllers + admission webhook).
#
#   docker build --build-arg SVCPLANE_GIT_COMMIT=$(git rev-parse HEAD) -t svcplane:0.1.0 .
#
# Multi-arch (amd64 + arm64), pushed to your registry; BuildKit builds each
# platform natively or under QEMU:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg SVCPLANE_GIT_COMMIT=$(git rev-parse HEAD) \
#     -t registry.example.com/svcplane:0.1.0 --push .
#
# The Rust build step is the command CI runs for the binary
# (`cargo build --release --locked -p svcplane-controller`); the release profile
# carries no debug sections (Cargo.toml: debug = false, strip = "debuginfo"). The
# runtime image and user match charts/svcplane (runAsUser/runAsGroup 65532,
# read-only root). The development machine has no Docker/BuildKit engine, so this
# file is checked by review, not by a build (see README, "Container image").
#
# Base images are pinned by digest (the index digests published for these tags, as
# referenced by public Dockerfiles at the time of writing); refresh them with
#   docker buildx imagetools inspect rust:1.95-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot

# ---- build --------------------------------------------------------------------
FROM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS builder
WORKDIR /src
# The commit for `svcplane --version` and svcplane_build_info (the build context
# has no .git; controller/build.rs falls back to "unknown").
ARG SVCPLANE_GIT_COMMIT=unknown
ENV SVCPLANE_GIT_COMMIT=${SVCPLANE_GIT_COMMIT}
# The whole workspace (every member's manifest must be present for --locked);
# .dockerignore keeps target/, .git, the chart and the Go test harness out.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p svcplane-controller \
 && install -D -m 0755 target/release/svcplane /out/svcplane \
 && /out/svcplane --version

# ---- runtime ------------------------------------------------------------------
# distroless/cc: glibc + libgcc, no shell, no package manager. rustls with ring
# means no OpenSSL is needed. The :nonroot tag already runs as 65532; it is set
# explicitly so `runAsNonRoot` can verify a numeric user.
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
ARG SVCPLANE_GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="svcplane" \
      org.opencontainers.image.description="Kubernetes Service-networking control plane: EndpointSlice/Endpoints/mirroring controllers and a ClusterIP/NodePort admission webhook" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.revision="${SVCPLANE_GIT_COMMIT}"
COPY --from=builder /out/svcplane /svcplane
USER 65532:65532
# 8080: plain-HTTP admin (/metrics, /livez, /readyz); 9443: HTTPS webhook.
EXPOSE 8080 9443
ENTRYPOINT ["/svcplane"]
CMD ["run"]
