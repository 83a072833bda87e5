#!/usr/bin/env bash
# What TLS on the front listener costs, against the usual alternative: TLS ended by nginx in front of a
# plain pdrouter. pdsim prefill + decode; pdrouter A (plain), pdrouter B (listen.tls), nginx (TLS, HTTP/2
# and HTTP/1.1, proxying to A over pooled keep-alive connections); each with one event loop / one worker
# process. h2load sends PD requests (/generate, 4 new tokens) over: HTTP/2 without TLS to A (the baseline),
# HTTP/2 over TLS to B and to nginx, HTTP/1.1 over TLS (keep-alive) to B and to nginx; then `openssl s_time`
# measures full handshakes per second on B and on nginx. Prints a table: requests/s, mean and max latency
# (h2load's), and the CPU time the endpoint processes spent per request (pdrouter; on the nginx paths nginx's
# worker plus the plain pdrouter behind it), read from /proc before and after each run.
# Exits 1 when any request failed or was answered other than 2xx (h2load's counters are read first).
# Usage: bench/tls.sh [BUILD_DIR] ; env N (requests per run, default 20000), C (connections, 16), M (streams
# per HTTP/2 connection, 8), HS_SECONDS (s_time duration, 5).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
N=${N:-20000}
C=${C:-16}
M=${M:-8}
HS_SECONDS=${HS_SECONDS:-5}
for tool in h2load nginx openssl curl; do
    command -v "$tool" >/dev/null || {
        echo "$tool missing (scripts/install-deps.sh --test installs it)" >&2
        exit 2
    }
