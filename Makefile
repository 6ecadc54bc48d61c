# Wrappers a new user types. Each installs what is missing, configures and builds.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
CMAKE_FLAGS ?=
export PYTHONPATH := $(CURDIR)/$(BUILD_DIR)/python

.PHONY: setup build test demo bench sanitize sanitize-address sanitize-thread clean

setup:
	@bash scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DPython_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

build: setup $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

test:
	@bash scripts/setup.sh --test
	@$(MAKE) --no-print-directory build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

demo: build
	$(PYTHON) examples/train_mnist_mlp.py

bench:
	@bash scripts/setup.sh --bench
	@$(MAKE) --no-print-directory build
	bash bench/run_all.sh $(BUILD_DIR)

# Under ASan+UBSan: the runtime's, the kernels' and the compiler's tests (ctest labels runtime,
# kernels, graph). Under TSan: the runtime's and the kernels' thread pool (parallel_chunks_test); the
# kernels and compiler are otherwise single-threaded.
sanitize: sanitize-address sanitize-thread

sanitize-address: setup
	cmake -S . -B build-asan -DACTORFLOW_SANITIZE=address -DACTORFLOW_BUILD_PYTHON=OFF -DACTORFLOW_BUILD_BENCH=OFF
	cmake --build build-asan -j $(JOBS) --target actorflow_runtime_tests kernels_test parallel_chunks_test graph_test
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -L 'runtime|kernels|graph' --timeout 600

sanitize-thread: setup
	cmake -S . -B build-tsan -DACTORFLOW_SANITIZE=thread -DACTORFLOW_BUILD_PYTHON=OFF -DACTORFLOW_BUILD_BENCH=OFF
	cmake --build build-tsan -j $(JOBS) --target actorflow_runtime_tests parallel_chunks_test
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -L runtime --timeout 600

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan
