#!/usr/bin/env bash
# fitsum against the LibTorch of PyTorch 2.x (make build-cuda, make test-torch2; bench/gpu.sh on a GPU machine).
#
#   bash scripts/torch2.sh venv BUILD_DIR        the pinned PyTorch from PyPI in BUILD_DIR/venv (skipped when there)
#   bash scripts/torch2.sh configure BUILD_DIR   CMake against that LibTorch (or FITSUM_TORCH2_PYTHON's), in BUILD_DIR
#   bash scripts/torch2.sh build BUILD_DIR [TARGET...]
#                                                TARGETs, or the CUDA build's programs: fitsum, fitsum_gpu_tests and,
#                                                where configure found NCCL, fitsum_nccl_check
#   bash scripts/torch2.sh check BUILD_DIR       ldd resolves libtorch_cuda and NCCL; --device cuda fails in one line
#
# PyPI's Linux x86-64 wheels of PyTorch are CUDA builds, so this is always the CUDA configuration: it compiles the
# CUDA paths (FITSUM_WITH_CUDA) and the c10d NCCL process group, and its tests run on the CPU where no GPU is.
# Why the pin and what it costs (download, time): docs/platforms.md.
#
# FITSUM_TORCH2_VERSION   the PyTorch version (default below)
# FITSUM_TORCH2_PYTHON    a python3 whose torch to use instead of the venv (a GPU machine's own PyTorch)
# FITSUM_CUDA_ARCH        TORCH_CUDA_ARCH_LIST for LibTorch's CMake (default 9.0: Hopper; no GPU probe needed)
# FITSUM_THIRD_PARTY_DIR  headers and GoogleTest sources for machines without the Debian packages (bench/gpu.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

# 2.14.1: the newest release whose CUDA (13.0, from the cuda-toolkit 13.0.3 wheels it depends on) is the CUDA of
# the toolkit here and of the GPU machines' drivers (nvcc 13.0); 2.15.0 moved to CUDA 13.2.
version="${FITSUM_TORCH2_VERSION:-2.14.1}"
command="${1:?usage: torch2.sh venv|configure|build|check BUILD_DIR}"
build_dir="${2:?usage: torch2.sh $command BUILD_DIR}"
shift 2

python_of() {
  if [[ -n "${FITSUM_TORCH2_PYTHON:-}" ]]; then echo "$FITSUM_TORCH2_PYTHON"; else echo "$build_dir/venv/bin/python3"; fi
}

make_venv() {
  [[ -n "${FITSUM_TORCH2_PYTHON:-}" ]] && return 0
  local python="$build_dir/venv/bin/python3"
  if [[ -x "$python" ]] && "$python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" \
    2>/dev/null; then
    echo "torch2: $("$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)') in $build_dir/venv"
    return 0
  fi
  python3 -m venv --help >/dev/null 2>&1 || {
    echo "torch2: python3 -m venv is missing: apt-get install python3-venv" >&2
    exit 1
  }
  mkdir -p "$build_dir"
  rm -rf "$build_dir/venv"
  python3 -m venv "$build_dir/venv"
  local start=$SECONDS
  echo "torch2: installing torch==$version from PyPI into $build_dir/venv (about 3 GB of CUDA wheels)"
  "$python" -m pip install --progress-bar off "torch==$version" 2>&1 | tee "$build_dir/pip-install.log" |
    grep -E "^(Successfully|ERROR)" || true
  "$python" -c "import torch" || { echo "torch2: torch==$version did not install; see $build_dir/pip-install.log" >&2; exit 1; }
  echo "torch2: installed in $((SECONDS - start)) s; venv $(du -sh "$build_dir/venv" | cut -f1)"
}

# LibTorch's CMake config enables CUDA: it needs an nvcc of the wheel's CUDA major.minor (two CUDA runtimes in one
# process would clash). The toolkit on PATH, else /usr/local/cuda.
find_nvcc() {
  local cuda_version=$1 nvcc
  for nvcc in "${CUDACXX:-}" "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
    [[ -n "$nvcc" && -x "$nvcc" ]] || continue
    if "$nvcc" --version | grep -q "release $cuda_version,"; then
      echo "$nvcc"
      return 0
    fi
    echo "torch2: $nvcc is not CUDA $cuda_version ($("$nvcc" --version | grep -o 'release [0-9.]*'))" >&2
  done
  echo "torch2: no nvcc of CUDA $cuda_version, the CUDA of this PyTorch; install that toolkit, or choose a PyTorch of" \
    "your toolkit's CUDA with FITSUM_TORCH2_VERSION" >&2
  return 1
}

