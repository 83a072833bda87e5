#!/bin/sh
# Conditional disaggregation: TTFT of short prompts with and without it. One pdsim prefill, one pdsim
# decode (and, for sglang, one regular pdsim --role both) behind pdrouter, loaded by pdbench with
# ISL-word prompts. DISAGG=off: every request is disaggregated; DISAGG=on: disaggregation.min_prefill_chars
# is above the prompts' size, so they skip the prefill (vllm: the decode computes them, pdsim
# --local-prefill; sglang: the regular worker does). Every worker computes a prompt at PREFILL_US per
# token, so both paths pay the same compute; what differs is the second hop and the KV transfer.
# Prints one Markdown table line; exits non-zero when pdbench saw a failure.
#   BUILD=build PROTOCOL=vllm DISAGG=on CONCURRENCY=8 bench/disagg.sh
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/pdr-disagg}
PROTOCOL=${PROTOCOL:-vllm}
DISAGG=${DISAGG:-on}
ISL=${ISL:-64}
OSL=${OSL:-16}
CONCURRENCY=${CONCURRENCY:-1}
REQUESTS=${REQUESTS:-300}
PREFILL_US=${PREFILL_US:-20}  # per computed prompt token, on every worker
DECODE_US=${DECODE_US:-1000}  # per output token
KVBPT=${KVBPT:-4096}          # KV bytes per prompt token moved prefill -> decode
SEED=${SEED:-1}
PORT=${PORT:-18900}
mkdir -p "$OUT"
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM
"$BUILD/pdsim" --role prefill --port $((PORT + 1)) --bootstrap-port $((PORT + 11)) --kv-bytes-per-token "$KVBPT" \
    --prefill-us-per-token "$PREFILL_US" >"$OUT/prefill.log" 2>&1 &
pids="$pids $!"
"$BUILD/pdsim" --role decode --port $((PORT + 2)) --kv-bytes-per-token "$KVBPT" --local-prefill \
    --prefill-us-per-token "$PREFILL_US" --decode-us-per-token "$DECODE_US" >"$OUT/decode.log" 2>&1 &
pids="$pids $!"
"$BUILD/pdsim" --role both --port $((PORT + 3)) --kv-bytes-per-token "$KVBPT" \
    --prefill-us-per-token "$PREFILL_US" --decode-us-per-token "$DECODE_US" >"$OUT/regular.log" 2>&1 &
pids="$pids $!"
MIN=0
[ "$DISAGG" = on ] && MIN=100000
cat >"$OUT/router.yaml" <<EOF
listen: { host: 127.0.0.1, port: $PORT }
admin: { host: 127.0.0.1, port: 0 }
protocol: $PROTOCOL
workers:
  prefill: [ { url: "http://127.0.0.1:$((PORT + 1))", bootstrap_port: $((PORT + 11)) } ]
  decode: [ "http://127.0.0.1:$((PORT + 2))" ]
  regular: [ "http://127.0.0.1:$((PORT + 3))" ]
disaggregation: { min_prefill_chars: $MIN, min_prefill_tokens: $MIN }
log: { access_log: "off" }
lifecycle: { drain_grace_ms: 0 }
EOF
"$BUILD/pdrouter" --config "$OUT/router.yaml" >"$OUT/router.log" 2>&1 &
pids="$pids $!"
API=generate
[ "$PROTOCOL" = vllm ] && API=completions
"$BUILD/pdbench" --url "http://127.0.0.1:$PORT" --health-url "http://127.0.0.1:$PORT/readiness" --quiet \
    --api "$API" --profiles "$ISL/$OSL" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --seed "$SEED" \
    --json "$OUT/pdbench.json"
python3 - "$OUT" "$PROTOCOL" "$DISAGG" "$PORT" <<'PY'
import json, sys, urllib.request
out, proto, disagg, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
pre = json.load(urllib.request.urlopen("http://127.0.0.1:%d/pdsim/stats" % (port + 1)))["requests"]
run = json.load(open(out + "/pdbench.json"))["runs"][0]
t = run["ttft_ms"]
print("| %s | %s | %d | %d | %d | %d | %.2f | %.2f |" % (proto, disagg, run["concurrency"], run["requests"],
      run["failed"], pre, t["p50"], t["p99"]))
PY
