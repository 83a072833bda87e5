#!/usr/bin/env bash
# The demo cluster: two prefill and two decode pdsim workers on loopback, pdrouter in front of them,
# one request of each kind shown going through (KV bytes really move from prefill to decode), then the
# router keeps serving until Ctrl-C.
#
# Usage: scripts/demo.sh [BUILD_DIR]
#   PORT=N       the router's port. Unset: 8000, or a free port when 8000 is taken. A PORT that is taken
#                stops the demo before it starts anything.
#   DEMO_ONCE=1  exit after the demo requests (status 0 only if they all worked): for scripts and tests.
#
# Every other port (workers, bootstrap, admin) is a free one picked at start, and the demo prints them.
# Each process must say it is listening before anything is sent to it: one that exits or stays silent
# stops the demo with its log, so no request ever goes to a process the demo did not start.
set -euo pipefail
build=${1:-$(cd "$(dirname "$0")/.." && pwd)/build}
H=127.0.0.1
UP_TIMEOUT_S=10

die() {
    echo "demo: $*" >&2
    exit 1
}

for b in pdsim pdrouter; do
    [ -x "$build/$b" ] || die "$build/$b is missing: run 'make build' first (or give the build directory)"
done
command -v python3 >/dev/null || die "python3 is needed to pick free ports (scripts/install-deps.sh installs it)"
command -v curl >/dev/null || die "curl is needed for the demo requests (scripts/install-deps.sh installs it)"

logs=$(mktemp -d "${TMPDIR:-/tmp}/pdrouter-demo.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# N distinct loopback ports that were free a moment ago (all bound at once, then released), for TCP and
# for UDP (a pdsim prefill receives KV lease heartbeats on its bootstrap port's number).
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
while len(socks) < 2 * int(sys.argv[1]):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", s.getsockname()[1]))
    except OSError:
        continue
    socks += [s, u]
print(" ".join(str(s.getsockname()[1]) for s in socks[::2]))
EOF
}

# Exit 0 when port $1 can be bound on loopback now (nothing listens on it).
port_free() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
EOF
}

if [ -n "${PORT:-}" ]; then
    [[ "$PORT" =~ ^[1-9][0-9]{0,4}$ ]] && [ "$PORT" -le 65535 ] || die "PORT must be a port number, got '$PORT'"
    port_free "$PORT" || die "port $PORT is in use; pick another PORT, or unset it to let the demo choose"
elif port_free 8000; then
    PORT=8000
else
    PORT=$(free_ports 1)
    echo "demo: port 8000 is in use; the router takes $PORT instead"
fi
read -r P1 B1 P2 B2 D1 D2 ADMIN <<<"$(free_ports 7)"

declare -A pid

# start NAME ARGS...: runs ARGS in the background with its output in $logs/NAME.log.
start() {
    local name=$1
    shift
    "$@" >"$logs/$name.log" 2>&1 &
    pids+=($!)
    pid[$name]=$!
}

# fail NAME WHY: stops the demo, showing NAME's log.
fail() {
    echo "demo: $1 $2; its log:" >&2
    sed 's/^/    /' "$logs/$1.log" >&2
    exit 1
}

# up NAME PATTERN: polls until NAME's log shows PATTERN (it is listening); stops the demo if NAME exits
# first or stays silent for UP_TIMEOUT_S.
up() {
    local i
    for ((i = 0; i < UP_TIMEOUT_S * 20; i++)); do
        grep -q -- "$2" "$logs/$1.log" && return 0
        kill -0 "${pid[$1]}" 2>/dev/null || fail "$1" "exited before it came up"
        sleep 0.05
    done
    fail "$1" "did not come up within ${UP_TIMEOUT_S}s"
}

start prefill1 "$build/pdsim" --role prefill --host "$H" --port "$P1" --bootstrap-port "$B1" --prefill-us-per-token 20
start prefill2 "$build/pdsim" --role prefill --host "$H" --port "$P2" --bootstrap-port "$B2" --prefill-us-per-token 20
start decode1 "$build/pdsim" --role decode --host "$H" --port "$D1" --decode-us-per-token 20000
start decode2 "$build/pdsim" --role decode --host "$H" --port "$D2" --decode-us-per-token 20000
for w in prefill1 prefill2 decode1 decode2; do up "$w" "listening on"; done
# --drain-grace-ms 0: no load balancer watches this router's readiness, so Ctrl-C stops it at once.
start pdrouter "$build/pdrouter" --pd-disaggregation \
    --prefill "http://$H:$P1" "$B1" --prefill "http://$H:$P2" "$B2" \
    --decode "http://$H:$D1" --decode "http://$H:$D2" \
    --host "$H" --port "$PORT" --admin-port "$ADMIN" --policy least_load --access-log off --drain-grace-ms 0
up pdrouter "pdrouter listening on $H:$PORT"

echo "demo: pdsim prefill on :$P1 (KV bootstrap :$B1) and :$P2 (:$B2), pdsim decode on :$D1 and :$D2"
echo "demo: pdrouter on :$PORT (admin API on :$ADMIN); logs in $logs"

# The router is ours from here on (it holds the port). Readiness: its first health checks passed.
for ((i = 0; i < UP_TIMEOUT_S * 20; i++)); do
    curl -sf -o /dev/null "http://$H:$PORT/readiness" && break
    kill -0 "${pid[pdrouter]}" 2>/dev/null || fail pdrouter "exited"
    sleep 0.05
done
curl -sf -o /dev/null "http://$H:$PORT/readiness" ||
    die "pdrouter on :$PORT is not ready after ${UP_TIMEOUT_S}s (see GET /admin/v1/workers on :$ADMIN)"

echo
echo "== POST /v1/chat/completions (streaming) through pdrouter on :$PORT"
curl -sSN --fail-with-body "http://$H:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"pdsim","messages":[{"role":"user","content":"Why split prefill and decode?"}],"max_tokens":8,"stream":true}' ||
    die "the streaming request failed"
echo
echo "== POST /generate"
curl -sS --fail-with-body "http://$H:$PORT/generate" -H 'Content-Type: application/json' \
    -d '{"text":"Why split prefill and decode?","sampling_params":{"max_new_tokens":8}}' ||
    die "the /generate request failed"
echo
echo
if [ "${DEMO_ONCE:-0}" = 1 ]; then
    echo "demo: done (DEMO_ONCE=1)"
    exit 0
fi
echo "pdrouter serves on http://$H:$PORT (metrics: /metrics, admin API: http://$H:$ADMIN). Ctrl-C stops the demo."
wait "${pid[pdrouter]}"
