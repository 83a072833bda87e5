#!/usr/bin/env bash
# Router memory per open streaming request (design target: <= 16 KiB, 10 000 streams held): pdsim
# prefill + decode (one token per second, tiny KV), pdrouter with one loop, then bench/hold_streams.py
# opens N streams, waits for every first token, reads the router's RSS, and closes them.
# Usage: bench/streams.sh [BUILD_DIR] ; env NS="1000 5000 9000" (HTTP/1.1 stream counts, one connection
# each), NS_H2="10000" (HTTP/2 stream counts: h2load, 100 connections x N/100 streams). Over HTTP/1.1 each
# held stream takes two of the router's file descriptors (client, decode connection): with a hard
# limit of 20 000 open files per process, 9 000 is the most one router holds that way; over HTTP/2 the
# clients share 100 connections, so 10 000 fit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
NS=${NS-"1000 5000 9000"}
NS_H2=${NS_H2-"10000"}
work=$(mktemp -d /tmp/pdr-streams.XXXXXX)
P=18501; PB=18502; D=18503; R=18504
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# Each held stream costs the router a client socket and a decode connection, pdsim a connection each.
ulimit -n 65536 2>/dev/null || prlimit --pid $$ --nofile=65536:65536 2>/dev/null || true
echo "open files limit: $(ulimit -n)"
wait_up() { for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0; sleep 0.1; done; return 1; }
start_all() {
    "$build/pdsim" --role prefill --port $P --bootstrap-port $PB --kv-bytes-per-token 16 --log-level warn \
        >"$work/p.log" 2>&1 & pids+=($!)
    "$build/pdsim" --role decode --port $D --kv-bytes-per-token 16 --decode-us-per-token 1000000 --log-level warn \
        >"$work/d.log" 2>&1 & pids+=($!)
    wait_up $P; wait_up $D
    # limits.max_inflight above the stream count (its default, 4096, would answer 503 beyond it)
    cat >"$work/router.yaml" <<YAML
listen: { host: 127.0.0.1, port: $R }
admin: { host: 127.0.0.1, port: 0 }
workers:
  prefill: [ { url: "http://127.0.0.1:$P", bootstrap_port: $PB } ]
  decode: [ "http://127.0.0.1:$D" ]
limits: { max_inflight: 100000 }
log: { access_log: "off", level: warn }
lifecycle: { drain_grace_ms: 0, drain_timeout_ms: 1000 }
threads: 1
YAML
    "$build/pdrouter" --config "$work/router.yaml" >"$work/r.log" 2>&1 & rpid=$!; pids+=($rpid)
    wait_up $R
    # warm up: pools, allocator arenas
    for _ in $(seq 20); do curl -sf -o /dev/null -H 'content-type: application/json' \
        -d '{"text":"warm","sampling_params":{"max_new_tokens":1}}' "http://127.0.0.1:$R/generate"; done
}
stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
for n in $NS; do
    start_all
    python3 "$here/hold_streams.py" $R "$n" "$rpid"
    stop_all
done
printf '{"text":"hold this stream open","stream":true,"sampling_params":{"max_new_tokens":100000}}' >"$work/body.json"
for n in $NS_H2; do
    start_all
    base=$(rss $rpid)
    h2load -n "$n" -c 100 -m $(( (n + 99) / 100 )) -d "$work/body.json" -H 'content-type: application/json' \
        "http://127.0.0.1:$R/generate" >"$work/h2load.log" 2>&1 & hpid=$!; pids+=($hpid)
    t0=$(date +%s.%N); held_n=0
    for _ in $(seq 600); do   # until the decode worker streams all of them (at most 120 s)
        held_n=$(curl -s "http://127.0.0.1:$D/pdsim/stats" | python3 -c 'import sys,json; print(json.load(sys.stdin)["inflight"])')
        [ "$held_n" -ge "$n" ] && break
        sleep 0.2
    done
    t1=$(date +%s.%N)
    sleep 1
    held=$(rss $rpid)
    errs=$(curl -s "http://127.0.0.1:$R/metrics" | awk '/^pdr_upstream_errors_total/ {s += $2} END {print s + 0}')
    echo "{\"h2_streams\": $n, \"held_at_decode\": $held_n, \"upstream_errors\": $errs, \"rss_before_kib\": $base," \
         "\"rss_held_kib\": $held, \"bytes_per_stream\": $(( (held - base) * 1024 / n )), \"open_s\": $(printf "%.2f" "$(echo "$t1 - $t0" | bc)")}"
    stop_all
done
