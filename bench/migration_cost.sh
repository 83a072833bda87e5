#!/usr/bin/env bash
# What stream migration costs a stream that never breaks: instructions per streamed request through the
# router (callgrind), migration.enabled true against false, pdsim prefill + decode on loopback. A stream that
# may be moved is relayed in whole events and its events are kept and read back every 64 KiB; this measures
# that work. Each count is the difference of two runs (N and 2N requests), so start-up cancels out.
# Usage: bench/migration_cost.sh [BUILD_DIR] ; env N (requests, default 200), TOKENS (events per stream,
# default 256), ROUTE (generate | completions | chat, default chat). Exits non-zero unless every request
# answered 2xx with its [DONE]. KEEP=DIR keeps the callgrind files there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
N=${N:-200}
TOKENS=${TOKENS:-256}
ROUTE=${ROUTE:-chat}
work=$(mktemp -d /tmp/pdr-migcost.XXXXXX)
P=18601; PB=18602; D=18603; R=18604
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then rm -rf "$KEEP"; mv "$work" "$KEEP"; else rm -rf "$work"; fi; }
trap cleanup EXIT
wait_up() { for _ in $(seq 1200); do curl -sf -o /dev/null "http://127.0.0.1:$1/health" && return 0; sleep 0.1; done
    echo "port $1 not up" >&2; exit 1; }
"$build/pdsim" --role prefill --port $P --bootstrap-port $PB --kv-bytes-per-token 16 --log-level warn \
    >"$work/p.log" 2>&1 & pids+=($!)
"$build/pdsim" --role decode --port $D --kv-bytes-per-token 16 --decode-us-per-token 0 --log-level warn \
    >"$work/d.log" 2>&1 & pids+=($!)
wait_up $P; wait_up $D
case "$ROUTE" in
generate) path=/generate
    body="{\"text\":\"The quick brown fox\",\"stream\":true,\"sampling_params\":{\"max_new_tokens\":$TOKENS}}" ;;
completions) path=/v1/completions
    body="{\"model\":\"m\",\"prompt\":\"The quick brown fox\",\"stream\":true,\"max_tokens\":$TOKENS}" ;;
*) path=/v1/chat/completions
    body="{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"The quick brown fox\"}],\"stream\":true,\"max_tokens\":$TOKENS}" ;;
esac
printf '%s' "$body" >"$work/body.json"
run() { # enabled requests -> instructions
    cat >"$work/router.yaml" <<CONF
listen: { host: 127.0.0.1, port: $R }
admin: { host: 127.0.0.1, port: $((R + 2)) }
threads: 1
log: { access_log: "off", level: warn }
health: { interval_ms: 600000 }
migration: { enabled: $1 }
workers:
  prefill: [ { url: "http://127.0.0.1:$P", bootstrap_port: $PB } ]
  decode: [ { url: "http://127.0.0.1:$D" } ]
CONF
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1.$2" "$build/pdrouter" --config "$work/router.yaml" \
        2>"$work/vg.$1.$2" &
    local pid=$!
    wait_up $R
    h2load --h1 -n "$2" -c 4 -d "$work/body.json" -H 'content-type: application/json' \
        "http://127.0.0.1:$R$path" >"$work/h2load.out"
    grep -qE "^requests: $2 total, $2 started, $2 done, $2 succeeded, 0 failed, 0 errored, 0 timeout" \
        "$work/h2load.out" && grep -qE "^status codes: $2 2xx," "$work/h2load.out" ||
        { echo "h2load: not every request answered 2xx" >&2; cat "$work/h2load.out" >&2; exit 1; }
    # every stream ended with its [DONE]: the router counted no broken stream
    local broken
    broken=$(curl -sf "http://127.0.0.1:$((R + 2))/metrics" |
        awk '/^pdr_requests_total\{.*status="5/ {s += $2} END {print s + 0}')
    [ "$broken" -eq 0 ] || { echo "$broken requests answered 5xx" >&2; exit 1; }
    kill -TERM $pid; wait $pid || true
    awk '/^summary:/ {print $2}' "$work/cg.$1.$2"
}
for en in false true; do
    a=$(run $en "$N"); b=$(run $en $((2 * N)))
    eval "per_$en=$(( (b - a) / N ))"
done
echo "| route | tokens per stream | migration off | migration on | on / off | extra per token |"
echo "|---|---:|---:|---:|---:|---:|"
awk -v r="$ROUTE" -v t="$TOKENS" -v a="$per_false" -v b="$per_true" \
    'BEGIN { printf "| %s | %d | %d | %d | %.3f | %.0f |\n", r, t, a, b, b / a, (b - a) / t }'
