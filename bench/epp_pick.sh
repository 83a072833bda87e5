#!/bin/sh
# The endpoint picker alone: pdrouter with epp.enabled (one loop thread, the picker's) in front of pdsim
# workers, driven by bench/epp_bench (Envoy's ext_proc exchange from a local client, no gateway: each
# exchange is the request headers, the whole body and the half-close; the answers are the pick, the body
# given back and the OK trailers, every one checked).
#   bench/epp_pick.sh [bench]   epp_bench at concurrency 1 (1 connection) and CONC (CONNS connections):
#                               p50/p90/p99/max latency per exchange, exchanges/s and the picker's CPU per
#                               exchange; one markdown table
#   bench/epp_pick.sh callgrind instructions per pick of the pdrouter process under callgrind (N and then
#                               2N exchanges, the difference over N), beside bench/callgrind.sh's count
#                               per PD request of the front door (FRONT=off skips it)
#   bench/epp_pick.sh smoke     200 exchanges at concurrency 8 over 2 connections; fails on any wrong answer
# Env: BUILD (build), POLICY (the prefill policy, decode least_load: cache_aware by default; with
# precise_prefix the prefills publish KV events, the router subscribes and tokenizes every prompt with the
# llama3 fixture tokenizer; no request reaches a prefill here, so its index stays empty: the cost measured
# is the tokenizing and the lookup), PREFILLS (2), DECODES (4), REQUESTS (20000 per row), WARMUP (2000), CONC (64), CONNS (4),
# PROMPT_BYTES (512), N (2000, callgrind), KEEP (a directory: callgrind's outputs are copied there), PORT (the first of 20 ports; free ones are taken when unset).
set -eu
mode=${1:-bench}
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-$here/../build}
POLICY=${POLICY:-cache_aware}
PREFILLS=${PREFILLS:-2}
DECODES=${DECODES:-4}
REQUESTS=${REQUESTS:-20000}
WARMUP=${WARMUP:-2000}
CONC=${CONC:-64}
CONNS=${CONNS:-4}
PROMPT_BYTES=${PROMPT_BYTES:-512}
N=${N:-2000}
[ "$mode" = smoke ] && { PREFILLS=1; DECODES=2; }
if [ "$PREFILLS" -gt 4 ] || [ "$DECODES" -gt 6 ]; then
    echo "at most 4 prefills and 6 decodes" >&2
    exit 2
fi
work=$(mktemp -d /tmp/pdr-epp.XXXXXX)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        cp "$work"/cg.* "$KEEP"/ 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Ports: PORT.. PORT+19, or 20 free ones held open together while they are chosen: the listener 0, the
# picker 1, prefill i 1+i, its bootstrap 5+i and KV events 9+i, decode i 13+i (up to 4 prefills, 6 decodes).
if [ -n "${PORT:-}" ]; then
    ports=$(seq "$PORT" $((PORT + 19)))
