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
    cp target/release/plinth /out/plinth

FROM debian:bookworm-slim
# ca-certificates: tools' outbound HTTPS and PostgreSQL over TLS.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin plinth \
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
ENTRYPOINT ["plinth"]
CMD ["serve"]
