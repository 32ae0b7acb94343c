# syntax=docker/dockerfile:1
#
# Plinth: the server and the example Rust tools, in a small non-root image.
#
#   docker build -t plinth .
#   docker run -p 8080:8080 plinth                     # one node, SQLite in /data
#   docker compose -f deploy/compose.yaml up           # a fleet (docs/fleet.md)
#
# The Python and JavaScript examples are not in the image: packing them needs
# the pinned toolchains (make toolchains), hundreds of MB the server never uses.
# Pack them with `plinth pack` anywhere and deploy them over the admin API.

FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN rustup target add wasm32-wasip2
COPY . .
# The registry and target/ are cache mounts: a rebuild after a change compiles
# what changed, not wasmtime again.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eu; \
    cargo build --release --locked -p plinth; \
    cargo build --locked --target wasm32-wasip2 --profile plugin -p echo -p book-flight -p lookup-weather-by-city; \
    mkdir -p /out/plugins; \
    for p in echo book-flight lookup-weather-by-city; do \
        f=$(echo "$p" | tr - _); \
        ./target/release/plinth pack "plugins/$p" --wasm "target/wasm32-wasip2/plugin/$f.wasm" -o "/out/plugins/$f.wasm"; \
    done; \
    strip --strip-debug -o /out/plinth target/release/plinth

FROM debian:bookworm-slim
# The same layout as the image `make image` builds without pulling anything
# (deploy/image/Containerfile, whose text from USER down is this stage's): a
# `plinth` user (10001) owning /data, bash for the health check. No CA
# bundle: the server carries its TLS roots (webpki-roots).
RUN useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin plinth \
 && mkdir -p /data \
 && chown 10001:10001 /data \
 && chmod 700 /data
COPY --from=build /out/plinth /usr/local/bin/plinth
COPY --from=build /out/plugins /opt/plinth/plugins
USER 10001:10001
# One node: everything in /data (SQLite). In a fleet (PLINTH_DATABASE_URL set),
# /data holds only this replica's cache of compiled tools.
ENV PLINTH_LISTEN=0.0.0.0:8080 \
    PLINTH_DATA=/data
VOLUME ["/data"]
EXPOSE 8080
# Healthy = ready: the registry is loaded and caught up with the store. The
# image has no curl: bash speaks the one request.
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${PLINTH_LISTEN##*:} && printf 'GET /ready HTTP/1.0\\r\\n\\r\\n' >&3 && read -r status <&3 && [[ $status == *' 200 '* ]]"]
# SIGTERM is a graceful stop: the server stops accepting, lets running calls
# keep their answers, writes the usage it counted, logs "stopped" and exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["plinth"]
CMD ["serve"]