else
    ports=$(python3 -c 'import socket
ss = [socket.socket() for _ in range(20)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
fi
port() { echo "$ports" | tr ' ' '\n' | sed -n "$(($1 + 1))p"; }
LISTEN=$(port 0)
EPP=$(port 1)

wait_ok() { # url
    n=0
    until curl -fs -o /dev/null "$1"; do
        n=$((n + 1))
        [ "$n" -lt 600 ] || { echo "$1 does not answer 200" >&2; tail -n 5 "$work"/*.log >&2; exit 1; }
        sleep 0.1
    done
}

tok="" tokkey=""
if [ "$POLICY" = precise_prefix ]; then
    mkdir -p "$work/model"
    cp "$here/../tests/fixtures/tokenizer/llama3.tokenizer.json" "$work/model/tokenizer.json"
    tok="--tokenizer $work/model"
    tokkey="tokenizer: $work/model"
fi
workers="workers:\n  prefill:\n"
i=1
while [ "$i" -le "$PREFILLS" ]; do
    p=$(port $((1 + i))) b=$(port $((5 + i))) kv="" kvkey=""
    if [ "$POLICY" = precise_prefix ]; then
        e=$(port $((9 + i)))
        kv="--prefix-cache-tokens 65536 --kv-events-endpoint tcp://127.0.0.1:$e"
        kvkey=", kv_events: tcp://127.0.0.1:$e"
    fi
    # shellcheck disable=SC2086 # $kv and $tok are two words or none
    "$BUILD/pdsim" --role prefill --port "$p" --bootstrap-port "$b" $kv $tok >"$work/prefill$i.log" 2>&1 &
    pids="$pids $!"
    workers="$workers    - { url: http://127.0.0.1:$p, bootstrap_port: $b$kvkey }\n"
    i=$((i + 1))
done
workers="$workers  decode:\n"
i=1
while [ "$i" -le "$DECODES" ]; do
    p=$(port $((13 + i)))
    "$BUILD/pdsim" --role decode --port "$p" >"$work/decode$i.log" 2>&1 &
    pids="$pids $!"
    workers="$workers    - http://127.0.0.1:$p\n"
    i=$((i + 1))
done
for u in $(printf "%b" "$workers" | grep -o "http://127.0.0.1:[0-9]*"); do
    wait_ok "$u/health"
done

# The router: its own listener, the picker on loop 0 (threads 1: the picker's loop is the whole process).
# HEALTH_MS: callgrind counts per exchange, so its health checks are rare there.
health_ms=1000
[ "$mode" = callgrind ] && health_ms=600000
printf "listen: { host: 127.0.0.1, port: %s }\nadmin: { port: 0 }\nthreads: 1\nlog: { access_log: \"off\", level: warn }\n\
health: { interval_ms: %s }\npolicy: { prefill: %s, decode: least_load }\n\
epp: { enabled: true, host: 127.0.0.1, port: %s, health_port: 0 }\n%s\n%b" \
    "$LISTEN" "$health_ms" "$POLICY" "$EPP" "$tokkey" "$workers" >"$work/router.yaml"

router_start() { # [wrapper...]: starts pdrouter, sets rpid
    "$@" "$BUILD/pdrouter" --config "$work/router.yaml" >"$work/router.log" 2>&1 &
    rpid=$!
    pids="$pids $rpid"
    wait_ok "http://127.0.0.1:$LISTEN/readiness"
}
router_stop() {
    kill -TERM "$rpid"
    wait "$rpid" || true
}

case "$mode" in
smoke)
    router_start
    "$BUILD/epp_bench" --port "$EPP" --connections 2 --concurrency 8 --requests 200 --warmup 0
    ;;
bench)
    router_start
    label="prefill $POLICY, decode least_load; $PREFILLS prefills, $DECODES decodes; prompt $PROMPT_BYTES bytes"
    echo "| picker ($label) | connections | concurrency | exchanges | p50 us | p90 us | p99 us | max us | exchanges/s | picker CPU us/exchange | picker CPU % of a core |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for cc in "1 1" "$CONNS $CONC"; do
        # shellcheck disable=SC2086 # two words: connections, concurrency
        set -- $cc
        "$BUILD/epp_bench" --port "$EPP" --connections "$1" --concurrency "$2" --requests "$REQUESTS" \
            --warmup "$WARMUP" --pid "$rpid" --prompt-bytes "$PROMPT_BYTES" >"$work/b.out"
        awk -v c="$1" -v k="$2" -v pol="$POLICY" '
            /^exchanges:/ { n = $2 }
            /^latency us:/ { p50 = $4; p90 = $6; p99 = $8; mx = $10 }
            /^streams\/s:/ { rps = $2 }
            /^picker cpu:/ { pct = $8; sub(/^\(/, "", pct); sub(/%$/, "", pct); us = $12 }
            END { printf "| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", pol, c, k, n, p50, p90, p99, mx, rps, us, pct }' \
            "$work/b.out"
    done
    router_stop
    ;;
callgrind)
    total() { # exchanges -> instructions
        router_start valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1"
        "$BUILD/epp_bench" --port "$EPP" --connections 2 --concurrency 8 --requests "$1" --warmup 0 \
            --prompt-bytes "$PROMPT_BYTES" >"$work/b.$1" || { cat "$work/b.$1" >&2; exit 1; }
        router_stop
        awk '/^summary:/ {print $2}' "$work/cg.$1"
    }
    a=$(total "$N")
    b=$(total $((2 * N)))
    pick=$(((b - a) / N))
    echo "instructions per pick (ext_proc exchange, $POLICY): $pick  (totals: $N $a, $((2 * N)) $b)"
    if [ "${FRONT:-on}" != off ]; then
        front=$(PEER=off N="$N" "$here/callgrind.sh" "$BUILD" 2>/dev/null | awk '/^instructions per PD request/ {print $5}')
        echo "| picker, per ext_proc exchange ($POLICY) | front door, per PD request (bench/callgrind.sh) | picker / front door |"
        echo "|---:|---:|---:|"
        awk -v a="$pick" -v b="$front" 'BEGIN { printf "| %d | %d | %.2f |\n", a, b, a / b }'
    fi
    ;;
*)
    echo "usage: bench/epp_pick.sh [bench|callgrind|smoke]" >&2
    exit 2
    ;;
esac
