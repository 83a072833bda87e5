#!/usr/bin/env bash
# Instructions per PD request in pdrouter, counted by callgrind (stable on a noisy machine): the
# router runs under valgrind with one loop thread; h2load sends N and then 2N requests to it; the
# difference of the two totals divided by N removes start-up and shutdown costs. The peer is counted the
# same way: nginx proxy_pass (one worker, no master process, keep-alive upstream pool) in front of the
# same upstream, with the same client and body; its row and the ratio are printed beside the router's.
# nginx makes one upstream call per request, pdrouter two (the prefill and the decode leg).
# Usage: bench/callgrind.sh [BUILD_DIR] ; env N (default 2000), CLIENT_HEADERS ("typical": the eleven
# headers an OpenAI SDK client sends, as in bench/run.sh), PEER (default on; "off" skips the nginx row),
# KEEP (a directory: the callgrind outputs are copied there for callgrind_annotate), H2 (a value: the client
# speaks HTTP/2 with prior knowledge instead of HTTP/1.1, and the router is started from a YAML file with
# the same workers whose h2_nghttp2 is that value, true or false; PEER is then off: nginx's proxy_pass
# does not take h2c). Run with H2=false and H2=true to compare h2o's HTTP/2 with libnghttp2's.
# SOLO (any value): every request skips the prefill (conditional disaggregation, a regular worker) and
# makes one upstream call, as nginx does: the like-for-like row beside nginx's.
# UP, ROUTER, PROXY: the ports (18301, 18303, 18304).
# Needs valgrind, nginx, h2load.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
N=${N:-2000}
work=$(mktemp -d /tmp/pdr-cg.XXXXXX)
UP=${UP:-18301}; ROUTER=${ROUTER:-18303}; PROXY=${PROXY:-18304}
ngpid=
cleanup() { [ -n "$ngpid" ] && kill "$ngpid" 2>/dev/null; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$work"/cg.* "$KEEP"/; rm -rf "$work"; }
trap cleanup EXIT
cat >"$work/up.conf" <<CONF
worker_processes 1; daemon off; pid $work/up.pid; error_log $work/up.err;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$UP; default_type application/json;
  location /health { return 200 'ok'; } location / { return 200 '{"text":"hello"}'; } } }
CONF
nginx -c "$work/up.conf" -p "$work" & ngpid=$!
hdrs=(-H 'content-type: application/json')
if [ "${CLIENT_HEADERS:-}" = typical ]; then
    hdrs+=(-H 'user-agent: OpenAI/Python 1.54.0' -H 'accept: application/json'
           -H 'authorization: Bearer sk-bench-0123456789abcdef0123456789abcdef' -H 'x-stainless-lang: python'
           -H 'x-stainless-package-version: 1.54.0' -H 'x-stainless-os: Linux' -H 'x-stainless-arch: x64'
           -H 'x-stainless-runtime: CPython' -H 'x-stainless-runtime-version: 3.11.2' -H 'x-request-id: bench-req-1'
           -H 'traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')
fi
printf '{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":8}}' >"$work/body.json"
cat >"$work/proxy.conf" <<CONF
master_process off; daemon off; worker_processes 1; pid $work/px.pid; error_log $work/px.err;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$UP; keepalive 64; }
  server { listen 127.0.0.1:$PROXY;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; } } }
CONF
proto=(--h1)
[ -n "${H2:-}" ] && { proto=(-m 1); PEER=off; }
if [ -n "${H2:-}" ] || [ -n "${SOLO:-}" ]; then
    cat >"$work/router.yaml" <<CONF
listen: { host: 127.0.0.1, port: $ROUTER }
admin: { host: 127.0.0.1, port: $((ROUTER + 2)) }
threads: 1
h2_nghttp2: ${H2:-false}
log: { access_log: "off", level: warn }
health: { interval_ms: 600000 }
workers:
  prefill: [ { url: "http://127.0.0.1:$UP", bootstrap_port: 8998 } ]
  decode: [ { url: "http://127.0.0.1:$UP" } ]
CONF
    [ -n "${SOLO:-}" ] && cat >>"$work/router.yaml" <<CONF
  regular: [ { url: "http://127.0.0.1:$UP" } ]
disaggregation: { min_prefill_chars: 1000000 }
CONF
fi
kind=PD; [ -n "${SOLO:-}" ] && kind=solo
load() { # port requests; exits non-zero unless every request succeeded with a 2xx
    h2load "${proto[@]}" -n "$2" -c 8 -d "$work/body.json" "${hdrs[@]}" \
        "http://127.0.0.1:$1/generate" >"$work/h2load.out"
    grep -E '^requests:' "$work/h2load.out" >&2
    grep -qE "^requests: $2 total, $2 started, $2 done, $2 succeeded, 0 failed, 0 errored, 0 timeout" \
        "$work/h2load.out" && grep -qE "^status codes: $2 2xx," "$work/h2load.out" ||
        { echo "h2load: not every request answered 2xx" >&2; cat "$work/h2load.out" >&2; exit 1; }
}
wait_up() { for _ in $(seq 1200); do curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0; sleep 0.1; done
    echo "port $1 not up" >&2; exit 1; }
peer_total() { # requests -> instructions
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.nginx.$1" nginx -c "$work/proxy.conf" -p "$work" \
        2>"$work/vg.nginx.$1" &
    local pid=$!
    wait_up $PROXY
    load $PROXY "$1"
    kill -QUIT $pid; wait $pid || true
    awk '/^summary:/ {print $2}' "$work/cg.nginx.$1"
}
total() { # requests -> instructions
    local args=(--pd-disaggregation --prefill "http://127.0.0.1:$UP" 8998 --decode "http://127.0.0.1:$UP"
        --host 127.0.0.1 --port $ROUTER --admin-port $((ROUTER + 2)) --access-log off --log-level warn --threads 1
        --health-interval-ms 600000)
    [ -f "$work/router.yaml" ] && args=(--config "$work/router.yaml")
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" "$build/pdrouter" "${args[@]}" 2>"$work/vg.$1" &
    local pid=$!
    wait_up $ROUTER
    load $ROUTER "$1"
    if [ -n "${SOLO:-}" ]; then # every request really skipped the prefill
        local solo
        solo=$(curl -sf "http://127.0.0.1:$((ROUTER + 2))/metrics" |
            awk '/^pdr_disagg_decisions_total\{decision="short_prompt"\}/ {print $2}')
        [ "${solo:-0}" -ge "$1" ] || { echo "SOLO: $solo of $1 requests skipped the prefill" >&2; exit 1; }
    fi
    kill -TERM $pid; wait $pid || true
    awk '/^summary:/ {print $2}' "$work/cg.$1"
}
a=$(total "$N"); b=$(total $((2 * N)))
pd=$(( (b - a) / N ))
echo "instructions per $kind request: $pd  (totals: $N req $a, $((2 * N)) req $b)"
if [ "${PEER:-on}" != off ]; then
    c=$(peer_total "$N"); d=$(peer_total $((2 * N)))
    px=$(( (d - c) / N ))
    echo "instructions per nginx proxy_pass request: $px  (totals: $N req $c, $((2 * N)) req $d)"
    echo "| pdrouter | nginx proxy_pass | pdrouter / nginx |"
    echo "|---:|---:|---:|"
    awk -v a="$pd" -v b="$px" 'BEGIN { printf "| %d | %d | %.2f |\n", a, b, a / b }'
fi
