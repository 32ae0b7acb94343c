# Plinth — build, run and test. `make help` lists the targets.

SHELL      := /bin/bash
CARGO      ?= cargo
PLUGINS    := echo book-flight lookup-weather-by-city
# Example tools that act with a person's own account (docs/authorization.md):
# `make run` serves them beside the others; the tests deploy them from
# target/fixtures/ (most tests serve only the three above).
ACCOUNT_PLUGINS := my-inbox
# Extra tools the tests deploy (versions of echo), packed into target/fixtures/.
FIXTURES   := echo-v2 echo-breaking spin-forever memory-bomb deep-recursion panic-at-once huge-output \
              call-undeclared-host call-loopback use-account snoop slow-sleep use-secret transfer-funds outbound-flood log-flood huge-error \
              describe-hostile markup-docs compute steal-token use-api-key
# Python and JavaScript tools, built from source by `plinth pack` with the
# pinned toolchains (make toolchains).
# The Python and JavaScript examples go to their own folder: each takes
# seconds to compile when deployed, and most tests serve only the Rust ones.
PORTABLE_PLUGINS  := get-daily-forecast daily-forecast
PORTABLE_OUT      := target/portable-plugins
PORTABLE_FIXTURES := echo-py echo-js
WASM_OUT   := target/wasm32-wasip2/plugin
TOOLCHAIN_ENV := PLINTH_COMPONENTIZE_PY=$(CURDIR)/target/toolchains/venv/bin/componentize-py \
	PLINTH_NODE_MODULES=$(CURDIR)/target/toolchains/node_modules
# Packs the Python/JavaScript tools in $(1)/ named $(2) into $(3)/, each only
# when its sources or the SDKs changed since it was last packed (a build
# takes seconds).
define pack_portable
	@mkdir -p $(3)
	@for p in $(2); do \
		f=$$(echo $$p | tr - _); out=$(3)/$$f.wasm; \
		if [ -f $$out ] && [ -z "$$(find -L $(1)/$$p sdk/python sdk/js -newer $$out -print -quit)" ]; then continue; fi; \
		$(TOOLCHAIN_ENV) ./target/debug/plinth pack $(1)/$$p -o $$out || exit 1; \
	done
endef
PLUGIN_OUT := target/plugins
LISTEN     ?= 127.0.0.1:8080
WEATHER    ?= 127.0.0.1:8090
INBOX      ?= 127.0.0.1:8091
DATA       ?= ./plinth-data

.PHONY: help build wasm-target toolchains plugins fixtures browser postgres deploy-check mcp-clients schemathesis openapi screenshots run test check bench bench-smoke wrk peer oci-tools system-packages layers fuzz

help:
	@echo "make run      build everything and serve the example tools on http://$(LISTEN)"
	@echo "make test     build the example tools and run every test"
	@echo "make plugins  build and pack the example tools into $(PLUGIN_OUT)/"
	@echo "make build    build the plinth binary"
	@echo "make openapi  write the server's OpenAPI document to docs/openapi.json"
	@echo "make layers   check that the host's modules import in one direction (ARCHITECTURE.md)"
	@echo "make screenshots  retake the catalog's pictures in docs/catalog/ (browser tests)"
	@echo "make bench    run the benchmark harness (release build) and write bench/RESULTS.md"
	@echo "make image    build the server's container image ($(IMAGE)) with podman, from Debian packages"
	@echo "make fuzz     run every fuzz target for FUZZ_SECONDS (default 60) each (nightly; not part of make test)"

# The tools are WebAssembly components: they need Rust's wasm32-wasip2 target.
wasm-target:
	@rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2

build:
	$(CARGO) build -p plinth -p fake-weather -p fake-inbox

# The pinned toolchains that build Python and JavaScript tools
# (componentize-py in a venv, componentize-js from npm), in target/toolchains.
# Quick when nothing changed.
toolchains:
	@./sdk/toolchains/install $(CURDIR)/target/toolchains

plugins: wasm-target build toolchains
	$(CARGO) build --target wasm32-wasip2 --profile plugin $(addprefix -p ,$(PLUGINS))
	@mkdir -p $(PLUGIN_OUT)
	@for p in $(PLUGINS); do \
		f=$$(echo $$p | tr - _); \
		./target/debug/plinth pack plugins/$$p --wasm $(WASM_OUT)/$$f.wasm -o $(PLUGIN_OUT)/$$f.wasm || exit 1; \
	done
	$(call pack_portable,plugins,$(PORTABLE_PLUGINS),$(PORTABLE_OUT))

