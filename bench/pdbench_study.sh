#!/bin/sh
# The study's matrix (pdbench --matrix study) against a local pdsim pair behind pdrouter, as recorded in
# docs/benchmarks.md ("pdbench: the study's matrix on a pdsim cluster"). Timing knobs: pdsim prefills at
# PREFILL_US per prompt token and decodes at DECODE_US per output token; KV_BPT bytes of KV per token
# cross the TCP transport. The decode stamps its first token (--stamp-first-token), so the report has
# the router overhead column. Writes OUT/results.json and OUT/report.md with its plots.
#   BUILD=build OUT=/tmp/pdbench-study CONCURRENCY=1,8,32 bench/pdbench_study.sh
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/pdbench-study}
CONCURRENCY=${CONCURRENCY:-1,8,32}
PREFILL_US=${PREFILL_US:-5}
DECODE_US=${DECODE_US:-1000}
KV_BPT=${KV_BPT:-64}
PORT=${PORT:-18600}
mkdir -p "$OUT"
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
"$BUILD/pdsim" --role prefill --port $((PORT + 1)) --bootstrap-port $((PORT + 11)) --kv-bytes-per-token "$KV_BPT" \
    --prefill-us-per-token "$PREFILL_US" --decode-us-per-token "$DECODE_US" >"$OUT/prefill.log" 2>&1 &
pids="$pids $!"
"$BUILD/pdsim" --role decode --port $((PORT + 2)) --kv-bytes-per-token "$KV_BPT" --stamp-first-token \
    --prefill-us-per-token "$PREFILL_US" --decode-us-per-token "$DECODE_US" >"$OUT/decode.log" 2>&1 &
pids="$pids $!"
"$BUILD/pdrouter" --pd-disaggregation --host 127.0.0.1 --port "$PORT" --admin-port $((PORT + 9)) --drain-grace-ms 0 \
    --prefill "http://127.0.0.1:$((PORT + 1))" $((PORT + 11)) --decode "http://127.0.0.1:$((PORT + 2))" \
    >"$OUT/router.log" 2>&1 &
pids="$pids $!"
# The health gate waits for the router to see both workers healthy.
"$BUILD/pdbench" --url "http://127.0.0.1:$PORT" --health-url "http://127.0.0.1:$PORT/readiness" \
    --matrix study --concurrency "$CONCURRENCY" --seed 1 --json "$OUT/results.json" --report "$OUT" "$@"
