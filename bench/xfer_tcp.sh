#!/usr/bin/env bash
# Transport over TCP on loopback: pdxfer-bench (host memory, --conns N) against iperf3 -P N, for N in
# CONNS, interleaved over ROUNDS rounds so that both see the same machine state. Prints a markdown table
# of GB/s (10^9 bytes/s) and the ratio pdxfer/iperf3, then the median per N.
#
# Usage: BIN=build bench/xfer_tcp.sh ; env: BIN (directory holding pdxfer-bench, default build/),
#        DURATION (s per run, 10), CONNS ("1 4"), ROUNDS (3), BLOCK (bytes per room, 4m), BATCH (rooms in
#        flight per thread, 4), THREADS (2), PORT (19700; pdxfer uses PORT and PORT+1, iperf3 PORT+2).
# Needs: iperf3, python3. LD_LIBRARY_PATH is used as given (binaries unpacked from a bundle).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$here/../build}
DURATION=${DURATION:-10}
CONNS=${CONNS:-"1 4"}
ROUNDS=${ROUNDS:-3}
BLOCK=${BLOCK:-4m}
BATCH=${BATCH:-4}
THREADS=${THREADS:-2}
PORT=${PORT:-19700}
bench=$BIN/pdxfer-bench
[ -x "$bench" ] || { echo "no $bench (set BIN)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "iperf3 not found" >&2; exit 2; }
work=$(mktemp -d /tmp/pdr-xfer.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# The last JSON line's field (pdxfer-bench --json, iperf3 -J).
jfield() { python3 -c 'import json,sys
lines=[l for l in open(sys.argv[1]) if l.startswith("{")]
d=json.loads(lines[-1]); print(d.get(sys.argv[2], "nan"))' "$1" "$2"; }
iperf_gbs() { python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); print("%.3f" % (d["end"]["sum_received"]["bits_per_second"]/8e9))' "$1"; }

"$bench" --mode target --listen 127.0.0.1:$PORT --backend tcp --mem host >"$work/target.log" 2>&1 &
pids+=($!)
iperf3 -s -p $((PORT + 2)) >"$work/iperf3-server.log" 2>&1 &
pids+=($!)
sleep 1

echo "| N | round | iperf3 -P N GB/s | pdxfer --conns N GB/s | ratio | pdxfer p50/p99 µs | pdxfer CPU s |"
echo "|---|---|---|---|---|---|---|"
declare -A all_ip all_px
for n in $CONNS; do
    for r in $(seq 1 "$ROUNDS"); do
        iperf3 -c 127.0.0.1 -p $((PORT + 2)) -P "$n" -t "$DURATION" -J >"$work/ip.json"
        ip=$(iperf_gbs "$work/ip.json")
        timeout $((DURATION + 120)) "$bench" --mode initiator --peer 127.0.0.1:$PORT --backend tcp --mem host \
            --block-size "$BLOCK" --batch "$BATCH" --threads "$THREADS" --conns "$n" --duration "$DURATION" \
            --json >"$work/px.log" 2>&1 || { cat "$work/px.log" >&2; exit 1; }
        px=$(jfield "$work/px.log" gb_per_s)
        ratio=$(python3 -c "print('%.2f' % ($px / $ip if $ip > 0 else 0))")
        echo "| $n | $r | $ip | $px | $ratio | $(jfield "$work/px.log" p50_us)/$(jfield "$work/px.log" p99_us) | $(jfield "$work/px.log" cpu_s) |"
        all_ip[$n]+="$ip "
        all_px[$n]+="$px "
    done
done
echo
echo "| N | median iperf3 GB/s | median pdxfer GB/s | ratio |"
echo "|---|---|---|---|"
for n in $CONNS; do
    python3 -c 'import sys,statistics as s
ip=s.median(map(float,sys.argv[2].split())); px=s.median(map(float,sys.argv[3].split()))
print("| %s | %.3f | %.3f | %.2f |" % (sys.argv[1], ip, px, px/ip if ip else 0))' "$n" "${all_ip[$n]}" "${all_px[$n]}"
done
