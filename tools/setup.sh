#!/usr/bin/env bash
# Set-up, build and run on Debian 12. Idempotent; works as root or through sudo.
#
#   tools/setup.sh demo   install what is missing, build, run the main job
#   tools/setup.sh test   install what is missing, build, run every test
#                         (plus most tests under ASan + UBSan, the threaded ones
#                         under TSan, and each libFuzzer target for FUZZ_SECONDS)
#   tools/setup.sh deps   only install what is missing
#
# Environment: BUILD_DIR (default build), MOELSP_CUDA (AUTO/ON/OFF, default AUTO),
# JOBS (default: number of cores), FUZZ_SECONDS (per fuzz target in `test`, default 10; 0 skips).
set -euo pipefail

mode=${1:-demo}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# ccache hashes relative paths under the checkout: a fresh clone elsewhere
# (CI) reuses what an earlier build compiled. With -g (the sanitizer and fuzz
# builds are RelWithDebInfo) ccache also hashes the working directory, since
# it is written into the debug info: every clone at a new path missed the
# cache and compiled those three builds cold (~25 of CI's 49 minutes).
# NOHASHDIR keeps the old path in the debug info, which only names where
# sources were; stack traces still show files and lines.
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

# Debian packages and why:
#   cmake ninja-build ccache pkg-config g++   build
#   libsentencepiece-dev   SentencePiece tokenizers (llama / Mixtral vocabularies)
#   libpcre2-dev           byte-level BPE pre-tokenizer regexes (UTF + Unicode properties, JIT)
#   nlohmann-json3-dev     JSON (inspect --json, later JSON-RPC and HTTP)
#   libspdlog-dev libfmt-dev   logging and formatting (GCC 12 has no <format>)
#   libcli11-dev           command line
#   libhwloc-dev           CPU topology for the hardware profile: cores, sockets, NUMA nodes, cache sizes
#   libboost1.81-dev       Boost.Beast/Asio for `moelsp serve` and the remote backend (not libboost-dev: 1.74, conflicts)
#   libssl-dev             OpenSSL: https:// to a remote backend (through Boost.Asio's ssl)
#   curl                   the HTTP test's streaming client (test mode only)
#   catch2                 tests (v2)
#   python3                the demo's LSP client (standard library only)
#   neovim emacs-nox elpa-eglot vim   real editor clients in the LSP tests (test mode only)
#   chromium libkrb5-dev build-essential   the VS Code extension's test in a real VS Code: headless
#                          Chromium drives code-server, whose native modules build here (test mode only)
#   nodejs npm             the vscode-jsonrpc client test (test mode only; skipped when node is already on PATH)
#   clang libclang-rt-14-dev   libFuzzer (clang's -fsanitize=fuzzer) for the fuzz targets (test mode only)
#   clang-format-14        the style check (tools/format.sh --check; test mode only)
#   python3-jinja2         Python's Jinja2, the reference for the chat-template interpreter's expected outputs
#                          (tools/jinja_expect.py --check; test mode only)
#   dpkg-dev man-db        the Debian package's test: dpkg-shlibdeps for its Depends, `man -l` renders its man
#                          page (test mode only)
#   python3-jsonschema     an independent JSON Schema validator for the constrained-decoding test (test mode only)
packages=(cmake ninja-build ccache pkg-config g++ libsentencepiece-dev libpcre2-dev nlohmann-json3-dev
          libhwloc-dev libspdlog-dev libfmt-dev libcli11-dev catch2 python3 libboost1.81-dev libssl-dev)
test_packages=(neovim emacs-nox elpa-eglot vim chromium libkrb5-dev build-essential curl openssl clang libclang-rt-14-dev clang-format-14
               python3-jinja2 python3-jsonschema dpkg-dev man-db)
command -v node >/dev/null && command -v npm >/dev/null || test_packages+=(nodejs npm)

