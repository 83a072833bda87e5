#!/usr/bin/env bash
# Router benchmark: pdrouter (two upstream calls per PD request) against nginx proxy_pass (one upstream
# call per request) to the same fast upstream, side by side in one run, and the upstream called
# directly; and pdrouter-solo, the same router with every request skipping the prefill (one upstream call,
# like for like with nginx). Prints a markdown table of requests/s and latency for each concurrency, and
# exits non-zero when any request failed (a non-2xx answer or a socket error).
#
# Usage: bench/run.sh [BUILD_DIR] ; env: DURATION (s, default 10), CONCURRENCY ("1 64"), ROUNDS (2),
#        THREADS (pdrouter --threads and nginx worker_processes for the proxy, default 1),
#        CLIENT_HEADERS (empty: Content-Type only; "typical": the eleven headers an OpenAI SDK client sends,
#        with an Authorization, an X-Request-Id and a traceparent, which the router forwards to both legs)
# Needs: nginx, wrk (scripts/install-deps.sh --test installs them). Loopback only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
DURATION=${DURATION:-10}
CONCURRENCY=${CONCURRENCY:-"1 64"}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-1}
work=$(mktemp -d /tmp/pdr-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

UP=18101; PROXY=18102; ROUTER=18103; SOLO=18104; SOLO_ADMIN=18105
body='{"text":"The quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":8}}'
answer='{"text":"jumps over the lazy dog again and again","meta_info":{"prompt_tokens":9,"completion_tokens":8}}'

# The upstream: nginx answering every POST with a fixed 2xx JSON body (one worker process).
cat >"$work/upstream.conf" <<CONF
worker_processes 1; daemon off; pid $work/up.pid; error_log $work/up.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$UP; default_type application/json;
    location /health { return 200 'ok'; }
    location / { return 200 '$answer'; } } }
CONF
# The peer: nginx proxy_pass with a keep-alive upstream pool, as many worker processes as pdrouter has loops.
cat >"$work/proxy.conf" <<CONF
worker_processes $THREADS; daemon off; pid $work/px.pid; error_log $work/px.err;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$UP; keepalive 256; }
  server { listen 127.0.0.1:$PROXY;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; } } }
CONF
nginx -c "$work/upstream.conf" -p "$work" & pids+=($!)
nginx -c "$work/proxy.conf" -p "$work" & pids+=($!)
"$build/pdrouter" --pd-disaggregation --prefill "http://127.0.0.1:$UP" 8998 --decode "http://127.0.0.1:$UP" \
    --host 127.0.0.1 --port $ROUTER --access-log off --log-level warn --threads "$THREADS" & pids+=($!)

# The like-for-like row: pdrouter with every request skipping the prefill (conditional disaggregation,
# one regular worker), so that it makes one upstream call per request, as nginx does.
cat >"$work/solo.yaml" <<CONF
listen: { host: 127.0.0.1, port: $SOLO }
admin: { host: 127.0.0.1, port: $SOLO_ADMIN }
threads: $THREADS
log: { access_log: "off", level: warn }
workers:
  prefill: [ { url: "http://127.0.0.1:$UP", bootstrap_port: 8998 } ]
  decode: [ { url: "http://127.0.0.1:$UP" } ]
  regular: [ { url: "http://127.0.0.1:$UP" } ]
disaggregation: { min_prefill_chars: 1000000 }
CONF
"$build/pdrouter" --config "$work/solo.yaml" & pids+=($!)