done
work=$(mktemp -d /tmp/pdr-tls.XXXXXX)
P=18601; PB=18602; D=18603; A=18604; B=18605; X=18606
pids=()
declare -A pid rps
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
wait_up() { for _ in $(seq 100); do curl -skf -o /dev/null "$1/health" && return 0; sleep 0.1; done; return 1; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime, in clock ticks
hz=$(getconf CLK_TCK)

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$work/key.pem" \
    -out "$work/cert.pem" -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null
"$build/pdsim" --role prefill --port $P --bootstrap-port $PB --kv-bytes-per-token 16 --log-level warn \
    >"$work/p.log" 2>&1 &
pids+=($!)
"$build/pdsim" --role decode --port $D --kv-bytes-per-token 16 --decode-us-per-token 100 --log-level warn \
    >"$work/d.log" 2>&1 &
pids+=($!)
wait_up http://127.0.0.1:$P
wait_up http://127.0.0.1:$D
for side in A B; do
    port=$A tls=""
    if [ $side = B ]; then
        port=$B tls=", tls: { cert_file: $work/cert.pem, key_file: $work/key.pem }"
    fi
    cat >"$work/$side.yaml" <<YAML
listen: { host: 127.0.0.1, port: $port$tls }
admin: { host: 127.0.0.1, port: 0 }
workers:
  prefill: [ { url: "http://127.0.0.1:$P", bootstrap_port: $PB } ]
  decode: [ "http://127.0.0.1:$D" ]
log: { access_log: "off", level: warn }
lifecycle: { drain_grace_ms: 0, drain_timeout_ms: 1000 }
threads: 1
YAML
    "$build/pdrouter" --config "$work/$side.yaml" >"$work/$side.log" 2>&1 &
    pids+=($!)
    pid[$side]=$!
done
wait_up http://127.0.0.1:$A
wait_up https://127.0.0.1:$B
mkdir -p "$work/nginx/logs"
cat >"$work/nginx/nginx.conf" <<NGINX
user root;
worker_processes 1;
error_log $work/nginx/logs/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    upstream router { server 127.0.0.1:$A; keepalive 64; }
    server {
        listen 127.0.0.1:$X ssl http2;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        keepalive_requests 100000;
        http2_max_requests 100000;
        location / {
            proxy_pass http://router;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
NGINX
nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' >"$work/nginx/out.log" 2>&1 &
pids+=($!)
wait_up https://127.0.0.1:$X
nginx_workers() { pgrep -P "$(cat "$work/nginx/nginx.pid")" | tr '\n' ' '; }

printf '{"text":"the quick brown fox jumps over the lazy dog","sampling_params":{"max_new_tokens":4}}' \
    >"$work/body.json"
bad=0
# run NAME URL ENDPOINT_PIDS H2LOAD_FLAGS...
run() {
    local name=$1 url=$2 eps=$3
    shift 3
    local before=0 after=0 p
    # warm-up: connections, pools, allocator arenas
    h2load -n 2000 -c "$C" -m "$M" "$@" -d "$work/body.json" -H 'content-type: application/json' "$url" \
        >/dev/null 2>&1 || true
    for p in $eps; do before=$((before + $(cpu "$p"))); done
    h2load -n "$N" -c "$C" -m "$M" "$@" -d "$work/body.json" -H 'content-type: application/json' "$url" \
        >"$work/$name.out" 2>&1 || true
    for p in $eps; do after=$((after + $(cpu "$p"))); done
    local out=$work/$name.out
    local r succeeded total s2xx mean maxl
    r=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$out")
    total=$(sed -n 's/^requests: \([0-9]*\) total.*/\1/p' "$out")
    succeeded=$(sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' "$out")
    s2xx=$(sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p' "$out")
    mean=$(awk '/^time for request:/ {print $6}' "$out")
    maxl=$(awk '/^time for request:/ {print $5}' "$out")
    if [ -z "$r" ] || [ "${succeeded:-0}" != "$N" ] || [ "${s2xx:-0}" != "$N" ] || [ "${total:-0}" != "$N" ]; then
        echo "$name: $N requests sent, ${succeeded:-?} succeeded, ${s2xx:-?} 2xx" >&2
        tail -20 "$out" >&2
        bad=1
    fi
    local us
    us=$(echo "scale=1; ($after - $before) * 1000000 / $hz / $N" | bc)
    printf '| %s | %s | %s | %s | %s | %s |\n' "$name" "$r" "$mean" "$maxl" "$us" "${succeeded:-?}/$N"
    rps[$name]=$r
}

echo "pdrouter $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?'), $(nginx -v 2>&1 | sed 's/.*: //'), \
$(openssl version | cut -d' ' -f1-2), $(h2load --version | head -1); N=$N C=$C M=$M, one loop / one worker each, $(nproc) cores"
echo
echo '| path | req/s | mean latency | max latency | endpoint CPU per request (us) | 2xx |'
echo '|---|---|---|---|---|---|'
run h2c_plain "http://127.0.0.1:$A/generate" "${pid[A]}"
run h2_tls_pdrouter "https://127.0.0.1:$B/generate" "${pid[B]}"
run h2_tls_nginx "https://127.0.0.1:$X/generate" "${pid[A]} $(nginx_workers)"
run h1_tls_pdrouter "https://127.0.0.1:$B/generate" "${pid[B]}" --h1
run h1_tls_nginx "https://127.0.0.1:$X/generate" "${pid[A]} $(nginx_workers)" --h1
echo
# Full handshakes (no session reuse), each connection closed after its handshake: connections per
# real second of `openssl s_time -new`.
hs() {
    local n t
    read -r n t < <(openssl s_time -connect "127.0.0.1:$1" -new -time "$HS_SECONDS" 2>/dev/null |
        sed -n 's/^\([0-9]*\) connections in \([0-9]*\) real seconds.*/\1 \2/p' | head -1) || true
    if [ -z "${n:-}" ] || [ "${t:-0}" = 0 ]; then
        echo "s_time on port $1 failed" >&2
        bad=1
        echo 0
        return
    fi
    echo "scale=0; $n / $t" | bc
}
# Three rounds, taking turns (the machine's state drifts between runs); the median of each.
hs_p=() hs_n=()
for _ in 1 2 3; do
    hs_p+=("$(hs $B)")
    hs_n+=("$(hs $X)")
done
median() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
echo "| full TLS handshakes per second (openssl s_time -new, ${HS_SECONDS} s, 3 rounds taking turns) | pdrouter | nginx |"
echo '|---|---|---|'
echo "| rounds | ${hs_p[*]} | ${hs_n[*]} |"
echo "| median | $(median "${hs_p[@]}") | $(median "${hs_n[@]}") |"
echo
echo "ratios: pdrouter TLS / nginx TLS: h2 $(echo "scale=2; ${rps[h2_tls_pdrouter]} / ${rps[h2_tls_nginx]}" | bc)," \
    "h1 $(echo "scale=2; ${rps[h1_tls_pdrouter]} / ${rps[h1_tls_nginx]}" | bc);" \
    "pdrouter TLS / plain (h2): $(echo "scale=2; ${rps[h2_tls_pdrouter]} / ${rps[h2c_plain]}" | bc)"
for side in A B; do
    kill -0 "${pid[$side]}" 2>/dev/null || {
        echo "pdrouter $side died" >&2
        bad=1
    }
done
exit $bad