configure() {
  local python
  python=$(python_of)
  local info
  info=$("$python" -c 'import torch, os; print(torch.utils.cmake_prefix_path, torch.version.cuda or "none", os.path.dirname(torch.__file__))' 2>/dev/null) ||
    { echo "torch2: $python cannot import torch" >&2; return 1; }
  read -r prefix cuda_version torch_dir <<<"$info"
  [[ $cuda_version == none ]] && cuda_version=""
  # The torch folder itself first: LibTorch's config finds libtorch.so and libc10.so with find_library, which
  # otherwise prefers a system LibTorch (Debian's 1.13) over the one beside the config.
  local args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_dir;$prefix")
  if [[ -n "$cuda_version" ]]; then
    local nvcc
    nvcc=$(find_nvcc "$cuda_version")
    args+=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$(readlink -f "$nvcc")")")")
    # The NCCL that this PyTorch loads (the nvidia-nccl wheel beside it), for the c10d NCCL process group.
    local nccl
    nccl=$("$python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
    [[ -n "$nccl" && -f "$nccl/include/nccl.h" ]] && args+=(-DFITSUM_NCCL_ROOT="$nccl")
  fi
  if [[ -n "${FITSUM_THIRD_PARTY_DIR:-}" ]]; then args+=(-DFITSUM_THIRD_PARTY_DIR="$FITSUM_THIRD_PARTY_DIR"); fi
  export TORCH_CUDA_ARCH_LIST="${FITSUM_CUDA_ARCH:-9.0}"
  echo "torch2: configuring $build_dir against $torch_dir (CUDA ${cuda_version:-none})"
  cmake "${args[@]}" "$@"
}

check() {
  local binary="$build_dir/fitsum" failures=0
  echo "torch2: ldd $binary"
  local libraries
  libraries=$(ldd "$binary")  # once: grep -q on a pipe would stop ldd early (SIGPIPE, a failure under pipefail)
  grep -E "libtorch|libc10|nccl|cudart|cublas|not found" <<<"$libraries" | sed 's/^/  /'
  if grep -q "not found" <<<"$libraries"; then echo "torch2: unresolved libraries" >&2; failures=1; fi
  # NCCL comes in through libtorch_cuda (ldd lists what the whole process loads).
  for lib in libtorch_cuda.so libnccl.so; do
    grep -q "$lib" <<<"$libraries" || { echo "torch2: $lib is not among fitsum's libraries" >&2; failures=1; }
  done
  if [[ -x "$build_dir/fitsum_nccl_check" ]]; then "$build_dir/fitsum_nccl_check" || failures=1; fi
  if ! "$(python_of)" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    # Without a GPU, asking for one must fail with one line naming the device and a hint.
    local out status
    for cmd in "info --model data/pegasus --device cuda" \
      "train --device cuda --config_name configs/pegasus-tiny --train_file data/samsum/train.jsonl --output_dir $build_dir/no-gpu"; do
      set +e
      out=$("$binary" $cmd 2>&1)
      status=$?
      set -e
      echo "torch2: fitsum $cmd -> exit $status: $out"
      if [[ $status -eq 0 || $(printf '%s\n' "$out" | wc -l) -ne 1 || "$out" != *"device cuda: "* ]]; then
        echo "torch2: expected one line about device cuda and a non-zero exit" >&2
        failures=1
      fi
    done
  fi
  return $failures
}

case "$command" in
  venv) make_venv ;;
  configure) make_venv && configure "$@" ;;
  build)
    targets=("$@")
    if [[ ${#targets[@]} -eq 0 ]]; then
      targets=(fitsum fitsum_gpu_tests)
      if grep -q "^build fitsum_nccl_check" "$build_dir/build.ninja" 2>/dev/null; then targets+=(fitsum_nccl_check); fi
    fi
    cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
    ;;
  check) check ;;
  *) echo "torch2: unknown command '$command' (venv, configure, build, check)" >&2; exit 2 ;;
esac
