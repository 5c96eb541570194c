# hexisim top-level commands. `make run` and `make test` do all set-up on a fresh
# Debian 12 machine: install missing packages, configure (Release), build.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
MAKEFLAGS += --no-print-directory
SCENARIO ?= hexiscale-setting1-llama2-7b

.PHONY: all setup configure build run test bench format clean

all: build

setup:
	@./scripts/setup.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

configure: setup $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	./scripts/run_default.sh $(BUILD_DIR) $(SCENARIO)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

bench: build
	./scripts/run_benchmarks.sh $(BUILD_DIR)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD_DIR)