wait_up() { for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$1$2" && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
wait_up $UP /health; wait_up $PROXY /health; wait_up $ROUTER /readiness; wait_up $SOLO /readiness

cat >"$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA
if [ "${CLIENT_HEADERS:-}" = typical ]; then
cat >>"$work/post.lua" <<'LUA'
wrk.headers["User-Agent"] = "OpenAI/Python 1.54.0"
wrk.headers["Accept"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench-0123456789abcdef0123456789abcdef"
wrk.headers["X-Stainless-Lang"] = "python"
wrk.headers["X-Stainless-Package-Version"] = "1.54.0"
wrk.headers["X-Stainless-OS"] = "Linux"
wrk.headers["X-Stainless-Arch"] = "x64"
wrk.headers["X-Stainless-Runtime"] = "CPython"
wrk.headers["X-Stainless-Runtime-Version"] = "3.11.2"
wrk.headers["X-Request-Id"] = "bench-req-1"
wrk.headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
LUA
fi
# Sanity: the router really makes a PD call and answers 200.
curl -sf -XPOST -d "$body" "http://127.0.0.1:$ROUTER/generate" >/dev/null

run_wrk() { # port conc -> "rps p50 p99"
    wrk -t1 -c"$2" -d"${DURATION}s" --latency -s "$work/post.lua" "http://127.0.0.1:$1/generate" >"$work/wrk.out" 2>&1
    # non-2xx counts wrk's non-2xx answers and its socket errors (connect, read, write, timeout) alike.
    awk '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} /Non-2xx/ {bad+=$NF}
         /Socket errors:/ {gsub(",", ""); bad+=$4+$6+$8+$10}
         END {printf "%s %s %s %d\n", rps, p50, p99, bad}' "$work/wrk.out"
}
failed=0

echo "| round | concurrency | target | requests/s | p50 | p99 | non-2xx |"
echo "|---|---|---|---|---|---|---|"
declare -A sum rounds
for r in $(seq "$ROUNDS"); do
  for c in $CONCURRENCY; do
    for t in direct:$UP nginx:$PROXY pdrouter:$ROUTER pdrouter-solo:$SOLO; do
      name=${t%%:*}; port=${t##*:}
      read -r rps p50 p99 bad < <(run_wrk "$port" "$c")
      echo "| $r | $c | $name | $rps | $p50 | $p99 | $bad |"
      [ "$bad" = 0 ] || failed=1
      sum[$c,$name]=$(awk -v a="${sum[$c,$name]:-0}" -v b="$rps" 'BEGIN{print a+b}')
      rounds[$c,$name]="${rounds[$c,$name]:-} $rps"
    done
  done
done
echo
echo "| concurrency | pdrouter / nginx | pdrouter-solo / nginx (requests/s, mean of rounds) |"
echo "|---|---|---|"
for c in $CONCURRENCY; do
  awk -v a="${sum[$c,pdrouter]}" -v s="${sum[$c,pdrouter-solo]}" -v b="${sum[$c,nginx]}" -v c="$c" \
      'BEGIN{printf "| %s | %.2f | %.2f |\n", c, a/b, s/b}'
done
# The median over rounds of each round's ratio (a round's targets ran side by side).
median() { # "a1 a2 ..." "b1 b2 ..." -> median of a_i / b_i
    paste <(tr ' ' '\n' <<<"$1" | sed '/^$/d') <(tr ' ' '\n' <<<"$2" | sed '/^$/d') |
        awk '{print $1 / $2}' | sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m}'
}
echo
echo "| concurrency | pdrouter / nginx | pdrouter-solo / nginx (median over rounds of each round's ratio) |"
echo "|---|---|---|"
for c in $CONCURRENCY; do
  echo "| $c | $(median "${rounds[$c,pdrouter]}" "${rounds[$c,nginx]}") | $(median "${rounds[$c,pdrouter-solo]}" "${rounds[$c,nginx]}") |"
done
# Every solo request skipped the prefill (the row measures what it claims).
solo_total=$(curl -sf "http://127.0.0.1:$SOLO_ADMIN/metrics" | awk '/^pdr_disagg_decisions_total\{decision="disaggregated"\}/ {print $2}')
if [ "${solo_total:-0}" != 0 ]; then echo "pdrouter-solo: $solo_total requests were disaggregated" >&2; exit 1; fi
if [ "$failed" != 0 ]; then echo "bench/run.sh: some requests failed (the non-2xx column)" >&2; exit 1; fi
