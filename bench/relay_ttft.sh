#!/bin/sh
# TTFT through pdrouter minus the decode's own first token, in both pd.relay modes, measured by pdbench
# against a local pdsim pair whose prefill answers its HTTP request LAG_MS after its KV has left (a real
# sglang prefill answers up to a forward pass later). The decode stamps its first token
# (--stamp-first-token: CLOCK_MONOTONIC µs when it wrote it); pdbench subtracts that from the moment the
# event reached it, so the number is the router's added TTFT (same host). Prints one table; exits non-zero
# when pdbench saw a failure.
#   BUILD=build OUT=/tmp/pdr-relay LAG_MS=300 CONCURRENCY=1,8 PROFILES=128/32,2048/32 bench/relay_ttft.sh
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/pdr-relay}
LAG_MS=${LAG_MS:-300}
CONCURRENCY=${CONCURRENCY:-1,8}
PROFILES=${PROFILES:-128/32,2048/32}
REQUESTS=${REQUESTS:-40}
DECODE_US=${DECODE_US:-1000}
PORT=${PORT:-18700}
mkdir -p "$OUT"
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
"$BUILD/pdsim" --role prefill --port $((PORT + 1)) --bootstrap-port $((PORT + 11)) --kv-bytes-per-token 64 \
    --prefill-answer-lag-ms "$LAG_MS" >"$OUT/prefill.log" 2>&1 &
pids="$pids $!"
"$BUILD/pdsim" --role decode --port $((PORT + 2)) --kv-bytes-per-token 64 --stamp-first-token \
    --decode-us-per-token "$DECODE_US" >"$OUT/decode.log" 2>&1 &
pids="$pids $!"
for mode in after_prefill first_byte; do
    cat >"$OUT/$mode.yaml" <<CONF
listen: { host: 127.0.0.1, port: $PORT }
admin: { port: 0 }
workers:
  prefill: [ { url: "http://127.0.0.1:$((PORT + 1))", bootstrap_port: $((PORT + 11)) } ]
  decode: [ { url: "http://127.0.0.1:$((PORT + 2))" } ]
pd: { relay: $mode }
lifecycle: { drain_grace_ms: 0 }
log: { access_log: off }
CONF
    "$BUILD/pdrouter" --config "$OUT/$mode.yaml" >"$OUT/router-$mode.log" 2>&1 &
    rpid=$!
    pids="$pids $rpid"
    "$BUILD/pdbench" --url "http://127.0.0.1:$PORT" --health-url "http://127.0.0.1:$PORT/readiness" --quiet \
        --profiles "$PROFILES" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --seed 1 \
        --json "$OUT/$mode.json" --no-plots --report "$OUT/report-$mode"
    kill "$rpid"
    wait "$rpid" 2>/dev/null || true
done
python3 - "$OUT" "$LAG_MS" <<'PY'
import json, sys
out, lag = sys.argv[1], sys.argv[2]
print("prefill answer lag %s ms; router overhead = client's first-token arrival - decode's first-token write" % lag)
print()
print("| pd.relay | ISL/OSL | conc | requests | failed | TTFT p50 ms | overhead p50 ms | overhead p99 ms | overhead max ms |")
print("|---|---|---|---|---|---|---|---|---|")
for mode in ("after_prefill", "first_byte"):
    res = json.load(open("%s/%s.json" % (out, mode)))
    for run in res["runs"]:
        o, t = run["router_overhead_us"], run["ttft_ms"]
        print("| %s | %d/%d | %d | %d | %d | %.2f | %.3f | %.3f | %.3f |" % (
            mode, run["isl"], run["osl"], run["concurrency"], run["requests"], run["failed"], t["p50"],
            o["p50"] / 1e3, o["p99"] / 1e3, o["max"] / 1e3))
PY
