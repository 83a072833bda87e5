#!/usr/bin/env bash
# GPU transport measurements for an H200 host (docs/benchmarks.md), all on one machine:
#  1. copy rates that bound every GPU path: pdxfer-bench --mode copytest (pinned H2D/D2H whole, in 1 MiB
#     and 64 KiB pieces, pageable, d2d; with two GPUs cuMemcpyPeerAsync and a unified d2d copy);
#  2. iperf3 -P 4 on loopback (the wire's ceiling);
#  3. TCP GPU->GPU over loopback for a 32k-token KV share: 32768 tokens x 320 KiB / 8 ranks = 1.25 GiB
#     per room (block 1342177280, batch 1), and the same in 64 MiB blocks;
#  4. stress: 32 concurrent 1.25 GiB rooms for STRESS_MIN minutes: zero failures, staging bounded,
#     nvidia-smi compute apps sampled while it runs (each process at most once per GPU, none stray);
#  5. CUDA IPC GPU$SRC -> GPU$DST (GPU0 -> GPU1 with two GPUs, else both processes on GPU0): 1.25 GiB
#     rooms with 1, 2, 4 and 8 in flight, 64 MiB rooms 4 x 4 in flight, cuMemAlloc and VMM (cuMemCreate)
#     destinations, next to the copytest peer rate.
# Every room is verified as --verify VERIFY says (default full: every byte, compared on the device);
# rooms into host memory as VERIFY_HOST says (default sample: a full compare runs on one CPU core at
# about 1.3 GB/s and would measure that instead of the transport).
# A run that fails a room or finds a wrong byte (pdxfer-bench exits non-zero), or whose target exits
# non-zero, is reported as FAILED without its numbers, and the script exits 1 after the remaining runs.
#
# Usage: BIN=build bench/xfer_gpu.sh ; env: BIN (directory holding pdxfer-bench, default build/),
#        DURATION (s per measurement, 20), STRESS_MIN (minutes, 5; 0 skips), CONNS (4), SRC (0: target GPU),
#        DST (GPU of the initiator; 1 when there are two GPUs, else 0), STAGING_MAX (bytes; the stress run
#        fails above it, default 1 GiB), PORT (19800; uses PORT, PORT+1, PORT+2), VERIFY (full),
#        VERIFY_HOST (sample).
# Needs: nvidia-smi, iperf3, python3. LD_LIBRARY_PATH is used as given (binaries unpacked from a bundle).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$here/../build}
DURATION=${DURATION:-20}
STRESS_MIN=${STRESS_MIN:-5}
CONNS=${CONNS:-4}
PORT=${PORT:-19800}
STAGING_MAX=${STAGING_MAX:-1073741824}
VERIFY=${VERIFY:-full}
VERIFY_HOST=${VERIFY_HOST:-sample}
KV=1342177280 # 32768 tokens x 320 KiB / 8
bench=$BIN/pdxfer-bench
[ -x "$bench" ] || { echo "no $bench (set BIN)" >&2; exit 2; }
ngpu=$(nvidia-smi -L | grep -c '^GPU' || true)
SRC=${SRC:-0}
if [ "$ngpu" -ge 2 ]; then DST=${DST:-1}; else DST=${DST:-0}; fi
work=$(mktemp -d /tmp/pdr-xfer-gpu.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
status=0

jfield() { python3 -c 'import json,sys
lines=[l for l in open(sys.argv[1]) if l.startswith("{")]
d=json.loads(lines[-1]) if lines else {}; print(d.get(sys.argv[2], "nan"))' "$1" "$2"; }

# Starts a target (args after the name), waits for its banner; its pid lands in target_pid.
start_target() {
    local log=$1; shift
    "$bench" --mode target --listen 127.0.0.1:$PORT "$@" >"$log" 2>&1 &
    target_pid=$!
    pids+=("$target_pid")
    for _ in $(seq 50); do grep -q '^target:' "$log" && return 0; sleep 0.2; done
    cat "$log" >&2; return 1
}
# Stops the target; a target that exits non-zero (it counted failed rooms) fails the script.
stop_target() {
    kill -INT "$target_pid" 2>/dev/null || true
    local rc=0
    wait "$target_pid" 2>/dev/null || rc=$?
    if [ "$rc" != 0 ]; then
        echo "TARGET FAILED (exit $rc):" >&2
        tail -5 "$1" >&2
        status=1
    fi
}

HEADER="| run | GB/s | transfers | verify errors | verify s | p50/p99 µs | failures | CPU s | staging peak initiator/target B |
|---|---|---|---|---|---|---|---|---|"

# One initiator run; prints a table row, or FAILED without numbers when it exited non-zero.
run_initiator() {
    local label=$1 log=$2; shift 2
    local rc=0 verify=$VERIFY
    [[ " $* " == *" --mem host "* ]] && verify=$VERIFY_HOST
    timeout $((DURATION * 3 + 300)) "$bench" --mode initiator --peer 127.0.0.1:$PORT --json --verify "$verify" \
        "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" != 0 ] || [ "$(jfield "$log" ok)" != True ]; then
        status=1
        printf '| %s | FAILED (exit %s; its numbers are not reported) |\n' "$label" "$rc"
        tail -8 "$log" >&2
        return 0
    fi
    printf '| %s | %s | %s | %s (%s) | %s | %s/%s | %s | %s | %s/%s |\n' "$label" "$(jfield "$log" gb_per_s)" \
        "$(jfield "$log" transfers)" "$(jfield "$log" verify_errors)" "$verify" "$(jfield "$log" verify_s)" \
        "$(jfield "$log" p50_us)" "$(jfield "$log" p99_us)" "$(jfield "$log" failures)" "$(jfield "$log" cpu_s)" \
        "$(jfield "$log" staging_peak_bytes)" "$(jfield "$log" target_staging_peak_bytes)"
}

echo "## GPUs"
nvidia-smi -L
echo
echo "## 1. Copy rates (pdxfer-bench --mode copytest, 1 GiB rounds)"
"$bench" --mode copytest --mem cuda --device "$SRC" --block-size 1g --duration 2 --json | tee "$work/copy.log"
echo

echo "## 2. iperf3 -P 4, loopback"
if command -v iperf3 >/dev/null; then
    iperf3 -s -p $((PORT + 2)) >/dev/null 2>&1 &
    ip_pid=$!
    pids+=("$ip_pid")
    sleep 1
    iperf3 -c 127.0.0.1 -p $((PORT + 2)) -P 4 -t "$DURATION" -J >"$work/ip.json"
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); print("iperf3 -P 4: %.3f GB/s" % (d["end"]["sum_received"]["bits_per_second"]/8e9))' "$work/ip.json"
    kill "$ip_pid" 2>/dev/null || true
