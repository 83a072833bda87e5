# Thin wrapper around CMake: `make`, `make test`, `make run`, `make bench`, `make fuzz`.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc)
CTEST_ARGS ?= --output-on-failure

.PHONY: all deps build test test-release test-asan run bench fuzz format clean

all: build

deps:
	./scripts/install-deps.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DPDR_SANITIZE=ON >/dev/null

test-release: build
	cd $(BUILD) && ctest -j $(JOBS) $(CTEST_ARGS)

test-asan: $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
		ctest -j $(JOBS) $(CTEST_ARGS)

# The whole suite: the release build, then the same tests under ASan+UBSan.
test: test-release test-asan

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
