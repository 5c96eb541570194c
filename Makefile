# hexisim top-level commands. `make run` and `make test` do all set-up on a fresh
# Debian 12 machine: install missing packages, configure (Release), build.
BUILD_DIR ?= build
SAN_DIR ?= build-fuzz
ODR_DIR ?= build-odr
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 2
JOBS ?= 2
JOBS ?= $(shell nproc)
MAKEFLAGS += --no-print-directory
SCENARIO ?= hexiscale-setting1-llama2-7b

.PHONY: all setup configure build run test test-slow check-asan fuzz check-odr mutation bench format clean

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
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900 -LE slow

# Tests labelled slow (minutes of solver time each: hexiseq against hexiseq-exact on 20
# random meshes, registered by -DHEXISEQ_EXACT_TESTS=ON); not part of `make test` or CI.
test-slow: configure
	cmake -S . -B $(BUILD_DIR) -DHEXISEQ_EXACT_TESTS=ON
	cmake --build $(BUILD_DIR) -j $(JOBS)
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 3600 -L slow

# One sanitizer build serves `make check-asan` and `make fuzz`: clang -O1 with line tables (enough for
# the sanitizers' stack traces; full -g costs compile and link time), every library
# instrumented with AddressSanitizer, UBSan, libstdc++'s assertions and libFuzzer's coverage
# (HEXISIM_FUZZ), in $(SAN_DIR). Any sanitizer report fails.
SAN_CONFIGURE = CC=clang CXX=clang++ cmake -S . -B $(SAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DHEXISIM_FUZZ=ON -DHEXISIM_CUDA=OFF

# The module (unit) tests under the sanitizers. MPI, CLI and CUDA tests, the five slowest
# searches, the random-cluster quality targets, the paper-scale mutation test, the 2 x 400-step
# bf16 training run (190 s under the sanitizers), HexiSeq against every baseline on three
# clusters (minutes under the sanitizers), advise's real planner against its exhaustive
# grid (90 s), the recompute split against brute force and HexiScale on setting 1 13B (85 s),
# the four TCP / exact plan-quality searches, the exact search stopped by its budget and the two
# largest HexiSeq-vs-exact meshes (20-60 s each under the sanitizers; their code paths run in
# the smaller searches kept here), the 16 384-GPU plan's check (12 s), the cut-offs on random
# meshes (15 s) and HexiScale on the Mixtral scenario (12 s) are left to `make test` (Release).
ASAN_SKIP = Search.EveryScheduler|PlanQuality.HexiScaleMeetsTheTargets|Search.HexiScaleGivesTheSamePlanBytesWithOneOrTwoThreads|Exact.HexiScaleReaches|Search.HexiScaleBeatsOrMatches|Search.SameSeedSamePlanBytes|RecomputeSearch.HexiScaleNear|Mutation.RandomPlansOnPaperScaleClusters|Bf16Training.TracksFloat32Over200Steps|HexiSeqBaselines.HexiSeqIsNeverSlowerThanAnyBaseline|AdvisePlanner.SmallGridAgainstExhaustiveAndDeterministic|RecomputeCurve.BestSplitAndModesAreWithinSevenPercentOfTheBruteForceBest|RecomputeSearch.HexiScaleOptionKeepsTheScenarioRecompute|PlanQuality.HexiScaleEstimatesTheWholeFastType|PlanQuality.HexiScaleSplitsByCompute|PlanQuality.HexiScalePolishesTheLayers|PlanQuality.TheExactSearchIsAtLeastABaselinesPlan|Exact.StoppedByItsBudgetItBoundsTheOptimum|SmallRandomMesh.SearchIsWithinOnePercentOfExact/(8|10)$$|Search.ShippedLlama405bLongContextPlanIsValidAndFits|HexiSeqSearch.CutoffsKeepTheLayoutOnRandomMeshes|Search.MixtureOfExpertsPlansKeepTheFasterExpertPlacement
check-asan: setup
	$(SAN_CONFIGURE)
	cmake --build $(SAN_DIR) -j $(JOBS) --target unit_tests
	cd $(SAN_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) --timeout 900 -L unit -E '$(ASAN_SKIP)'

# libFuzzer targets of every loader (tests/fuzz) in the same build; each runs FUZZ_SECONDS,
# FUZZ_JOBS at a time; any crash fails. Summary: $(SAN_DIR)/fuzz-summary.txt.
fuzz: setup
	$(SAN_CONFIGURE)
	cmake --build $(SAN_DIR) -j $(JOBS) --target fuzz_targets
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) ./scripts/fuzz.sh $(SAN_DIR)

# One-definition-rule check: the unit tests linked with GCC's link-time optimisation and
# -Wodr (a violation fails the link). A whole extra build, so not part of the per-commit CI
# (.ci/run); run it when adding types or inline functions shared across libraries. Debug:
# at -O2, GCC 12's LTO reports a false -Wstringop-overflow in std::string's operator+.
check-odr: setup
	cmake -S . -B $(ODR_DIR) -DCMAKE_BUILD_TYPE=Debug -DHEXISIM_LTO_ODR=ON -DHEXISIM_CUDA=OFF
	cmake --build $(ODR_DIR) -j $(JOBS) --target unit_tests

# Mutation testing (scripts/mutation.py): MUTANTS seeded mutations (operators, constants,
# conditions) in each of scheduler/cost, estimate, program, sim/ and engine/, each rebuilt in
# $(MUT_DIR) and run against the library's unit tests; prints the kill rate per library and
# the survivors. About a minute a mutant on 2 cores, so not in CI. It rewrites one source file
# at a time (restored after each mutant, and on interruption): run it in a worktree of its own.
MUT_DIR ?= build-mutation
MUTANTS ?= 20
mutation: setup
	./scripts/mutation.py --build $(MUT_DIR) --per-library $(MUTANTS) --jobs $(JOBS)

bench: build
	./scripts/run_benchmarks.sh $(BUILD_DIR)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD_DIR) $(SAN_DIR) $(ODR_DIR)
