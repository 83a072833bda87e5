#!/bin/sh
# ctest's fuzz_libfuzzer_form: every fuzz target must still be a libFuzzer binary whose code under test is
# instrumented when built with -DPDR_LIBFUZZER=ON. Builds the fuzz targets in a clang tree of its own
# (BUILD_DIR, kept between runs so that later runs rebuild only what changed), then runs each one over its
# seed corpus with -runs=0 -print_coverage=1 and checks that
#   - libFuzzer loaded the corpus ("INITED"): the program is a libFuzzer binary, not the replay main();
#   - some covered function is in a .c file outside tests/fuzz/ (inline functions of headers do not
#     count): the code under test feeds libFuzzer coverage;
#   - its dictionary tests/fuzz/dict/NAME.dict (fuzz_NAME) exists and libFuzzer reads it whole.
# Exits 77 (skipped) when clang cannot link a libFuzzer program or llvm-symbolizer (which names the
# covered functions' files) is missing.
#
# Usage: check_libfuzzer.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
build=$2
cc=${PDR_FUZZ_CC:-clang}

probe=$(mktemp -d /tmp/pdr-fuzzform.XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' >"$probe/t.c"
if ! command -v "$cc" >/dev/null 2>&1 ||
    ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/t.c" -o "$probe/t" >/dev/null 2>&1; then
    echo "skipped: $cc cannot link a libFuzzer program"
    exit 77
fi
if ! command -v llvm-symbolizer >/dev/null 2>&1; then
    echo "skipped: no llvm-symbolizer"
    exit 77
fi

CC=$cc "${CMAKE:-cmake}" -S "$src" -B "$build" -DPDR_LIBFUZZER=ON -DPDR_WERROR=ON >"$probe/configure.log" 2>&1 ||
    { cat "$probe/configure.log"; exit 1; }
targets=$(cut -d' ' -f1 "$build/fuzz_targets.txt")
# shellcheck disable=SC2086 # one word per target
"${CMAKE:-cmake}" --build "$build" -j "${JOBS:-2}" --target $targets >"$probe/build.log" 2>&1 ||
    { tail -40 "$probe/build.log"; exit 1; }

fail=0
while read -r t seeds; do
    mkdir "$probe/$t"
    dict=$src/tests/fuzz/dict/${t#fuzz_}.dict
    if [ ! -f "$dict" ]; then
        echo "$t: no dictionary ($dict)"
        fail=1
        continue
    fi
    "$build/$t" -runs=0 -print_coverage=1 -dict="$dict" "$probe/$t" "$seeds" >"$probe/$t.log" 2>&1 || true
    entries=$(grep -v '^#' "$dict" | grep -c . || true)
    if ! grep -q "^Dictionary: $entries entries" "$probe/$t.log"; then
        echo "$t: libFuzzer did not read the $entries entries of $dict:"
        grep -m3 -i 'dictionary\|ParseDictionary' "$probe/$t.log" || tail -3 "$probe/$t.log"
        fail=1
        continue
    fi
    if ! grep -q 'INITED' "$probe/$t.log"; then
        echo "$t: not a libFuzzer binary (no INITED line over $seeds):"
        tail -5 "$probe/$t.log"
        fail=1
        continue
    fi
    lib=$(grep '^COVERED_FUNC:' "$probe/$t.log" | grep -v '/tests/fuzz/' | grep -c '[.]c:[0-9]*$' || true)
    if [ "$lib" -eq 0 ]; then
        echo "$t: no covered function in a .c file outside tests/fuzz/: the code under test is not instrumented"
        fail=1
        continue
    fi
    echo "$t: libFuzzer, $(grep -m1 'INITED' "$probe/$t.log" | sed 's/.*\(cov: [0-9]*\).*/\1/'), $lib covered functions of the code under test"
done <"$build/fuzz_targets.txt"
exit $fail
