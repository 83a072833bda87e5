#!/bin/sh
# Prefix-cache hit ratio, TTFT and prefill load spread with several pdrouter replicas in front of the
# same workers, as behind one Kubernetes Service: pdbench spreads its requests over the replicas in turn
# (--url A,B,C). PREFILLS pdsim prefills with their prefix cache on and DECODES decodes; each replica has
# the same worker list and prefill policy $POLICY (round_robin, cache_aware...) and, for cache_aware,
# cache_aware.seed $SEED_MODE (smallest_tree: sglang's rule; consistent_hash). The hit ratio is the
# prefills' own count from /pdsim/stats (hit tokens over prompt tokens, all prefills together): behind a
# PD router the client sees the decode's answer, and a pdsim decode computes no prompt (it reports
# cached_tokens 0). The spread is each prefill's share of the requests, max over mean.
# With POLICY=precise_prefix every prefill publishes its KV events (--kv-events-endpoint), every replica
# subscribes to all of them (the worker entries' kv_events), and pdbench sends input_ids (INPUT_IDS=1,
# the default for that policy: the token ids the index matches).
# Prints one markdown row; exits non-zero when pdbench saw a failed request or a non-2xx answer.
#   BUILD=build REPLICAS=3 POLICY=cache_aware SEED_MODE=consistent_hash bench/replicas.sh
#   REPLICAS=3 POLICY=precise_prefix bench/replicas.sh
#   WORKLOAD=multi-turn REPLICAS=1 POLICY=round_robin bench/replicas.sh
# API=chat sends /v1/chat/completions (pdbench --api chat) through a model directory made in $OUT/model (the
# llama3 fixture tokenizer and a Llama-3-like chat template): the routers' `tokenizer` and the prefills'
# --tokenizer both render the messages through that template, so precise_prefix matches chat by token ids.
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/pdr-replicas}
POLICY=${POLICY:-cache_aware}
SEED_MODE=${SEED_MODE:-consistent_hash}
LOAD_FACTOR=${LOAD_FACTOR:-1.5}     # cache_aware.hash_load_factor
HASH_CHARS=${HASH_CHARS:-256}       # cache_aware.hash_prefix_chars
REPLICAS=${REPLICAS:-3}
WORKLOAD=${WORKLOAD:-shared-prefix}
PREFILLS=${PREFILLS:-4}
DECODES=${DECODES:-2}
PREFIXES=${PREFIXES:-16}
PREFIX_TOKENS=${PREFIX_TOKENS:-1024}
TURNS=${TURNS:-4}
ISL=${ISL:-1280}
OSL=${OSL:-16}
CONCURRENCY=${CONCURRENCY:-12}
REQUESTS=${REQUESTS:-600}
CACHE_TOKENS=${CACHE_TOKENS:-6144} # per prefill: 4 of the 16 system prompts, plus suffixes
PREFILL_US=${PREFILL_US:-50}        # per computed prompt token
DECODE_US=${DECODE_US:-1000}
SEED=${SEED:-1}
PORT=${PORT:-21700}  # uses PORT+1 .. PORT+60+REPLICAS, and PORT+80+i for prefill i's KV events
API=${API:-generate}
INPUT_IDS=${INPUT_IDS:-$([ "$POLICY" = precise_prefix ] && [ "$API" = generate ] && echo 1 || echo 0)}
mkdir -p "$OUT"
rm -f "$OUT"/*.log
tok="" tokkey=""
if [ "$API" = chat ]; then
    mkdir -p "$OUT/model"
    cp "$(dirname "$0")/../tests/fixtures/tokenizer/llama3.tokenizer.json" "$OUT/model/tokenizer.json"
    python3 - "$OUT/model/tokenizer_config.json" <<'PY'
import json, sys
t = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
     "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
     "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": t}, open(sys.argv[1], "w"))
PY
    tok="--tokenizer $OUT/model"
    tokkey="tokenizer: $OUT/model\n"
fi
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

workers="workers:\n  prefill:\n"
i=1
while [ "$i" -le "$PREFILLS" ]; do
    kv="" kvkey=""
    if [ "$POLICY" = precise_prefix ]; then
        kv="--kv-events-endpoint tcp://127.0.0.1:$((PORT + 80 + i))"
        kvkey=", kv_events: tcp://127.0.0.1:$((PORT + 80 + i))"
    fi
    # shellcheck disable=SC2086 # $kv is two words or none
    "$BUILD/pdsim" --role prefill --port $((PORT + i)) --bootstrap-port $((PORT + 20 + i)) \
        --kv-bytes-per-token 16 --prefill-us-per-token "$PREFILL_US" --prefix-cache-tokens "$CACHE_TOKENS" \
        $kv $tok >"$OUT/prefill$i.log" 2>&1 &
    pids="$pids $!"
    workers="$workers    - { url: http://127.0.0.1:$((PORT + i)), bootstrap_port: $((PORT + 20 + i))$kvkey }\n"
    i=$((i + 1))
done
workers="$workers  decode:\n"
i=1
while [ "$i" -le "$DECODES" ]; do
    "$BUILD/pdsim" --role decode --port $((PORT + 40 + i)) --kv-bytes-per-token 16 \
        --decode-us-per-token "$DECODE_US" $tok >"$OUT/decode$i.log" 2>&1 &
    pids="$pids $!"
    workers="$workers    - http://127.0.0.1:$((PORT + 40 + i))\n"
    i=$((i + 1))
done
# Every worker up, on its own port (a port another program holds would send the requests elsewhere).
wait_ok() {
    n=0
    until curl -fs -o /dev/null "$1"; do
        n=$((n + 1))
        [ "$n" -lt 100 ] || { echo "$1 does not answer 200: $(tail -3 "$2")" >&2; exit 1; }
        sleep 0.1
    done
}
i=1
while [ "$i" -le "$PREFILLS" ]; do
    wait_ok "http://127.0.0.1:$((PORT + i))/health" "$OUT/prefill$i.log"
    i=$((i + 1))
done
i=1
while [ "$i" -le "$DECODES" ]; do
    wait_ok "http://127.0.0.1:$((PORT + 40 + i))/health" "$OUT/decode$i.log"
    i=$((i + 1))
done
if grep -l "address already in use" "$OUT"/prefill*.log "$OUT"/decode*.log 2>/dev/null; then
    echo "a worker's port is taken (set PORT)" >&2
    exit 1
fi
urls=""
i=1
while [ "$i" -le "$REPLICAS" ]; do
    rport=$((PORT + 60 + i))
    printf "listen: { host: 127.0.0.1, port: %d }\nadmin: { port: 0 }\nlog: { access_log: \"off\" }\n\
lifecycle: { drain_grace_ms: 0 }\npolicy: { prefill: %s, decode: least_load }\n\
cache_aware: { seed: %s, hash_load_factor: %s, hash_prefix_chars: %s }\n$tokkey$workers" "$rport" "$POLICY" \
        "$SEED_MODE" "$LOAD_FACTOR" "$HASH_CHARS" >"$OUT/router$i.yaml"
    "$BUILD/pdrouter" --config "$OUT/router$i.yaml" >"$OUT/router$i.log" 2>&1 &
    pids="$pids $!"
    urls="$urls${urls:+,}http://127.0.0.1:$rport"
    i=$((i + 1))
done
# Every replica ready (pdbench's own gate asks the first only).
i=1
while [ "$i" -le "$REPLICAS" ]; do
    wait_ok "http://127.0.0.1:$((PORT + 60 + i))/readiness" "$OUT/router$i.log"
    i=$((i + 1))
done
if [ "$WORKLOAD" = multi-turn ]; then
    wl="--workload multi-turn --turns $TURNS"
else
    wl="--workload shared-prefix --prefixes $PREFIXES --prefix-tokens $PREFIX_TOKENS"
fi
[ "$INPUT_IDS" = 1 ] && wl="$wl --input-ids"
[ "$API" = chat ] && wl="$wl --api chat"
# shellcheck disable=SC2086 # $wl is several flags
"$BUILD/pdbench" --url "$urls" --health-url "http://127.0.0.1:$((PORT + 61))/readiness" --quiet \
    --profiles "$ISL/$OSL" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --seed "$SEED" --warmup 0 \
    $wl --json "$OUT/pdbench.json"
label="$POLICY"
[ "$POLICY" = cache_aware ] && label="cache_aware, seed $SEED_MODE"
[ "$POLICY" = precise_prefix ] && label="precise_prefix, seed $SEED_MODE"
[ "$INPUT_IDS" = 1 ] && label="$label (input_ids)"
[ "$API" = chat ] && label="$label (chat)"
python3 - "$OUT" "$label" "$PORT" "$PREFILLS" "$REPLICAS" "$WORKLOAD" <<'PY'
import json, sys, urllib.request
out, label, port, prefills, replicas, workload = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
hit = miss = 0
reqs = []
for i in range(1, prefills + 1):
    s = json.load(urllib.request.urlopen("http://127.0.0.1:%d/pdsim/stats" % (port + i)))
    hit += s["prefix_cache"]["hit_tokens"]
    miss += s["prefix_cache"]["miss_tokens"]
    reqs.append(s["requests"])
run = json.load(open(out + "/pdbench.json"))["runs"][0]
t = run["ttft_ms"]
mean = sum(reqs) / float(len(reqs))
print("| %s | %s | %s | %d | %d | %.1f%% | %.1f | %.1f | %s | %.2f |" % (
    workload, replicas, label, run["requests"], run["failed"], 100.0 * hit / max(1, hit + miss), t["p50"], t["p99"],
    "/".join(str(r) for r in reqs), max(reqs) / mean if mean else 0))
PY
