# Builds every nodemgr binary statically (musl) into one small image, the one the Helm chart
# runs for every component (bashible, the node agent, is there for bashible-apiserver to serve
# with --agent-binary /usr/local/bin/bashible). From the repository root:
#   docker build -t ghcr.io/nodemgr/nodemgr:0.1.0 .
# (.dockerignore keeps target/ and .git/ out of the build context.)
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl -p nodemgr-bins -p nodemgr-cli \
    && mkdir /out \
    && for b in nodemgr node-manager nodemgr-webhook fencing-agent early-oom bashible-apiserver bashible; do \
         cp "target/x86_64-unknown-linux-musl/release/$b" /out/; \
       done

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/nodemgr"]
