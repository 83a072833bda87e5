#!/usr/bin/env bash
# Router memory per open streaming request (design target: <= 16 KiB, 10 000 streams held): pdsim
# prefill + decode (one token per second, tiny KV), pdrouter with one loop, then bench/hold_streams.py
# opens N streams, waits for every first token, reads the router's RSS, and closes them.
# Usage: bench/streams.sh [BUILD_DIR] ; env NS="1000 5000 9000" (stream counts, one run each). Each held
# stream takes two of the router's file descriptors (client, decode connection): with this machine's
# hard limit of 20 000 open files per process, 9 000 is the most one router process can hold here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
NS=${NS:-"1000 5000 9000"}
work=$(mktemp -d /tmp/pdr-streams.XXXXXX)
P=18501; PB=18502; D=18503; R=18504
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# Each held stream costs the router a client socket and a decode connection, pdsim a connection each.
ulimit -n 65536 2>/dev/null || prlimit --pid $$ --nofile=65536:65536 2>/dev/null || true
echo "open files limit: $(ulimit -n)"
wait_up() { for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0; sleep 0.1; done; return 1; }
for n in $NS; do
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
    python3 "$here/hold_streams.py" $R "$n" "$rpid"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
done