else
    echo "iperf3 not installed (apt-get install -y iperf3): skipped"
fi
echo

echo "## 3. TCP, GPU$SRC -> GPU$DST over loopback (--conns $CONNS)"
echo "$HEADER"
start_target "$work/t-tcp.log" --backend tcp --mem cuda --device "$SRC"
run_initiator "1.25 GiB room, batch 1" "$work/i1.log" --backend tcp --mem cuda --device "$DST" \
    --block-size $KV --batch 1 --threads 1 --conns "$CONNS" --duration "$DURATION"
run_initiator "64 MiB blocks, batch 20" "$work/i2.log" --backend tcp --mem cuda --device "$DST" \
    --block-size 64m --batch 20 --threads 1 --conns "$CONNS" --duration "$DURATION"
run_initiator "GPU -> host memory, 64 MiB, batch 20" "$work/i3.log" --backend tcp --mem host \
    --block-size 64m --batch 20 --threads 1 --conns "$CONNS" --duration "$DURATION"
echo

if [ "$STRESS_MIN" != 0 ]; then
    echo "## 4. Stress: 32 concurrent 1.25 GiB rooms for $STRESS_MIN min (TCP, GPU$SRC -> GPU$DST)"
    (while sleep 10; do date +%T; nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader; done) \
        >"$work/smi.log" 2>&1 &
    smi_pid=$!
    pids+=("$smi_pid")
    echo "$HEADER"
    DURATION_SAVE=$DURATION
    DURATION=$((STRESS_MIN * 60))
    run_initiator "32 x 1.25 GiB" "$work/stress.log" --backend tcp --mem cuda --device "$DST" \
        --block-size $KV --batch 1 --threads 32 --conns "$CONNS" --duration "$DURATION" --timeout-ms 600000
    DURATION=$DURATION_SAVE
    kill "$smi_pid" 2>/dev/null || true
    echo
    echo "nvidia-smi compute apps (sampled every 10 s; last 3 samples):"
    tail -n 12 "$work/smi.log"
    f=$(jfield "$work/stress.log" failures)
    v=$(jfield "$work/stress.log" verify_errors)
    ti=$(jfield "$work/stress.log" staging_peak_bytes)
    tt=$(jfield "$work/stress.log" target_staging_peak_bytes)
    if [ "$f" != 0 ]; then echo "STRESS FAILED: $f failed transfers"; status=1; fi
    if [ "$v" != 0 ]; then echo "STRESS FAILED: $v rooms with wrong bytes"; status=1; fi
    if [ "$ti" = nan ] || [ "$tt" = nan ] || [ "$tt" = -1 ] || [ "$ti" -gt "$STAGING_MAX" ] || [ "$tt" -gt "$STAGING_MAX" ]; then
        echo "STRESS FAILED: staging peak $ti/$tt above $STAGING_MAX"; status=1
    fi
    # A process must appear at most once per GPU.
    if python3 - "$work/smi.log" <<'PY'; then echo "nvidia-smi: every process at most once per GPU"; else status=1; fi
