# fitsum front door. `make demo` and `make test` are the two commands of the README's quick start.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

SANITIZE_DIR ?= build-sanitize
FUZZ_SECONDS ?= 60

.PHONY: deps build build-sanitize test test-haswell test-all test-sanitize fuzz demo bench clean

deps:
	bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The default run: everything except the tests labelled slow or gpu.
test: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure -LE "slow|gpu" -j $(JOBS) $(CTEST_FLAGS)

# The default run again with OpenBLAS forced onto its Haswell (AVX2) kernels: tolerances must not depend on the
# kernels a CPU happens to pick.
test-haswell: deps
	$(MAKE) build
	cd $(BUILD_DIR) && OPENBLAS_CORETYPE=Haswell ctest --output-on-failure -LE "slow|gpu" -j $(JOBS) $(CTEST_FLAGS)

test-all: deps
	$(MAKE) build
	cd $(BUILD_DIR) && ctest --output-on-failure -LE gpu -j $(JOBS) $(CTEST_FLAGS)

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

demo: deps
	$(MAKE) build
	bash scripts/demo.sh $(BUILD_DIR)

bench: deps
	$(MAKE) build
	bash scripts/bench.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR)
