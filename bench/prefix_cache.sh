#!/bin/sh
# The prefix-cache hit ratio and TTFT by prefill routing policy: 2 prefill + 2 decode pdsim workers
# with their prefix cache on, behind pdrouter with --prefill-policy $POLICY, loaded by pdbench with the
# shared-prefix workload (K system prompts of P tokens + a unique suffix). The hit ratio is the prefills'
# own count from /pdsim/stats (hit tokens / prompt tokens, both prefills together): behind a PD router
# the client sees the decode's answer, and a pdsim decode computes no prompt (it reports cached_tokens 0).
# Prints one line of results; exits non-zero when pdbench saw a failure.
#   BUILD=build OUT=/tmp/pdr-prefix POLICY=round_robin bench/prefix_cache.sh
#   POLICY=random PREFIXES=8 PREFIX_TOKENS=1024 ISL=1280 bench/prefix_cache.sh
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
mkdir -p "$OUT"
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
for i in 1 2; do
    "$BUILD/pdsim" --role prefill --port $((PORT + i)) --bootstrap-port $((PORT + 10 + i)) \
        --kv-bytes-per-token 16 --prefill-us-per-token "$PREFILL_US" --prefix-cache-tokens "$CACHE_TOKENS" \
        >"$OUT/prefill$i.log" 2>&1 &
    pids="$pids $!"
    "$BUILD/pdsim" --role decode --port $((PORT + 2 + i)) --kv-bytes-per-token 16 \
        --decode-us-per-token "$DECODE_US" >"$OUT/decode$i.log" 2>&1 &
    pids="$pids $!"
done
"$BUILD/pdrouter" --pd-disaggregation --host 127.0.0.1 --port "$PORT" --admin-port 0 --access-log off \
    --prefill "http://127.0.0.1:$((PORT + 1))" $((PORT + 11)) --prefill "http://127.0.0.1:$((PORT + 2))" $((PORT + 12)) \
    --decode "http://127.0.0.1:$((PORT + 3))" --decode "http://127.0.0.1:$((PORT + 4))" \
    --prefill-policy "$POLICY" --drain-grace-ms 0 >"$OUT/router.log" 2>&1 &
pids="$pids $!"
"$BUILD/pdbench" --url "http://127.0.0.1:$PORT" --health-url "http://127.0.0.1:$PORT/readiness" --quiet \
    --profiles "$ISL/$OSL" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --seed "$SEED" --warmup 0 \
    --workload shared-prefix --prefixes "$PREFIXES" --prefix-tokens "$PREFIX_TOKENS" --json "$OUT/pdbench.json"
python3 - "$OUT" "$POLICY" "$PORT" <<'PY'
import json, sys, urllib.request
out, policy, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
hit = miss = 0
for p in (port + 1, port + 2):
    pc = json.load(urllib.request.urlopen("http://127.0.0.1:%d/pdsim/stats" % p))["prefix_cache"]
    hit += pc["hit_tokens"]
    miss += pc["miss_tokens"]
run = json.load(open(out + "/pdbench.json"))["runs"][0]
t = run["ttft_ms"]
print("| %s | %d | %d | %.1f%% | %.1f | %.1f |" % (policy, run["requests"], run["failed"],
      100.0 * hit / max(1, hit + miss), t["p50"], t["p99"]))
PY
