#!/usr/bin/env bash
# Long fuzzing campaign: builds the libFuzzer tree (clang, -DPDR_LIBFUZZER=ON: each target links libFuzzer,
# the code under test carries its coverage and ASan+UBSan) and runs every fuzz target (or the ones named)
# for SECONDS, each from a work corpus copied from its seeds, with its dictionary (tests/fuzz/dict/NAME.dict).
# Prints a Markdown table per target: executions, exec/s, final cov: and ft: (libFuzzer's last stats line),
# corpus size, crash files, peak RSS; docs/reliability.md keeps the figures. Exits 1 when any target
# crashed, leaked, timed out or ran out of memory (the inputs stay in the work directory), 2 on a usage or
# build error.
#
# Usage: bench/fuzz_long.sh [--merge] [SECONDS] [TARGET...]   (default 1800 s, every target)
#   --merge   afterwards, minimise each work corpus into the seed corpus (libFuzzer -merge=1: only inputs
#             that add coverage are copied into tests/fuzz/corpus/NAME, under their SHA-1 names)
# env:
#   FUZZ_BUILD     libFuzzer build tree (default build-fuzz)
#   FUZZ_WORK      work directory (default FUZZ_BUILD/fuzz-work; each target's corpus, logs and
#                  crash-*/leak-*/timeout-*/oom-* files under WORK/NAME, results.md beside them)
#   FUZZ_PARALLEL  targets run at the same time (default: half the cores, at least 1)
#   FUZZ_WORKERS   libFuzzer processes per target (-jobs/-workers; default 1), sharing its corpus
#   FUZZ_TIMEOUT   seconds one input may take before it counts as a hang (default 25)
#   FUZZ_RSS_MB    libFuzzer's -rss_limit_mb (default 2048)
#   FUZZ_ARGS      extra libFuzzer flags
#   CC             the compiler (default clang); JOBS: build jobs (default 2)
# Everything runs under nice 19: the campaign takes what the machine leaves.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

merge=0
if [ "${1:-}" = "--merge" ]; then
    merge=1
    shift
fi
seconds=${1:-1800}
shift || true
case $seconds in
'' | *[!0-9]*)
    echo "usage: $0 [--merge] [SECONDS] [TARGET...]" >&2
    exit 2
    ;;
esac

build=${FUZZ_BUILD:-$root/build-fuzz}
work=${FUZZ_WORK:-$build/fuzz-work}
cores=$(nproc 2>/dev/null || echo 2)
parallel=${FUZZ_PARALLEL:-$((cores / 2 > 0 ? cores / 2 : 1))}
workers=${FUZZ_WORKERS:-1}
timeout=${FUZZ_TIMEOUT:-25}
rss=${FUZZ_RSS_MB:-2048}
cc=${CC:-clang}

if ! CC=$cc cmake -S "$root" -B "$build" -DPDR_LIBFUZZER=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" >"$build.configure.log" 2>&1; then
    cat "$build.configure.log" >&2
    exit 2
fi
rm -f "$build.configure.log"
list=$build/fuzz_targets.txt
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cut -d' ' -f1 "$list")
fi
for t in "${targets[@]}"; do
    if ! awk -v t="$t" '$1 == t { found = 1 } END { exit !found }' "$list"; then
        echo "$t: not a fuzz target (see $list)" >&2
        exit 2
    fi
done
if ! nice -n 19 cmake --build "$build" -j "${JOBS:-2}" --target "${targets[@]}" >"$work.build.log" 2>&1; then
    tail -40 "$work.build.log" >&2
    exit 2
fi
rm -f "$work.build.log"