# Serves the example tools, Rust, Python and JavaScript alike, and a second,
# compatible version of echo (tests/fixtures/echo-v2: `--plugins` deploys in
# file name order, so echo.wasm is version 1 and echo_v2.wasm version 2), so
# the catalog has two versions to compare. The weather tools talk to a
# stand-in weather service (tests/fake-weather), started here on $(WEATHER)
# and stopped with the server.
run: plugins
	$(CARGO) build --target wasm32-wasip2 --profile plugin -p fixture-echo-v2 $(addprefix -p ,$(ACCOUNT_PLUGINS))
	@rm -rf target/run-plugins && mkdir -p target/run-plugins && cp $(PLUGIN_OUT)/*.wasm $(PORTABLE_OUT)/*.wasm target/run-plugins/
	@./target/debug/plinth pack tests/fixtures/echo-v2 --wasm $(WASM_OUT)/fixture_echo_v2.wasm -o target/run-plugins/echo_v2.wasm
	@for p in $(ACCOUNT_PLUGINS); do f=$$(echo $$p | tr - _); \
		./target/debug/plinth pack plugins/$$p --wasm $(WASM_OUT)/$$f.wasm -o target/run-plugins/$$f.wasm || exit 1; done
	@printf '{"displayName": "Fake Inbox", "issuer": "http://%s", "clientId": "plinth", "clientSecret": "fake-inbox-secret", "apiHosts": ["%s"]}\n' \
		$(INBOX) $(INBOX) > target/inbox-provider.json
	@./target/debug/fake-weather $(WEATHER) & weather=$$!; \
	./target/debug/fake-inbox $(INBOX) --provider --redirect-uri http://$(LISTEN)/connections/callback & inbox=$$!; \
	trap "kill $$weather $$inbox 2>/dev/null" EXIT INT TERM; \
	./target/debug/plinth serve --listen $(LISTEN) --data $(DATA) --plugins target/run-plugins \
		--authorization-provider inbox=target/inbox-provider.json --oauth-allow-http \
		--tool-config my_inbox.inbox-url=http://$(INBOX) \
		--tool-config lookup_weather_by_city.backend-url=http://$(WEATHER) \
		--tool-config get_daily_forecast.backend-url=http://$(WEATHER) \
		--tool-config daily_forecast.backend-url=http://$(WEATHER) --allow-private-cidr 127.0.0.0/8

fixtures: plugins toolchains
	$(CARGO) build --target wasm32-wasip2 --profile plugin $(addprefix -p fixture-,$(FIXTURES)) $(addprefix -p ,$(ACCOUNT_PLUGINS))
	@mkdir -p target/fixtures
	@for p in $(ACCOUNT_PLUGINS); do \
		f=$$(echo $$p | tr - _); \
		./target/debug/plinth pack plugins/$$p --wasm $(WASM_OUT)/$$f.wasm -o target/fixtures/$$f.wasm || exit 1; \
	done
	@for p in $(FIXTURES); do \
		f=$$(echo $$p | tr - _); \
		./target/debug/plinth pack tests/fixtures/$$p --wasm $(WASM_OUT)/fixture_$$f.wasm -o target/fixtures/$$f.wasm || exit 1; \
	done
	$(call pack_portable,tests/fixtures,$(PORTABLE_FIXTURES),target/fixtures)

# Ends with one summary line over every test binary (cargo prints one
# result line per binary, the last of which may be a crate without tests),
# and, when some failed, what each failure said (its first lines, without
# backtraces): the end of a long log is what a CI page shows.
test: fixtures browser mcp-clients toolchains postgres schemathesis oci-tools layers
	@set -o pipefail; status=0; PLINTH_TEST_PLUGINS=$(CURDIR)/$(PLUGIN_OUT) PLINTH_TEST_FIXTURES=$(CURDIR)/target/fixtures \
		PLINTH_TEST_MCP_CLIENTS=$(CURDIR)/target/mcp-clients PLINTH_TEST_TOOLCHAINS=$(CURDIR)/target/toolchains \
		PLINTH_TEST_SCHEMATHESIS=$(CURDIR)/target/schemathesis PLINTH_TEST_OCI_TOOLS=$(OCI_TOOLS)/bin \
		$(CARGO) test --no-fail-fast 2>&1 | tee target/test.log || status=$$?; \
	if [ $$status -ne 0 ]; then \
		echo "== what each failing test said (first lines; the whole log is target/test.log) =="; \
		awk 'BEGIN { shown = 99 } /^---- .* stdout ----$$/ { shown = 0; print; next } /^stack backtrace:|^note: / { shown = 99 } \
			shown < 12 && !/^ +[0-9]+: |^ +at / { if (length($$0) > 400) $$0 = substr($$0, 1, 400) "…"; print; shown++ }' target/test.log | \
			grep -v "^$$" | tail -n 400; \
	fi; \
	awk '/^test result:/ { passed += $$4; failed += $$6 } END { printf "summary: %d passed, %d failed\n", passed, failed }' target/test.log; \
	exit $$status

# Retakes the catalog's pictures in docs/catalog/ (the README shows them):
# the catalog's browser tests, saving their screenshots there instead of in
# target/screenshots/.
screenshots: fixtures browser
	PLINTH_TEST_PLUGINS=$(CURDIR)/$(PLUGIN_OUT) PLINTH_TEST_FIXTURES=$(CURDIR)/target/fixtures \
		PLINTH_SCREENSHOTS=$(CURDIR)/docs/catalog $(CARGO) test -p plinth --test e2e catalog_browser

# Every Debian package the build, the tests and the benchmark use, in one
# apt run: two at once would fight over dpkg's lock (.ci/run installs them
# first, then builds the OCI tools beside the rest). Each target below still
# installs its own when it is missing.
# iptables: netavark (podman's network stack) sets up published ports with it
# and fails with "No such file or directory" where it is missing.
CONTAINER_PACKAGES := podman runc netavark aardvark-dns iptables mmdebstrap podman-compose curl
DEBIAN_PACKAGES := chromium chromium-driver postgresql docker-registry wrk $(CONTAINER_PACKAGES)
system-packages:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	[ -z "$$missing" ] || { apt-get update -qq && apt-get install -y -qq $$missing; }

# The browser tests (tests/e2e/browser.rs) drive a headless Chromium through
# ChromeDriver, both from Debian.
browser:
	@[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || \
		{ apt-get update -qq && apt-get install -y -qq chromium chromium-driver; }

# The store's tests and the fleet's (host/src/store/suite.rs,
# tests/e2e/fleet.rs) start their own PostgreSQL from Debian's server binaries
# (host/src/testing.rs); this installs them when they are missing.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq postgresql; }

# Validates deploy/ (Kubernetes manifests, compose file, nginx.conf) with
# pinned validators from PyPI and Debian, installed into target/deploy-check.
deploy-check:
	@./deploy/check $(CURDIR)/target/deploy-check

# The MCP clients the tests drive (tests/e2e/mcp_*.rs): the conformance
# suite and the Inspector from npm, the Python SDK in a venv, and Node 22 from
# npm when the machine's is older. Quick when nothing changed.
mcp-clients:
	@./tests/mcp-clients/install $(CURDIR)/target/mcp-clients

# The API testing tools tests/e2e/openapi.rs runs against the served OpenAPI
# document: schemathesis and openapi-spec-validator from PyPI, pinned, in a
# venv. Quick when nothing changed.
schemathesis:
	@./tests/schemathesis/install $(CURDIR)/target/schemathesis

# The committed copy of the OpenAPI document (docs/openapi.json) from the
# code; tests/e2e/openapi.rs fails when it differs from what the server serves.
openapi: build
	./target/debug/plinth openapi > docs/openapi.json.new && mv docs/openapi.json.new docs/openapi.json

# The container images (deploy/image, docs/deploying.md), built with podman
# from Debian packages: nothing is pulled. `make image`: the server with the
# release binary, reporting its size and start time; `make image-fleet`: the
# PostgreSQL and nginx images deploy/compose.yaml runs beside it. The tests'
# images (tests/e2e/container.rs) take the debug binary the tests build
# anyway: a release build would compile wasmtime a second time.
IMAGE ?= plinth:local
.PHONY: container-tools image image-fleet test-images image-test
# make test builds the tests' images first (tests/e2e/container.rs runs them).
test: test-images
container-tools:
	@missing=$$(for p in $(CONTAINER_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	[ -z "$$missing" ] || { apt-get update -qq && apt-get install -y -qq $$missing; }
image: plugins container-tools
	$(CARGO) build --release --locked -p plinth
	./deploy/image/build --binary target/release/plinth --plugins $(PLUGIN_OUT) --tag $(IMAGE) --report --fresh-base
image-fleet: container-tools
	FRESH_BASE=1 ./deploy/image/build-postgres --postgres plinth-postgres:15 --nginx plinth-nginx:local
test-images: plugins container-tools
	./deploy/image/build --binary target/debug/plinth --plugins $(PLUGIN_OUT) --tag localhost/plinth:test
	./deploy/image/build-postgres --postgres localhost/plinth-postgres:test --nginx localhost/plinth-nginx:test
image-test: test-images fixtures
	PLINTH_TEST_PLUGINS=$(CURDIR)/$(PLUGIN_OUT) PLINTH_TEST_FIXTURES=$(CURDIR)/target/fixtures \
		$(CARGO) test -p plinth --test e2e container::

# The HTTP arms use wrk as the load generator (a separate process).
wrk:
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }

# The peer arm: `wasmtime serve` of the wasmtime version Plinth embeds,
# built from crates.io with only what `serve` needs (cached in target/peer:
# cargo install does nothing when it is already there), and echo as a plain
# wasi:http component (bench/peer-echo).
WASMTIME_VERSION := $(shell sed -n 's/^wasmtime = { version = "=\([0-9.]*\)".*/\1/p' host/Cargo.toml)
PEER_WASMTIME    := target/peer/bin/wasmtime
peer: wasm-target
	$(CARGO) install wasmtime-cli --version =$(WASMTIME_VERSION) --locked --no-default-features \
		--features run,serve,component-model-async,cranelift,pooling-allocator,parallel-compilation --root target/peer --target-dir target/peer-build
	$(CARGO) build --target wasm32-wasip2 --profile plugin -p peer-echo