install_deps() {
  local missing=()
  local wanted=("${packages[@]}")
  [ "$mode" = test ] && wanted+=("${test_packages[@]}")
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all packages present"
    return
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

configure_and_build() {
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" -DMOELSP_WERROR=ON \
        -DMOELSP_CUDA="${MOELSP_CUDA:-AUTO}" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" "${targets[@]}"
}

# How long each part of `test` took (CI's budget is 30 minutes).
t_phase=$SECONDS
phase() {
  echo "setup: $1 took $((SECONDS - t_phase)) s (total $SECONDS s)"
  t_phase=$SECONDS
}

case "$mode" in
  deps)
    install_deps
    ;;
  demo)
    install_deps
    targets=(--target moelsp)
    configure_and_build "$build"
    echo
    echo "== moelsp inspect (the embedded default model)"
    "$build/cli/moelsp" inspect models/moelsp-default.gguf | sed -n '1,/^tokenizer/p'
    echo
    echo "== moelsp lsp, driven as an editor would (tools/demo/lsp_demo.py)"
    python3 tools/demo/lsp_demo.py "$build/cli/moelsp"
    ;;
  test)
    install_deps
    # Style first: a mis-formatted file fails in seconds, not after the build.
    tools/format.sh --check
    # The vscode-jsonrpc client test's packages (versions pinned by package-lock.json).
    if [ ! -d editor-clients/tests/node_modules/vscode-jsonrpc ]; then
      (cd editor-clients/tests && npm ci --no-audit --no-fund)
    fi
    # The HTTP tests through the openai and @anthropic-ai/sdk npm packages (pinned by its package-lock.json).
    if [ ! -d tests/http-clients/node_modules/openai ] || [ ! -d tests/http-clients/node_modules/@anthropic-ai/sdk ]; then
      (cd tests/http-clients && npm ci --no-audit --no-fund)
    fi
    # Codex CLI, Claude Code and OpenCode (pinned by tests/agents/package-lock.json), into
    # ~/.cache/moelsp/agent-clis, outside the clone: the agents_e2e test runs them.
    python3 tests/agents/run_agents.py --install-only
    targets=()
    configure_and_build "$build"
    phase "installs and the build"
    (cd "$build" && ctest -j "$jobs" --output-on-failure)
    phase "the tests"
    # The parser, tokenizer and chat-template interpreter face untrusted files,
    # and the engine runs threads over raw buffers (the KV pool hands out raw
    # rows, repacking moves weight bytes, the device pass's emulation indexes
    # paged rows and expert slots): run their tests under ASan + UBSan too.
    targets=(--target test_gguf test_gguf_malformed test_tokenizer test_tokenizer_vocab test_kernels test_repack
             test_reference_logits test_engine test_kv test_prompt_cache test_plan test_experts test_model_synthetic test_assist test_settings test_lsp
             test_jinja test_device_forward test_gpu_device test_tool_calls test_http_api test_workspace_index test_hub)
    BUILD_TYPE=RelWithDebInfo configure_and_build "${build}-asan" -DMOELSP_SANITIZE=ON -DMOELSP_CUDA=OFF \
        -DMOELSP_BENCH=OFF
    (cd "${build}-asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest -j "$jobs" --output-on-failure -L 'test_gguf|test_tokenizer|test_kernels|test_repack|test_reference_logits|test_engine|test_kv|test_prompt_cache|test_plan|test_experts|test_model_synthetic|test_assist|test_settings|test_lsp|test_jinja|test_device_forward|test_gpu_device|test_tool_calls|test_http_api|test_workspace_index|test_hub')
    phase "ASan + UBSan"
    # ThreadSanitizer over what runs threads: the engine's pool and
    # scheduler, the KV block pool, the assistant service, the LSP server's
    # reader, worker lanes and loader, the workspace index's thread.
    # (tests/tsan.supp: spdlog's internals.)
    targets=(--target test_engine test_kv test_prompt_cache test_assist test_lsp test_workspace_index)
    BUILD_TYPE=RelWithDebInfo configure_and_build "${build}-tsan" -DMOELSP_TSAN=ON -DMOELSP_CUDA=OFF -DMOELSP_BENCH=OFF
    (cd "${build}-tsan" && TSAN_OPTIONS="halt_on_error=1 suppressions=$root/tests/tsan.supp" \
        ctest -j "$jobs" --output-on-failure -L 'test_engine|test_kv|test_prompt_cache|test_assist|test_lsp|test_workspace_index')
    phase "TSan"
    # Fuzzing: each libFuzzer target (tests/fuzz) for a bounded time on its
    # seed corpus; a crash, leak, UB or timeout fails the run.
    if [ "${FUZZ_SECONDS:-10}" -gt 0 ]; then
      tools/fuzz.sh "${FUZZ_SECONDS:-10}"
    fi
    phase "fuzzing"
    ;;
  *)
    echo "usage: tools/setup.sh demo|test|deps" >&2
    exit 2
    ;;
esac
