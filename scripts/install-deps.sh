#!/usr/bin/env bash
# Installs the Debian 12 packages that fitsum's build, tests, demo and benchmarks need. Idempotent: packages that
# are already installed are left alone. Runs as root (CI) or through sudo.
set -euo pipefail

packages=(
  cmake g++ make pkg-config ninja-build
  libtorch-dev            # LibTorch 1.13.1, CPU
  libgloo-dev             # Gloo's headers: data-parallel training on c10d's ProcessGroupGloo
  libopenblas0-pthread    # without it Debian's reference BLAS runs matmuls ~35x slower
  libtcmalloc-minimal4    # TCMalloc, the programs' malloc: ~10% less peak resident memory in training than glibc's
  libgoogle-perftools-dev # gperftools' headers: the MallocExtension interface that sets TCMalloc's release rate
  libdnnl-dev             # oneDNN's sgemm for evaluation's many-row products (the library Debian's LibTorch links)
  libsentencepiece-dev
  libpcre2-dev            # Unicode regular expressions for BART's byte-level BPE pre-tokenizer
  zlib1g-dev              # gzip-compressed data files (x.jsonl.gz), inflated as they are read
  libcurl4-openssl-dev    # HTTP(S) for models named by Hub id, downloaded into the Hugging Face cache
  libssl-dev              # the test Hub server's SHA-1 / SHA-256 ETags (tests/support/hub_server.cpp)
  nlohmann-json3-dev
  libcli11-dev
  libgtest-dev
  libbenchmark-dev
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (report_to tensorboard)
  librsvg2-bin            # rsvg-convert: the tests render the SVG reports to PNG
)
# make test-sanitize and make fuzz build with clang and its sanitizer and libFuzzer runtimes.
if [[ "${FITSUM_WITH_SANITIZERS:-0}" == 1 ]]; then
  packages+=(clang-14 libclang-rt-14-dev)
fi
# The eager-PyTorch baseline of the benchmarks (bench/) runs on Debian's python3-torch.
if [[ "${FITSUM_WITH_PYTHON_BASELINE:-0}" == 1 ]]; then
  packages+=(python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
