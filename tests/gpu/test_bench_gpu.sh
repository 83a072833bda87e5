#!/bin/sh
# pdxfer-bench on a GPU, every byte verified on the device: a target on device 0 and an initiator on
# device 1 (device 0 when there is one GPU), CUDA IPC with 8 rooms in flight (4 threads x batch 2),
# then TCP staging from and into device memory. Both processes must exit 0: no failed room, no wrong
# byte. Exits 77 (skipped) without nvidia-smi or a GPU. Usage: test_bench_gpu.sh PDXFER_BENCH [PORT]
bench=$1
port=${2:-$((19900 + $$ % 500 * 2))}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    echo "skip: no GPU"
    exit 77
fi
dst=0
[ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ] && dst=1
log=$(mktemp /tmp/pdr-bench-gpu.XXXXXX)
"$bench" --mode target --listen 127.0.0.1:$port --mem cuda --device 0 >"$log" 2>&1 &
target=$!
i=0
until grep -q '^target:' "$log" || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
rc=0
"$bench" --mode initiator --peer 127.0.0.1:$port --backend cuda_ipc --mem cuda --device $dst \
    --block-size 64m --batch 2 --threads 4 --duration 3 --verify full || rc=1
"$bench" --mode initiator --peer 127.0.0.1:$port --backend tcp --mem cuda --device $dst \
    --block-size 16m --batch 2 --threads 2 --duration 2 --verify full || rc=1
kill -INT $target
wait $target || rc=1
cat "$log"
rm -f "$log"
[ $rc -eq 0 ] && echo "all ok" || echo "FAILED"
exit $rc
