#!/usr/bin/env bash
# Installs Kiln from a build tree into a temporary prefix, then builds and runs
# examples/consumer against it with find_package(kiln).
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_RPATH="$tmp/prefix/lib" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
KILN_DEVICE=cpu KILN_CACHE=0 "$tmp/consumer/app"
test -x "$tmp/prefix/bin/kiln"
"$tmp/prefix/bin/kiln" info | grep -q "cpu:0"
