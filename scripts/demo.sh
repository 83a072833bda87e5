#!/usr/bin/env bash
# The demo cluster: two prefill and two decode pdsim workers on loopback, pdrouter in front of them on
# port 8000, one request shown going through (KV bytes really move from prefill to decode), then the
# router keeps serving until Ctrl-C. Usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
PORT=${PORT:-8000}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

"$build/pdsim" --role prefill --port 30001 --bootstrap-port 8998 --prefill-us-per-token 20 & pids+=($!)
"$build/pdsim" --role prefill --port 30002 --bootstrap-port 8999 --prefill-us-per-token 20 & pids+=($!)
"$build/pdsim" --role decode --port 30003 --decode-us-per-token 20000 & pids+=($!)
"$build/pdsim" --role decode --port 30004 --decode-us-per-token 20000 & pids+=($!)
"$build/pdrouter" --pd-disaggregation \
    --prefill http://127.0.0.1:30001 8998 --prefill http://127.0.0.1:30002 8999 \
    --decode http://127.0.0.1:30003 --decode http://127.0.0.1:30004 \
    --host 127.0.0.1 --port "$PORT" --policy least_load --access-log off & pids+=($!)

for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/readiness" && break; sleep 0.1; done
echo
echo "== POST /v1/chat/completions (streaming) through pdrouter on :$PORT"
curl -sN "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"pdsim","messages":[{"role":"user","content":"Why split prefill and decode?"}],"max_tokens":8,"stream":true}'
echo
echo "== POST /generate"
curl -s "http://127.0.0.1:$PORT/generate" -H 'Content-Type: application/json' \
    -d '{"text":"Why split prefill and decode?","sampling_params":{"max_new_tokens":8}}'
echo
echo
echo "pdrouter serves on http://127.0.0.1:$PORT (metrics: /metrics). Ctrl-C stops the demo."
wait "${pids[-1]}"