# One campaign: WORK/NAME/{corpus,log*,crash-*...}, then WORK/NAME/row (the table's row) and WORK/NAME/bad.
run_target() {
    local t=$1 seeds dir name dict rc=0
    seeds=$(awk -v t="$t" '$1 == t { print $2 }' "$list")
    name=${t#fuzz_}
    dir=$work/$t
    rm -rf "$dir"
    mkdir -p "$dir/corpus"
    cp -r "$seeds"/. "$dir/corpus/"
    dict=$root/tests/fuzz/dict/$name.dict
    local args=(-max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss" -print_final_stats=1
        -artifact_prefix="$dir/")
    [ -f "$dict" ] && args+=(-dict="$dict")
    # shellcheck disable=SC2206 # FUZZ_ARGS is a list of flags
    args+=(${FUZZ_ARGS:-})
    local t0=$SECONDS
    if [ "$workers" -gt 1 ]; then
        # -jobs writes fuzz-JOB.log in the working directory, one per process.
        (cd "$dir" && nice -n 19 "$build/$t" "${args[@]}" -jobs="$workers" -workers="$workers" corpus \
            >"$dir/log" 2>&1) || rc=$?
    else
        nice -n 19 "$build/$t" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
        cp "$dir/log" "$dir/fuzz-0.log"
    fi
    local wall=$((SECONDS - t0))
    # Per process: the final stats; the campaign: executions and exec/s summed, cov/ft/RSS the largest.
    local execs=0 eps=0 cov=0 ft=0 rssmb=0 f v
    for f in "$dir"/fuzz-*.log; do
        v=$(sed -n 's/^stat::number_of_executed_units: *//p' "$f" | tail -1)
        execs=$((execs + ${v:-0}))
        v=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$f" | tail -1)
        eps=$((eps + ${v:-0}))
        v=$(sed -n 's/^stat::peak_rss_mb: *//p' "$f" | tail -1)
        [ "${v:-0}" -gt "$rssmb" ] && rssmb=$v
        v=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$f" | tail -1 || true)
        if [ -n "$v" ]; then
            local c fe
            c=$(echo "$v" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
            fe=$(echo "$v" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
            [ "${c:-0}" -gt "$cov" ] && cov=$c
            [ "${fe:-0}" -gt "$ft" ] && ft=$fe
        fi
    done
    local nseeds ncorp kb crashes
    nseeds=$(find "$seeds" -maxdepth 1 -type f | wc -l)
    ncorp=$(find "$dir/corpus" -maxdepth 1 -type f | wc -l)
    kb=$(du -sk --apparent-size "$dir/corpus" | cut -f1)
    crashes=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
        -o -name 'oom-*' \) | wc -l)
    local result=ok
    if [ "$crashes" -gt 0 ]; then
        result="**$crashes found** ($(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' \
            -o -name 'timeout-*' -o -name 'oom-*' \) -printf '%f\n' | sed 's/-.*//' | sort | uniq -c |
            awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}'))"
        touch "$dir/bad"
    elif [ "$rc" -ne 0 ]; then
        result="**exit $rc**, no input saved (see $dir/log)"
        touch "$dir/bad"
    fi
    printf '| %s | %s s | %s | %s | %s | %s | %s | %s (%s KiB) | %s MB | %s |\n' "$t" "$wall" "$execs" "$eps" \
        "$cov" "$ft" "$nseeds" "$ncorp" "$kb" "$rssmb" "$result" >"$dir/row"
}

mkdir -p "$work"
echo "$("$cc" --version | head -1), $(date -u +%Y-%m-%dT%H:%MZ), ${seconds} s per target," \
    "$parallel at a time, $workers process(es) each, on $cores cores (nice 19)"
echo
header='| target | time | executions | exec/s | cov | ft | seeds | corpus (size) | peak RSS | crashes |'
rule='|---|---|---|---|---|---|---|---|---|---|'
running=0
for t in "${targets[@]}"; do
    run_target "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$parallel" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

status=0
{
    echo "$header"
    echo "$rule"
    for t in "${targets[@]}"; do
        if [ -f "$work/$t/row" ]; then cat "$work/$t/row"; else echo "| $t | | | | | | | | | **no result** |"; fi
    done
} | tee "$work/results.md"
for t in "${targets[@]}"; do
    if [ -f "$work/$t/bad" ] || [ ! -f "$work/$t/row" ]; then
        status=1
        echo "$t: see $work/$t/ (log, crash inputs)" >&2
    fi
done

if [ "$merge" = 1 ]; then
    echo
    for t in "${targets[@]}"; do
        seeds=$(awk -v t="$t" '$1 == t { print $2 }' "$list")
        before=$(find "$seeds" -maxdepth 1 -type f | wc -l)
        nice -n 19 "$build/$t" -merge=1 -timeout="$timeout" -rss_limit_mb="$rss" "$seeds" "$work/$t/corpus" \
            >"$work/$t/merge.log" 2>&1 || { echo "$t: merge failed (see $work/$t/merge.log)" >&2; status=1; }
        after=$(find "$seeds" -maxdepth 1 -type f | wc -l)
        echo "$t: merged $((after - before)) new input(s) into ${seeds#"$root"/}"
    done
fi
exit $status
