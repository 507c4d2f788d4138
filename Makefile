# fitsum front door. `make demo` and `make test` are the two commands of the README's quick start.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

SANITIZE_DIR ?= build-sanitize
FUZZ_SECONDS ?= 60

.PHONY: deps build build-default build-sanitize test test-haswell test-all test-hf test-sanitize fuzz fuzz-short demo bench clean \
  build-cuda test-torch2

deps:
	bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# What the default suite runs: the CLI, the fault-injection shim and the unit, model and integration test programs
# (not the slow and gpu test programs, the HF probe or the benchmarks, which no default test runs). ctest lists the
# programs it did not find built as <name>_NOT_BUILT; the default run leaves those out.
DEFAULT_TARGETS = fitsum fitsum_faults fitsum_unit_tests fitsum_model_tests fitsum_integration_tests
build-default: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target $(DEFAULT_TARGETS)

# The default run: everything except the tests labelled slow, gpu or hf.
test: deps
	$(MAKE) build-default
	cd $(BUILD_DIR) && ctest --output-on-failure -LE "slow|gpu|hf" -E "_NOT_BUILT$$" -j $(JOBS) $(CTEST_FLAGS)

# The numerical comparisons (unit and model labels, and the training trajectories) on OpenBLAS's Haswell kernels
# with fitsum's oneDNN products off (FITSUM_ONEDNN=0: LibTorch's products, as on a processor without AVX-512):
# results must not depend on the kernels a CPU gets. The rest of the suite checks processes and files.
test-haswell: deps
	$(MAKE) build-default
	cd $(BUILD_DIR) && OPENBLAS_CORETYPE=Haswell FITSUM_ONEDNN=0 ctest --output-on-failure -L "unit|model" -LE "slow|gpu|hf" -j $(JOBS) $(CTEST_FLAGS)
	cd $(BUILD_DIR) && OPENBLAS_CORETYPE=Haswell FITSUM_ONEDNN=0 ctest --output-on-failure -R "^Train\." -LE "slow|gpu|hf" -j $(JOBS) $(CTEST_FLAGS)

test-all: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure -LE "gpu|hf" -j $(JOBS) $(CTEST_FLAGS)

# Live comparisons with transformers, accelerate, tokenizers and rouge_score from PyPI (tests/hf, docs/hf.md): a venv
# in the build folder over Debian's python3-torch 1.13 (HF_TORCH=debian) or with torch from PyPI (HF_TORCH=pip).
HF_TORCH ?= debian
test-hf: deps
	$(MAKE) build
	python=$$(bash scripts/hf-venv.sh $(abspath $(BUILD_DIR)) $(HF_TORCH) | tail -n 1) && \
	  cd $(BUILD_DIR) && FITSUM_HF_PYTHON=$$python FITSUM_HF_TORCH=$(HF_TORCH) ctest --output-on-failure -L hf $(CTEST_FLAGS)

# ASan + UBSan + LeakSanitizer (clang) over the default suite, and libFuzzer targets: one instrumented build folder
# serves both (cmake/sanitizers.cmake).
$(SANITIZE_DIR)/CMakeCache.txt:
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DFITSUM_FUZZ=ON -DFITSUM_BUILD_BENCH=OFF

build-sanitize:
	FITSUM_WITH_SANITIZERS=1 bash scripts/install-deps.sh
	$(MAKE) $(SANITIZE_DIR)/CMakeCache.txt
	cmake --build $(SANITIZE_DIR) -j $(JOBS)

test-sanitize: build-sanitize
	bash scripts/test-sanitize.sh $(SANITIZE_DIR)

# FUZZ_SECONDS per target (60 by default; CI runs a short pass).
fuzz: build-sanitize
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh $(SANITIZE_DIR)

# CI's sanitizer pass: the libFuzzer targets alone (the instrumented library, not the instrumented test suite), each
# target's committed regression inputs, then FUZZ_SHORT_SECONDS of fuzzing per target.
FUZZ_SHORT_SECONDS ?= 10
fuzz-short:
	FITSUM_WITH_SANITIZERS=1 bash scripts/install-deps.sh
	$(MAKE) $(SANITIZE_DIR)/CMakeCache.txt
	cmake --build $(SANITIZE_DIR) -j $(JOBS) --target fuzzers
	FUZZ_SECONDS=$(FUZZ_SHORT_SECONDS) bash scripts/fuzz.sh $(SANITIZE_DIR)

demo: deps
	$(MAKE) build
	bash scripts/demo.sh $(BUILD_DIR)

bench: deps
	$(MAKE) build
	bash scripts/bench.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR)

# PyTorch 2.x from PyPI (a CUDA build) in $(TORCH2_BUILD_DIR)/venv, fitsum configured against its LibTorch in
# $(TORCH2_BUILD_DIR): the CUDA configuration compiles and links without a GPU, and the default suite runs on the
# CPU (scripts/torch2.sh, docs/platforms.md). FITSUM_TORCH2_PYTHON=python3 uses an installed PyTorch instead.
TORCH2_BUILD_DIR ?= build-cuda

$(TORCH2_BUILD_DIR)/CMakeCache.txt:
	bash scripts/torch2.sh configure $(TORCH2_BUILD_DIR)

# build-cuda: fitsum, the gpu test program and the NCCL check, then ldd and the no-GPU checks.
build-cuda: deps
	$(MAKE) $(TORCH2_BUILD_DIR)/CMakeCache.txt
	JOBS=$(JOBS) bash scripts/torch2.sh build $(TORCH2_BUILD_DIR)
	bash scripts/torch2.sh check $(TORCH2_BUILD_DIR)

# test-torch2: the default suite (what make test runs) built and run against that LibTorch, on the CPU.
test-torch2: build-cuda
	JOBS=$(JOBS) bash scripts/torch2.sh build $(TORCH2_BUILD_DIR) $(DEFAULT_TARGETS)
	cd $(TORCH2_BUILD_DIR) && ctest --output-on-failure -LE "slow|gpu|hf" -E "_NOT_BUILT$$" -j $(JOBS) $(CTEST_FLAGS)
