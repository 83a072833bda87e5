#!/bin/sh
# ctest's build_release_<compiler>: the project builds with CMAKE_BUILD_TYPE=Release and the given compiler,
# warnings as errors. Optimized builds see warnings the developer build (RelWithDebInfo) does not (gcc's
# -O3 -Warray-bounds after inlining, -Wmaybe-uninitialized), so one build type is not enough. Also checks
# that a plain configure (a packager's `cmake -DCMAKE_BUILD_TYPE=Release`) does not turn warnings into
# errors: only PDR_WERROR=ON does, which the Makefile and .ci/run pass.
#
# The trees live under BUILD_DIR (kept between runs, so a later run rebuilds only what changed).
# Exits 77 (skipped) when the compiler is missing.
#
# Usage: check_build.sh SOURCE_DIR BUILD_DIR CC [TARGET...]   (no target: all)
set -eu
src=$1
build=$2
cc=$3
shift 3
targets="$*"
cmake=${CMAKE:-cmake}
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "skipped: no $cc"
    exit 77
fi
mkdir -p "$build"
log=$build/check.log

# A packager's configure: no -Werror in any compile command (compile_commands.json lists them all).
rm -rf "$build/plain"
CC=$cc "$cmake" -S "$src" -B "$build/plain" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    >"$log" 2>&1 || { cat "$log"; exit 1; }
if grep -q -e '-Werror' "$build/plain/compile_commands.json"; then
    echo "a plain configure compiles with -Werror:"
    grep -m 3 -e '-Werror' "$build/plain/compile_commands.json"
    exit 1
fi
rm -rf "$build/plain"

CC=$cc "$cmake" -S "$src" -B "$build/werror" -DCMAKE_BUILD_TYPE=Release -DPDR_WERROR=ON \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$log" 2>&1 || { cat "$log"; exit 1; }
if ! grep -q -e '-Werror' "$build/werror/compile_commands.json"; then
    echo "PDR_WERROR=ON did not add -Werror to the compile commands"
    exit 1
fi
set --
for t in $targets; do set -- "$@" --target "$t"; done
start=$(date +%s)
if ! "$cmake" --build "$build/werror" -j "${JOBS:-2}" "$@" >"$log" 2>&1; then
    grep -E -A6 'error:|warning:' "$log" | head -80
    tail -5 "$log"
    exit 1
fi
echo "Release build with $cc ($("$cc" --version | head -1)): $(($(date +%s) - start)) s"
