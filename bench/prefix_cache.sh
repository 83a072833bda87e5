#!/bin/sh
# The prefix-cache hit ratio and TTFT by prefill routing policy: 2 prefill + 2 decode pdsim workers
# with their prefix cache on, behind pdrouter with --prefill-policy $POLICY, loaded by pdbench with the
# shared-prefix workload (K system prompts of P tokens + a unique suffix). The hit ratio is the prefills'
# own count from /pdsim/stats (hit tokens / prompt tokens, both prefills together): behind a PD router
# the client sees the decode's answer, and a pdsim decode computes no prompt (it reports cached_tokens 0).
# With POLICY=precise_prefix the prefills publish their KV events (--kv-events-endpoint) and the router
# reads a YAML config that names each prefill's endpoint; INPUT_IDS=1 makes pdbench send input_ids (the
# token ids precise_prefix's index matches; with text it routes by the prefix tree alone).
# Prints one line of results; exits non-zero when pdbench saw a failure.
#   BUILD=build OUT=/tmp/pdr-prefix POLICY=round_robin bench/prefix_cache.sh
#   POLICY=random PREFIXES=8 PREFIX_TOKENS=1024 ISL=1280 bench/prefix_cache.sh
#   POLICY=precise_prefix INPUT_IDS=1 bench/prefix_cache.sh
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/pdr-prefix}
POLICY=${POLICY:-round_robin}
PREFIXES=${PREFIXES:-8}
PREFIX_TOKENS=${PREFIX_TOKENS:-1024}
ISL=${ISL:-1280}
OSL=${OSL:-16}
CONCURRENCY=${CONCURRENCY:-8}
REQUESTS=${REQUESTS:-400}
CACHE_TOKENS=${CACHE_TOKENS:-6144} # per prefill: 6 of the 8 system prompts, less the suffixes
PREFILL_US=${PREFILL_US:-50}        # per computed prompt token
DECODE_US=${DECODE_US:-1000}
SEED=${SEED:-1}
PORT=${PORT:-18800}
INPUT_IDS=${INPUT_IDS:-0}
mkdir -p "$OUT"
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for i in 1 2; do
    kv=""
    [ "$POLICY" = precise_prefix ] && kv="--kv-events-endpoint tcp://127.0.0.1:$((PORT + 20 + i))"
    # shellcheck disable=SC2086 # $kv is two words or none
    "$BUILD/pdsim" --role prefill --port $((PORT + i)) --bootstrap-port $((PORT + 10 + i)) \
        --kv-bytes-per-token 16 --prefill-us-per-token "$PREFILL_US" --prefix-cache-tokens "$CACHE_TOKENS" \
        $kv >"$OUT/prefill$i.log" 2>&1 &
    pids="$pids $!"
    "$BUILD/pdsim" --role decode --port $((PORT + 2 + i)) --kv-bytes-per-token 16 \
        --decode-us-per-token "$DECODE_US" >"$OUT/decode$i.log" 2>&1 &
    pids="$pids $!"
done
if [ "$POLICY" = precise_prefix ]; then
    cat >"$OUT/router.yaml" <<EOF
listen: { host: 127.0.0.1, port: $PORT }
admin: { port: 0 }
log: { access_log: "off" }
lifecycle: { drain_grace_ms: 0 }
policy: { prefill: precise_prefix, decode: least_load }
workers:
  prefill:
    - { url: http://127.0.0.1:$((PORT + 1)), bootstrap_port: $((PORT + 11)), kv_events: tcp://127.0.0.1:$((PORT + 21)) }
    - { url: http://127.0.0.1:$((PORT + 2)), bootstrap_port: $((PORT + 12)), kv_events: tcp://127.0.0.1:$((PORT + 22)) }
  decode: [ http://127.0.0.1:$((PORT + 3)), http://127.0.0.1:$((PORT + 4)) ]
EOF
    "$BUILD/pdrouter" --config "$OUT/router.yaml" >"$OUT/router.log" 2>&1 &
else
    "$BUILD/pdrouter" --pd-disaggregation --host 127.0.0.1 --port "$PORT" --admin-port 0 --access-log off \
        --prefill "http://127.0.0.1:$((PORT + 1))" $((PORT + 11)) --prefill "http://127.0.0.1:$((PORT + 2))" $((PORT + 12)) \
        --decode "http://127.0.0.1:$((PORT + 3))" --decode "http://127.0.0.1:$((PORT + 4))" \
        --prefill-policy "$POLICY" --drain-grace-ms 0 >"$OUT/router.log" 2>&1 &
fi
pids="$pids $!"
ids=""
[ "$INPUT_IDS" = 1 ] && ids="--input-ids"
# shellcheck disable=SC2086 # $ids is one word or none
"$BUILD/pdbench" $ids --url "http://127.0.0.1:$PORT" --health-url "http://127.0.0.1:$PORT/readiness" --quiet \
    --profiles "$ISL/$OSL" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --seed "$SEED" --warmup 0 \
    --workload shared-prefix --prefixes "$PREFIXES" --prefix-tokens "$PREFIX_TOKENS" --json "$OUT/pdbench.json"
python3 - "$OUT" "$POLICY" "$PORT" "$INPUT_IDS" <<'PY'
import json, sys, urllib.request
out, policy, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
hit = miss = 0
for p in (port + 1, port + 2):
    pc = json.load(urllib.request.urlopen("http://127.0.0.1:%d/pdsim/stats" % p))["prefix_cache"]
    hit += pc["hit_tokens"]
    miss += pc["miss_tokens"]
run = json.load(open(out + "/pdbench.json"))["runs"][0]
t = run["ttft_ms"]
if policy == "precise_prefix":
    # Where the picks came from (stderr: the result line stays one line).
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port).read().decode()
    for line in text.splitlines():
        if line.startswith(("pdr_precise_prefix_decisions_total", "pdr_kv_events_gaps_total", "pdr_kv_index_bytes")):
            print(line, file=sys.stderr)
print("| %s%s | %d | %d | %.1f%% | %.1f | %.1f |" % (policy, " (input_ids)" if sys.argv[4] == "1" else "", run["requests"], run["failed"],
      100.0 * hit / max(1, hit + miss), t["p50"], t["p99"]))
PY
