#!/usr/bin/env bash
# Instructions per PD request in pdrouter, counted by callgrind (stable on a noisy machine): the
# router runs under valgrind with one loop thread; h2load sends N and then 2N requests to it; the
# difference of the two totals divided by N removes start-up and shutdown costs.
# Usage: bench/callgrind.sh [BUILD_DIR] ; env N (default 2000), CLIENT_HEADERS ("typical": the eleven
# headers an OpenAI SDK client sends, as in bench/run.sh). Needs valgrind, nginx, h2load.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
N=${N:-2000}
work=$(mktemp -d /tmp/pdr-cg.XXXXXX)
UP=18301; ROUTER=18303
ngpid=
cleanup() { [ -n "$ngpid" ] && kill "$ngpid" 2>/dev/null; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] && cp "$work"/cg.* /tmp/ ; rm -rf "$work"; }
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
total() { # requests -> instructions
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" "$build/pdrouter" --pd-disaggregation \
        --prefill "http://127.0.0.1:$UP" 8998 --decode "http://127.0.0.1:$UP" --host 127.0.0.1 --port $ROUTER \
        --access-log off --log-level warn --threads 1 --health-interval-ms 600000 2>"$work/vg.$1" &
    local pid=$!
    for _ in $(seq 200); do curl -sf -o /dev/null "http://127.0.0.1:$ROUTER/health" && break; sleep 0.1; done
    h2load --h1 -n "$1" -c 8 -d "$work/body.json" "${hdrs[@]}" \
        "http://127.0.0.1:$ROUTER/generate" | grep -E '^requests:' >&2
    kill -TERM $pid; wait $pid || true
    awk '/^summary:/ {print $2}' "$work/cg.$1"
}
a=$(total "$N"); b=$(total $((2 * N)))
echo "instructions per PD request: $(( (b - a) / N ))  (totals: $N req $a, $((2 * N)) req $b)"
