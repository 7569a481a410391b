#!/bin/sh
# Runs one fuzz campaign: builds the libFuzzer targets with clang under
# ASan + UBSan (build directory build-fuzz, meson -Dfuzzing=true), fuzzes
# TARGET for EXECUTIONS runs (default 10,000,000) on a copy of its corpus,
# then merges the inputs that add coverage, minimised, back into
# tests/fuzz/corpus/TARGET. A finding leaves crash-*/leak-*/timeout-* files
# in the log directory and exits non-zero.
#
#   tests/fuzz/run.sh TARGET [EXECUTIONS]     e.g. tests/fuzz/run.sh base64 10000000
#   tests/fuzz/run.sh --list
#
# Environment: CC (default clang), BUILD (default build-fuzz), FUZZ_LOGDIR
# (default build-fuzz/fuzz-logs), FUZZ_ARGS (extra libFuzzer flags).
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-"$src/build-fuzz"}
corpora="$src/tests/fuzz/corpus"

if [ "${1:-}" = "--list" ]; then
        ls "$corpora"
        exit 0
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
        echo "usage: $0 TARGET [EXECUTIONS] | --list" >&2
        exit 2
fi
target=$1
runs=${2:-10000000}
if [ ! -d "$corpora/$target" ]; then
        echo "$0: no corpus directory tests/fuzz/corpus/$target" >&2
        exit 2
fi

if [ ! -f "$build/build.ninja" ]; then
        CC=${CC:-clang} meson setup "$build" "$src" -Dfuzzing=true \
                -Db_sanitize=address,undefined -Db_lundef=false \
                -Dbuildtype=debugoptimized -Dwerror=false >/dev/null
fi
ninja -C "$build" "tests/fuzz_$target" >/dev/null

logdir=${FUZZ_LOGDIR:-"$build/fuzz-logs"}
work="$logdir/$target"
rm -rf "$work"
mkdir -p "$work/corpus" "$work/new"
cp "$corpora/$target"/* "$work/corpus/"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
exe="$build/tests/fuzz_$target"

cd "$work"
# One process, one worker: the count in the log's last "DONE" line is the
# number of executions.
# shellcheck disable=SC2086
"$exe" -runs="$runs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$work/" ${FUZZ_ARGS:-} \
        "$work/new" "$work/corpus" 2>"$work/fuzz.log" || {
        echo "$target: FINDING, see $work/fuzz.log" >&2
        tail -40 "$work/fuzz.log" >&2
        exit 1
}
grep -E "^(Done|stat::number_of_executed_units)" "$work/fuzz.log" || true

# Keep the checked-in corpus small: add only inputs that reach edges it
# does not (-use_counters=0: hit counts alone do not earn a file).
"$exe" -merge=1 -use_counters=0 -max_len=4096 "$corpora/$target" "$work/new" \
        2>"$work/merge.log"
echo "$target: $(ls "$corpora/$target" | wc -l) corpus files"