import sys, collections
bad = False
sample = collections.Counter()
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 3:
        for k, v in sample.items():
            if v > 1: print("STRESS FAILED: pid %s on %s %d times" % (k[0], k[1], v)); bad = True
        sample = collections.Counter()
        continue
    sample[(parts[0], parts[1])] += 1
sys.exit(1 if bad else 0)
PY
    echo
fi
stop_target "$work/t-tcp.log"

if [ "$SRC" = "$DST" ]; then where="same GPU: GPU$SRC -> GPU$DST, two processes"; else where="GPU$SRC -> GPU$DST"; fi
echo "## 5. CUDA IPC, $where (reference: the copytest rate below)"
echo "$HEADER"
start_target "$work/t-ipc.log" --backend cuda_ipc --mem cuda --device "$SRC"
for t in 1 2 4 8; do
    run_initiator "cuda_ipc 1.25 GiB, $t in flight (--threads $t)" "$work/ipc-t$t.log" --backend cuda_ipc \
        --mem cuda --device "$DST" --block-size $KV --batch 1 --threads "$t" --duration "$DURATION"
done
run_initiator "cuda_ipc 64 MiB, 16 in flight (--batch 4 --threads 4)" "$work/ipc-b4.log" --backend cuda_ipc \
    --mem cuda --device "$DST" --block-size 64m --batch 4 --threads 4 --duration "$DURATION"
for t in 1 4; do
    run_initiator "cuda_ipc into VMM memory 1.25 GiB, $t in flight" "$work/ipc-vmm$t.log" --backend cuda_ipc \
        --mem cuda_vmm --device "$DST" --block-size $KV --batch 1 --threads "$t" --duration "$DURATION"
done
stop_target "$work/t-ipc.log"
if [ "$SRC" != "$DST" ]; then
    echo "cuMemcpyPeerAsync GPU$SRC->GPU$DST: $(jfield "$work/copy.log" peer_memcpypeer_gb_per_s) GB/s," \
        "unified d2d: $(jfield "$work/copy.log" peer_d2d_unified_gb_per_s) GB/s"
else
    echo "d2d copy on GPU$SRC: $(jfield "$work/copy.log" d2d_same_device_gb_per_s) GB/s"
fi
[ "$status" = 0 ] || echo "FAILED: at least one run above failed; see its log lines on stderr" >&2
exit $status