# The OCI registry tests' tools: Debian's docker-registry, and wkg, wasmsign2
# and cosign-sign (tests/oci-tools/cosign-sign: Debian has no cosign) built
# from source into $(OCI_TOOLS)/bin, outside target/ so that a fresh clone or
# `cargo clean` keeps them. Debug builds without debuginfo: the cheapest that
# work (test tools need no speed), and without debuginfo a dependency that is
# also a build or proc-macro dependency builds the same in all three, so the
# shared target dir reuses it. cosign-sign's Cargo.lock pins wkg's versions of
# the crates they share (aws-lc-sys's C build above all), for the same reason.
# cargo install of an exact version that is installed does nothing;
# cosign-sign is rebuilt only when its sources are newer than the binary.
# $(OCI_TOOLS)/build can go when disk matters.
OCI_TOOLS ?= $(HOME)/.cache/plinth/oci-tools
COSIGN_SIGN := tests/oci-tools/cosign-sign
OCI_TOOLS_INSTALL := CARGO_PROFILE_DEV_DEBUG=0 $(CARGO) install --locked --debug --root $(OCI_TOOLS) --target-dir $(OCI_TOOLS)/build
oci-tools:
	@[ -x /usr/bin/docker-registry ] || { apt-get update -qq && apt-get install -y -qq docker-registry; }
	$(OCI_TOOLS_INSTALL) wkg --version =0.16.1
	$(OCI_TOOLS_INSTALL) wasmsign2-cli --version =0.2.8
	@[ -x $(OCI_TOOLS)/bin/cosign-sign ] && [ -z "$$(find $(COSIGN_SIGN)/Cargo.toml $(COSIGN_SIGN)/Cargo.lock \
		$(COSIGN_SIGN)/src -newer $(OCI_TOOLS)/bin/cosign-sign -print -quit)" ] || \
		$(OCI_TOOLS_INSTALL) --path $(COSIGN_SIGN)

