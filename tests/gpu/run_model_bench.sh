#!/bin/sh
# The real-model benchmark on one GPU, in one command: a randomly initialised ~1.1B-parameter
# Llama-style model (config 1b, bf16) served disaggregated behind pdrouter, prefill and decode as two
# processes on device 0, against a monolithic worker; equality, TTFT/TPOT per backend (cuda_ipc, tcp,
# tcp streamed by layer), the prefill kill test and one request's per-phase timing
# (tests/gpu/test_model_pd.py says what each step proves).
#
#   PDROUTER=/opt/pdr/bin/pdrouter PDSIM=/opt/pdr/bin/pdsim PDSHIM_LIB=/opt/pdr/lib/libpdshim.so \
#       tests/gpu/run_model_bench.sh DIR [extra test_model_pd.py flags]
#
# Or PDR_BUILD=BUILD_DIR for all three. PYTHON picks the interpreter with PyTorch (default python3);
# PDSHIM_PY the directory of pdshim.py (default worker-shim/python of this tree). LD_LIBRARY_PATH is the
# caller's. Writes DIR/results.json, DIR/summary.txt, DIR/run.log and DIR/logs/ (every process's log, the
# router configs and access logs). Exit status: 0 all passed, 1 a mismatch, error or non-2xx answer,
# 77 no PyTorch or no GPU, 2 a missing binary or argument.
set -u
if [ $# -lt 1 ]; then
    echo "usage: $0 DIR [test_model_pd.py flags]" >&2
    exit 2
fi
dir=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir" || exit 2
py=${PYTHON:-python3}
if [ -n "${PDR_BUILD:-}" ]; then
    : "${PDROUTER:=$PDR_BUILD/pdrouter}" "${PDSIM:=$PDR_BUILD/pdsim}" "${PDSHIM_LIB:=$PDR_BUILD/libpdshim.so}"
fi
for v in PDROUTER PDSIM PDSHIM_LIB; do
    eval "p=\${$v:-}"
    if [ -z "$p" ] || [ ! -e "$p" ]; then
        echo "$0: set $v (or PDR_BUILD) to an existing file (now: '${p}')" >&2
        exit 2
    fi
done
export PDROUTER PDSIM PDSHIM_LIB PDMODEL_PYTHON="$py"
echo "run_model_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ) into $dir"
echo "  pdrouter $PDROUTER ($("$PDROUTER" --version 2>&1 | head -n 1))"
echo "  pdsim $PDSIM, libpdshim $PDSHIM_LIB, python $py"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total \
    --format=csv,noheader 2>&1 | sed 's/^/  gpu: /'
# Prompts of 128, 2048 and 8192 tokens, 32 new tokens, 5 timed requests per point after one warm-up:
# about 4-6 minutes on an H200 (most of it model initialisation in each worker process).
# The driver's status, through the pipe into tee.
(
    "$py" "$here/test_model_pd.py" --out "$dir" --device cuda:0 --config 1b \
        --lengths 128,2048,8192 --max-new-tokens 32 --reps 5 "$@" 2>&1
    echo $? >"$dir/exit_status"
) | tee "$dir/run.log"
status=$(cat "$dir/exit_status" 2>/dev/null || echo 1)
echo "run_model_bench: exit $status; summary in $dir/summary.txt"
exit "$status"
