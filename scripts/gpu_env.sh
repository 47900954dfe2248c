# Sourced on the GPU machine before running Kiln's tests or benchmarks from a build folder
# ($1, default build-gpu). NVIDIA's OpenCL driver is installed there without an ICD file, so
# a private vendors directory registers it beside the system's drivers (PoCL), and
# OCL_ICD_VENDORS points the ICD loader at that directory.
#
# OCL_ICD_FILENAMES is unset on purpose: the lent machine sets it to
# "libpocl.so.2:libnvidia-opencl.so.1", and PoCL rewrites it to "libpocl.so.2" in the
# environment of every process that loads it, so child processes (the cache tests' second
# processes) would lose NVIDIA's platform.
build=${1:-build-gpu}
vendors=${TMPDIR:-/tmp}/kiln-ocl-vendors
rm -rf "$vendors"
mkdir -p "$vendors"
echo libnvidia-opencl.so.1 > "$vendors/nvidia.icd"
cp /etc/OpenCL/vendors/*.icd "$vendors/" 2>/dev/null || true
unset OCL_ICD_FILENAMES
export OCL_ICD_VENDORS=$vendors
# Debian's ocl-icd honours OCL_ICD_VENDORS; the older Khronos loader the CUDA toolkit puts
# first in the loader's path does not (it found no platform at all).
[ -e /lib/x86_64-linux-gnu/libOpenCL.so.1 ] && export KILN_OPENCL_LIBRARY=/lib/x86_64-linux-gnu/libOpenCL.so.1
export KILN_PLUGIN_PATH=$PWD/$build/lib
export KILN_CUDA_PLUGIN=$PWD/$build/lib/libkiln_backend_cuda.so  # for cuda_plugin_test
export KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}

# cuBLAS (the CUDA plugin dlopens it for kiln::linalg): on the lent machine it comes with
# PyTorch's pip packages (nvidia-cublas), outside the loader's path. Add its folder unless the
# loader already knows a libcublas.so.12/13.
if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.1[23]'; then
  for _kiln_site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for _kiln_dir in "$_kiln_site"/nvidia/*/lib; do
      if ls "$_kiln_dir"/libcublas.so.1[23]* >/dev/null 2>&1; then
        export LD_LIBRARY_PATH="$_kiln_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "cuBLAS from $_kiln_dir"
        break 2
      fi
    done
  done
  unset _kiln_site _kiln_dir
fi
# cuDNN (dlopen'ed for conv2d and pooling) likewise comes with PyTorch's nvidia-cudnn package.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9'; then
  for _kiln_site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    if ls "$_kiln_site"/nvidia/cudnn/lib/libcudnn.so.9* >/dev/null 2>&1; then
      export LD_LIBRARY_PATH="$_kiln_site/nvidia/cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cuDNN from $_kiln_site/nvidia/cudnn/lib"
      break
    fi
  done
  unset _kiln_site
fi

# One line per test binary's run: summary NAME OUTPUT_FILE RC SECONDS (used by the gpu_*.sh parts).
summary() {
  echo "$1: rc=$3 $(grep -E '^\[  (PASSED|FAILED)' "$2" | tr '\n' ' ') ($4 s)"
}