# BASELINE=path/to/another/release/plinth adds arm 11: echo on this build ÷ on that one.
bench: fixtures wrk postgres peer
	$(CARGO) build --release -p plinth -p fake-weather -p plinth-bench
	./target/release/plinth-bench --plinth target/release/plinth --fake-weather target/release/fake-weather \
		--plugins $(PLUGIN_OUT) --fixtures target/fixtures --out bench/RESULTS.md \
		--wasmtime $(PEER_WASMTIME) --peer-echo $(WASM_OUT)/peer_echo.wasm $(if $(BASELINE),--baseline $(BASELINE))

# A few seconds of every arm, no thresholds: keeps the harness building and
# running (CI). Uses the debug build the tests already made.
bench-smoke: fixtures wrk postgres
	$(CARGO) build -p plinth-bench
	./target/debug/plinth-bench --smoke --plinth target/debug/plinth --fake-weather target/debug/fake-weather \
		--plugins $(PLUGIN_OUT) --fixtures target/fixtures

# The import-direction check (ARCHITECTURE.md, "Layers"): fails on any
# import cycle between the host's modules and any use of a higher layer,
# naming the uses that close it. Its own unit tests plant both. A cargo
# invocation of its own, so its parser never changes the host's build.
layers:
	@$(CARGO) test -q -p plinth-layers
	@$(CARGO) run -q -p plinth-layers

check: layers
	$(CARGO) fmt --all -- --check
	./host/unified-features/check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy -p plinth-bench --all-targets -- -D warnings
	$(CARGO) clippy --target wasm32-wasip2 -p plinth-sdk $(addprefix -p ,$(PLUGINS) $(ACCOUNT_PLUGINS)) -- -D warnings

# The fuzzers (fuzz/, cargo-fuzz on nightly): every target, or FUZZ_TARGETS,
# for FUZZ_SECONDS each; not part of `make test` or CI. docs/security.md.
FUZZ_SECONDS ?= 60
fuzz: plugins
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	FUZZ_SECONDS=$(FUZZ_SECONDS) ./fuzz/run $(FUZZ_TARGETS)
