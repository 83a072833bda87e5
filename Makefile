# Thin wrapper around CMake: `make`, `make test`, `make run`, `make bench`, `make fuzz`.
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)
CTEST_ARGS ?= --output-on-failure

.PHONY: all deps deps-test build test test-release test-asan test-tsan run bench fuzz format clean

all: build

deps:
	./scripts/install-deps.sh

# What the test suite and the benchmarks use besides: browsers, DNS and Kubernetes tools, load generators.
deps-test:
	./scripts/install-deps.sh --test

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDR_WERROR=ON >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPDR_SANITIZE=ON -DPDR_WERROR=ON >/dev/null

# Each phase leaves ctest's JUnit record (ctest-junit.xml) in its build directory for the summary of `make
# test`, which removes the old ones first: a phase whose build fails shows no results.
test-release: build
	rm -f $(BUILD)/ctest-junit.xml
	cd $(BUILD) && ctest -j $(JOBS) $(CTEST_ARGS) --output-junit $(abspath $(BUILD))/ctest-junit.xml

test-asan: $(ASAN_BUILD)/CMakeCache.txt
	rm -f $(ASAN_BUILD)/ctest-junit.xml
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
		ctest -j $(JOBS) $(CTEST_ARGS) --output-junit $(abspath $(ASAN_BUILD))/ctest-junit.xml

# ThreadSanitizer over the multi-threaded part: the transport engine and the worker shim (their own I/O
# threads, callbacks on them), and the router's state shared between its loops (admission, the worker pool,
# links, the retry budget, the event ring). Only these targets are built, so the run stays a few minutes on
# 2 cores. A transport test's ctest name is its target's; the router's program test_NAME is ctest
# router_unit_NAME.
TSAN_XFER = test_runner test_transport_wire test_transport_engine test_shim_basic test_shim_parts test_shim_faults \
	test_fdpass test_transport_staging test_transport_rdma
TSAN_ROUTER = shared_state links retry events
TSAN_TARGETS = $(TSAN_XFER) $(addprefix test_,$(TSAN_ROUTER))
TSAN_TESTS = $(TSAN_XFER) $(addprefix router_unit_,$(TSAN_ROUTER))
$(TSAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDR_TSAN=ON -DPDR_WERROR=ON >/dev/null

test-tsan: $(TSAN_BUILD)/CMakeCache.txt
	rm -f $(TSAN_BUILD)/ctest-junit.xml
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
		ctest -j $(JOBS) $(CTEST_ARGS) -R '^($(shell echo $(TSAN_TESTS) | tr ' ' '|'))$$' \
		--output-junit $(abspath $(TSAN_BUILD))/ctest-junit.xml

# The whole suite: the release build, then the same tests under ASan+UBSan, then the threaded part under
# ThreadSanitizer. Every phase runs even when an earlier one failed (its build or a test); the summary at the
# end lists each phase's failed tests and its skipped tests with the reason each printed, and the exit
# status is non-zero when any phase failed.
test: deps-test
	@rm -f $(BUILD)/ctest-junit.xml $(ASAN_BUILD)/ctest-junit.xml $(TSAN_BUILD)/ctest-junit.xml
	@rc=0; for phase in test-release test-asan test-tsan; do \
		$(MAKE) --no-print-directory $$phase || { rc=1; echo "make $$phase failed; going on with the next phase"; }; \
	done; \
	python3 scripts/test-summary.py release=$(BUILD) asan=$(ASAN_BUILD) tsan=$(TSAN_BUILD) || rc=1; \
	exit $$rc

run: deps build
	./scripts/demo.sh

bench: build
	./bench/run.sh

# libFuzzer campaigns (clang): each fuzz target for FUZZ_SECONDS from its seed corpus, one at a time.
fuzz:
	FUZZ_BUILD=$(FUZZ_BUILD) JOBS=$(JOBS) ./scripts/fuzz.sh $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
