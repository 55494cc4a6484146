#!/usr/bin/env bash
# Formats the C++ and CUDA sources with clang-format 14 in the style of
# .clang-format (Google's, 120 columns, short ifs and functions kept on one
# line, includes sorted only within their blank-line-separated groups).
#
#   tools/format.sh           rewrite the files in place
#   tools/format.sh --check   change nothing; list the files that differ and fail
#
# The test command (tools/setup.sh test) runs --check first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$fmt" ] || { echo "format: clang-format-14 is not installed (apt install clang-format-14)" >&2; exit 1; }
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.inc')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    "$fmt" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format (run tools/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
else
  "$fmt" --style=file -i "${files[@]}"
fi
