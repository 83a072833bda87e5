#!/usr/bin/env bash
# Fuzzing campaigns: builds the libFuzzer tree (clang, -DPDR_LIBFUZZER=ON: the targets link libFuzzer, the
# code under test carries its coverage and ASan+UBSan) and runs each fuzz target for SECONDS from its seed
# corpus, one after the other, printing the final coverage as a markdown table.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (default 60 s, every target of fuzz_targets.txt)
# env:   FUZZ_BUILD (build tree, default build-fuzz), CC (default clang), JOBS (build jobs, default 2),
#        FUZZ_ARGS (extra libFuzzer flags, e.g. "-rss_limit_mb=4096"), KEEP=1 keeps the work directory.
#
# Each campaign writes new inputs into a corpus of its own under a temporary directory; the seed corpus
# (tests/fuzz/corpus/NAME) is only read. A crash leaves its input (crash-*, leak-*, timeout-*) and the log
# in that directory, which is then kept, and the script exits 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
shift || true
build=${FUZZ_BUILD:-$root/build-fuzz}
jobs=${JOBS:-2}

CC=${CC:-clang} cmake -S "$root" -B "$build" -DPDR_LIBFUZZER=ON -DPDR_WERROR=ON >/dev/null
list=$build/fuzz_targets.txt
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cut -d' ' -f1 "$list")
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >/dev/null

work=$(mktemp -d /tmp/pdr-fuzz.XXXXXX)
keep=${KEEP:-0}
# shellcheck disable=SC2317 # run by the trap
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "work directory kept: $work" >&2; fi; }
trap cleanup EXIT

echo "$("${CC:-clang}" --version | head -1), $(date -u +%Y-%m-%dT%H:%MZ), ${seconds} s per target"
echo
echo "| target | seeds | cov | ft | corpus | runs | result |"
echo "|---|---|---|---|---|---|---|"
status=0
for t in "${targets[@]}"; do
    seeds=$(awk -v t="$t" '$1 == t { print $2 }' "$list")
    if [ -z "$seeds" ]; then
        echo "$t: not a fuzz target (see $list)" >&2
        exit 2
    fi
    dir=$work/$t
    mkdir -p "$dir/corpus"
    rc=0
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    "$build/$t" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/" ${FUZZ_ARGS:-} \
        "$dir/corpus" "$seeds" >"$dir/log" 2>&1 || rc=$?
    last=$(grep -E '^#[0-9]+.*cov: ' "$dir/log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")
    result="ok"
    if [ "$rc" != 0 ]; then
        result="**rc $rc**:"
        for a in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* "$dir"/slow-unit-*; do
            [ -e "$a" ] && result="$result $a"
        done
        keep=1
        status=1
        tail -n 40 "$dir/log" >&2
    fi
    echo "| $t | $(find "$seeds" -type f | wc -l) | ${cov:-?} | ${ft:-?} | ${corp:-?} | ${runs:-?} | $result |"
done
exit $status
