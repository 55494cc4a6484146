#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang with ASan + UBSan) and runs
# each for SECONDS (default 60) on a copy of its seed corpus, printing the
# executions, coverage and any finding (a crash leaves crash-* in build-fuzz/).
#
#   tools/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_gguf fuzz_transport fuzz_documents fuzz_tokenizer fuzz_http fuzz_jinja)
build=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOELSP_FUZZ=ON \
  -DMOELSP_TESTS=OFF -DMOELSP_BENCH=OFF -DMOELSP_CUDA=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}"
# The GGUF target's seeds: the head of each reference model (header, metadata
# and the tensor table) and one whole small vocabulary file.
mkdir -p "$build/corpus/fuzz_gguf"
for f in tests/data/reference/*.gguf; do head -c 16384 "$f" >"$build/corpus/fuzz_gguf/$(basename "$f").head"; done
# Seeds nested 10^6 deep (2 MB each, made here rather than committed): an
# HTTP body and an LSP message, which must be refused at the nesting limit
# before anything copies or dumps them. Those two targets take inputs that
# large (-max_len); the others keep 64 KiB so their executions stay fast.
mkdir -p "$build/corpus/fuzz_http" "$build/corpus/fuzz_transport"
python3 - "$build/corpus" <<'PY'
import sys
d = sys.argv[1]
deep = b'{"prompt":' + b"[" * 1000000 + b"]" * 1000000 + b"}"
open(f"{d}/fuzz_http/deep-1e6", "wb").write(
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(deep) + deep)
msg = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":' + b"[" * 1000000 + b"]" * 1000000 + b"}"
open(f"{d}/fuzz_transport/deep-1e6", "wb").write(b"Content-Length: %d\r\n\r\n" % len(msg) + msg)
PY
status=0
for t in "${targets[@]}"; do
  max_len=65536
  case $t in fuzz_http | fuzz_transport) max_len=2200000 ;; esac
  mkdir -p "$build/corpus/$t"
  [ -d "tests/fuzz/corpus/$t" ] && cp -n tests/fuzz/corpus/$t/* "$build/corpus/$t/" 2>/dev/null || true
  echo "== $t: ${seconds}s"
  if ! (cd "$build" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "./tests/fuzz/$t" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 "corpus/$t" 2>"$t.log"); then
    echo "$t: FINDING (see $build/$t.log and $build/crash-*)"
    tail -40 "$build/$t.log"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov: " "$build/$t.log" | tail -3
done
if [ $status -eq 0 ]; then
  echo "fuzz: ${#targets[@]} targets, ${seconds}s each: no findings"
else
  echo "fuzz: FINDINGS (above)"
fi
exit $status
