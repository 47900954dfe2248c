#!/bin/bash
# Builds the Python module on a machine whose Python differs from the build machine's (the GPU
# host has CPython 3.12, Debian 12 has 3.11), against the carried libkiln:
#   bash scripts/gpu_python_build.sh <build-folder>
# Headers: the interpreter's; pybind11 from PyTorch's wheel where present (it tracks new
# Pythons), else <build>/pyheaders (Debian's pybind11 and dlpack, copied there by the caller).
set -e
build=${1:-build}
inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
ext=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
torch_inc=$(python3 -c 'import torch.utils.cpp_extension as c; print(c.include_paths()[0])' 2>/dev/null || true)
pyb=$build/pyheaders
[ -n "$torch_inc" ] && [ -d "$torch_inc/pybind11" ] && pyb=$torch_inc
obj=$(mktemp -d)
ls python/src/*.cpp | xargs -P 16 -I{} sh -c 'g++ -std=c++20 -O1 -DNDEBUG -fPIC -fvisibility=hidden -w \
  -Iinclude -isystem '"$pyb"' -isystem '"$build"'/pyheaders -isystem '"$inc"' -c {} \
  -o '"$obj"'/$(basename {} .cpp).o'
rm -f "$build"/python/kiln/_kiln.cpython-*.so
g++ -shared -o "$build/python/kiln/_kiln$ext" "$obj"/*.o "$build/lib/libkiln.so.0" \
  -Wl,-rpath,"$PWD/$build/lib"
echo "built $build/python/kiln/_kiln$ext with pybind11 from $pyb"
