# syntax=docker/dockerfile:1
# svcplane container image: `svcplane run` (controllers + admission webhook).
#
#   docker build --build-arg SVCPLANE_GIT_COMMIT=$(git rev-parse HEAD) -t svcplane:0.1.0 .
#
# Multi-arch (amd64 + arm64), pushed to your registry. The builder stage runs on
# the build machine's platform ($BUILDPLATFORM) and cross-compiles for the other
# architecture (Debian's cross gcc + `rustup target add`), so no Rust build runs
# under QEMU; each target platform has its own cargo caches:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg SVCPLANE_GIT_COMMIT=$(git rev-parse HEAD) \
#     -t registry.example.com/svcplane:0.1.0 --push .
#
# The Rust build step is the command CI runs for the binary
# (`cargo build --release --locked -p svcplane-controller`, here with `--target`);
# the release profile carries no debug sections (Cargo.toml: debug = false,
# strip = "debuginfo"). The runtime image and user match charts/svcplane
# (runAsUser/runAsGroup 65532, read-only root).
#
# CI has no Docker engine: the Docker-free build in scripts/image is what CI
# builds and runs (`scripts/image build`, then `scripts/image verify`, which runs
# the binary inside that image's filesystem as its user and compares its config
# with this file's final stage). Both recipes give equivalent images: the same
# Debian 12 base packages as distroless/cc (glibc, libgcc, CA bundle, base-files,
# netbase, tzdata; no shell), user, entrypoint, command, ports and labels. This
# file itself is not built by CI.
#
# Base images are pinned by digest (the index digests published for these tags, as
# referenced by public Dockerfiles at the time of writing); refresh them with
#   docker buildx imagetools inspect rust:1.95-bookworm
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot

# ---- build --------------------------------------------------------------------
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS builder
# Set by BuildKit: the build machine's and the image's architecture and platform.
ARG BUILDARCH
ARG TARGETARCH
ARG TARGETPLATFORM
WORKDIR /src
# The Rust target for TARGETARCH; a cross toolchain only when it is not the build
# machine's architecture (arm64 on an amd64 builder, or the other way round).
RUN set -eu; \
    case "$TARGETARCH" in \
      amd64) echo x86_64-unknown-linux-gnu >/rust-target ;; \
      arm64) echo aarch64-unknown-linux-gnu >/rust-target ;; \
      *) echo "unsupported TARGETARCH: $TARGETARCH" >&2; exit 1 ;; \
    esac; \
    if [ "$TARGETARCH" = arm64 ] && [ "$BUILDARCH" != arm64 ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross; \
      rm -rf /var/lib/apt/lists/*; \
      rustup target add aarch64-unknown-linux-gnu; \
    elif [ "$TARGETARCH" = amd64 ] && [ "$BUILDARCH" != amd64 ]; then \
      apt-get update; \
      apt-get install -y --no-install-recommends gcc-x86-64-linux-gnu libc6-dev-amd64-cross; \
      rm -rf /var/lib/apt/lists/*; \
      rustup target add x86_64-unknown-linux-gnu; \
    fi
# Linker and C compiler (ring's C and assembly) per target. Debian's gcc package
# also installs the triplet-named driver, so these hold for native builds too.
ENV CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=x86_64-linux-gnu-gcc \
    CC_x86_64_unknown_linux_gnu=x86_64-linux-gnu-gcc
# The commit for `svcplane --version` and svcplane_build_info (the build context
# has no .git; controller/build.rs falls back to "unknown").
ARG SVCPLANE_GIT_COMMIT=unknown
ENV SVCPLANE_GIT_COMMIT=${SVCPLANE_GIT_COMMIT}
# The whole workspace (every member's manifest must be present for --locked);
# .dockerignore keeps target/, .git, the chart and the Go test harness out.
COPY . .
# Caches per target platform: the two platforms of a multi-arch build run at the
# same time and must not share a target dir (nor the registry: cargo's lock file
# lives outside the mount). The binary runs here only when built natively.
RUN --mount=type=cache,id=svcplane-cargo-registry-$TARGETPLATFORM,target=/usr/local/cargo/registry \
    --mount=type=cache,id=svcplane-target-$TARGETPLATFORM,target=/src/target \
    cargo build --release --locked -p svcplane-controller --target "$(cat /rust-target)" \
 && install -D -m 0755 "target/$(cat /rust-target)/release/svcplane" /out/svcplane \
 && if [ "$TARGETARCH" = "$BUILDARCH" ]; then /out/svcplane --version; fi

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
# 8080: plain-HTTP admin (/metrics, /livez, /readyz); 9443: HTTPS webhook;
# 10257: HTTPS (secure) metrics.
EXPOSE 8080 9443 10257
ENTRYPOINT ["/svcplane"]
CMD ["run"]
