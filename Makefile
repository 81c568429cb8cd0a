# tierkv — one Makefile. `make` builds build/tierkv; `make test` runs the suite;
# `make asan` / `make ubsan` / `make asan-ubsan` / `make tsan` run it under sanitizers; `make fuzz` builds libFuzzer
# targets (clang); `make fuzz-run FUZZ_SECONDS=N` runs each for N seconds, `make fuzz-smoke` is CI's
# short run;
# `make cuda` builds the same binaries with the CUDA backend into build-cuda/ (needs nvcc; plain
# `make` does not; `make cuda BUILD=DIR` builds into DIR), `make cuda-test` runs that suite (its
# CUDA tests skip without a GPU).
# Variables: SERVE=0 leaves the server out (no src/serve but its reasoning splitter, no test_serve,
# no libmicrohttpd, jansson or hiredis: `tierkv serve` then says so and exits 2); WERROR= turns
# warnings-as-errors off for cc and nvcc (default -Werror: on); EXTRA_INC=-IDIR puts DIR first on
# the include path of cc and nvcc;
# NVCC and CUDA_HOME default to the nvcc on PATH and the toolkit it lies in (else /usr/local/cuda).
# A build folder remembers its configuration (BUILD/config.stamp): building one folder with other
# SERVE, CUDA, CC, OPT, CFLAGS or EXTRA_INC recompiles it whole rather than mixing objects.
CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?=
WERROR  ?= -Werror
EXTRA_INC ?=
SERVE   ?= 1
BASEFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra $(WERROR) $(OPT) -g $(EXTRA_INC) -Iinclude -Isrc -MMD -MP -pthread
LDLIBS  = -lm -pthread
ifeq ($(SERVE),0)
BASEFLAGS += -DTKV_NO_SERVE
else
# the server's libraries: libmicrohttpd (HTTP), jansson (JSON), hiredis (the shared park store),
# all packaged by Debian
LDLIBS  := -lmicrohttpd -ljansson -lhiredis $(LDLIBS)
endif

# Kernel variants are compiled with their own ISA flags and chosen at run time from cpuid.
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c

# SERVE=0 still builds src/serve/reasoning.c: the pure reasoning splitter (no HTTP, no JSON) that
# `tierkv chat` shares with the server.
LIB_SRC  = $(sort $(wildcard src/base/*.c src/gguf/*.c src/backend/*.c src/backend/cpu/*.c src/backend/cuda/*.c src/codec/*.c src/model/*.c src/kv/*.c src/engine/*.c src/eval/*.c src/sched/*.c $(if $(filter 0,$(SERVE)),src/serve/reasoning.c,src/serve/*.c)))
# SERVE=0: tools/cmd_serve_none.c (a `serve` that says why it is missing) replaces tools/cmd_serve.c
TOOL_SRC = $(filter-out $(if $(filter 0,$(SERVE)),tools/cmd_serve.c,tools/cmd_serve_none.c),$(sort $(wildcard tools/*.c)))
TEST_SRC = $(filter-out $(if $(filter 0,$(SERVE)),tests/test_serve.c tests/test_jsonc.c),$(sort $(wildcard tests/*.c)))
BENCH_SRC = $(sort $(wildcard bench/*.c))

LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)

# CUDA=1 (set by `make cuda`): the .cu files of src/backend/cuda, nvcc for Hopper (sm_90 code and
# compute_90 PTX), TKV_CUDA for the C files, and the static CUDA runtime. nvcc: NVCC if given, else
# CUDA_HOME/bin/nvcc if CUDA_HOME is given, else the one on PATH, else /usr/local/cuda/bin/nvcc;
# CUDA_HOME (the libraries) defaults to the folder above that nvcc's bin/. Only CUDA=1 looks.
CUDA      ?= 0
CU_ARCH   ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifeq ($(CUDA),1)
ifneq ($(filter undefined default,$(origin NVCC)),)
NVCC := $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,$(or $(shell command -v nvcc 2>/dev/null),/usr/local/cuda/bin/nvcc))
endif
CUDA_HOME ?= $(or $(patsubst %/bin/,%,$(dir $(realpath $(shell command -v $(NVCC) 2>/dev/null)))),/usr/local/cuda)
BASEFLAGS += -DTKV_CUDA
CU_SRC  = $(sort $(wildcard src/backend/cuda/*.cu))
CU_OBJ  = $(CU_SRC:%.cu=$(BUILD)/%.o)
LIB_OBJ += $(CU_OBJ)
LDLIBS  += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/targets/x86_64-linux/lib -lcudart_static -ldl -lrt -lstdc++
endif
# EMU=1 (set by `make cuda-emu`): the emulated runtime (tests/cuda_emu/emu_rt.cpp) in the library, so
# the static CUDA runtime is never pulled in; its symbols exported for libcublas_emu.so.
EMU ?= 0
# EMU_DEVICE_CXX: the compiler of the device code (nvcc-emu) and of the emulated cuBLAS (g++ when unset)
EMU_CXX_FLAGS0 = -std=c++17 -g -fno-strict-aliasing -ffp-contract=off -I$(CUDA_HOME)/include
EMU_CXX = $(or $(EMU_DEVICE_CXX),g++) $(EMU_CXX_FLAGS0) $(or $(EMU_CXXFLAGS),-O2)
# the emulated runtime's flags: EMU_CXXFLAGS unless EMU_RT_CXXFLAGS says otherwise (under ThreadSanitizer
# it is not instrumented: tests/cuda_emu/emu_rt.cpp)
EMU_RT_CXX = g++ $(EMU_CXX_FLAGS0) $(or $(EMU_RT_CXXFLAGS),$(EMU_CXXFLAGS),-O2)
ifeq ($(EMU),1)
LIB_OBJ += $(BUILD)/tests/cuda_emu/emu_rt.o
override LDFLAGS += -rdynamic
endif
NVCCFLAGS = -std=c++17 -O3 -g -lineinfo -DTKV_CUDA -D_GNU_SOURCE $(EXTRA_INC) -Iinclude -Isrc $(CU_ARCH) \
            $(if $(WERROR),--Werror all-warnings) -Xcompiler -Wall,-Wextra$(if $(WERROR),$(comma)-Werror) -MMD -MP
comma := ,
TOOL_OBJ = $(TOOL_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ = $(TEST_SRC:%.c=$(BUILD)/%.o)
# tools/main.c holds main(); the other tool files are commands the test binary may also call.
TOOL_LIB_OBJ = $(filter-out $(BUILD)/tools/main.o,$(TOOL_OBJ))

all: $(BUILD)/tierkv

# The folder's configuration: rewritten only when it changes, and every object depends on it.
STAMP = $(BUILD)/config.stamp
BUILD_CONFIG = $(subst ',,CC=$(CC) OPT=$(OPT) CFLAGS=$(CFLAGS) CUDA=$(CUDA) EMU=$(EMU) SERVE=$(SERVE) EXTRA_INC=$(EXTRA_INC) EMU_CXXFLAGS=$(EMU_CXXFLAGS) EMU_RT_CXXFLAGS=$(EMU_RT_CXXFLAGS) EMU_DEVICE_CXX=$(EMU_DEVICE_CXX))
$(STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(BUILD_CONFIG)' | cmp -s - $@ || { [ ! -f $@ ] || echo "$(BUILD): configuration changed, rebuilding it"; echo '$(BUILD_CONFIG)' >$@; }

$(BUILD)/%_avx2.o: %_avx2.c $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(AVX2_FLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/%_avx512.o: %_avx512.c $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(AVX512_FLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/%.o: %.c $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/%.o: %.cu $(STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(BUILD)/tests/cuda_emu/emu_rt.o: tests/cuda_emu/emu_rt.cpp tests/cuda_emu/emu.h $(STAMP)
	@mkdir -p $(dir $@)
	$(EMU_RT_CXX) -c $< -o $@
$(BUILD)/libcublas_emu.so: tests/cuda_emu/emu_cublas.cpp $(STAMP)
	$(EMU_CXX) -fPIC -shared $< -o $@

# The build stamp (src/base/version.h): rebuilt every time, so results always name the code that
# made them.
GIT_COMMIT := $(shell git describe --always --dirty --abbrev=12 --exclude '*' 2>/dev/null || echo unknown)
# The flags it records (`tierkv --version`'s second line, results files' build_flags): the C
# compiler and its version, OPT, CFLAGS, and for CUDA=1 nvcc's release and CU_ARCH's targets.
CC_VERSION := $(shell $(CC) -dumpfullversion -dumpversion 2>/dev/null | head -1)
NVCC_RELEASE = $(shell $(NVCC) --version 2>/dev/null | grep -o 'release [0-9.]*' | cut -d' ' -f2)
BUILD_FLAGS = $(strip $(CC) $(CC_VERSION) $(OPT) $(CFLAGS))$(if $(filter 1,$(CUDA)), +cuda nvcc $(or $(NVCC_RELEASE),unknown) \
              $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(CU_ARCH)))))$(if $(filter 1,$(EMU)), +emulated)$(if $(filter 0,$(SERVE)), +noserve)
# The sources' hash (scripts/sources-hash.sh): what bench/gpu.sh compares where the tree has no .git
SOURCES_HASH = $(shell sh scripts/sources-hash.sh 2>/dev/null || echo unknown)
$(BUILD)/src/base/version.o: src/base/version.c FORCE
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) -DTKV_COMMIT='"$(GIT_COMMIT)"' -DTKV_FLAGS='"$(BUILD_FLAGS)"' \
	    -DTKV_SOURCES='"$(SOURCES_HASH)"' -c $< -o $@
FORCE:

$(BUILD)/libtierkv.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/tierkv: $(TOOL_OBJ) $(BUILD)/libtierkv.a $(STAMP)
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ $(TOOL_OBJ) $(BUILD)/libtierkv.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tierkv-tests: $(TEST_OBJ) $(TOOL_LIB_OBJ) $(BUILD)/libtierkv.a $(STAMP)
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ $(TEST_OBJ) $(TOOL_LIB_OBJ) $(BUILD)/libtierkv.a $(LDFLAGS) $(LDLIBS)

# Measurement programs: bench/x.c -> build/bench/x (`make bench`).
bench: $(BENCH_SRC:%.c=$(BUILD)/%)
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libtierkv.a
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libtierkv.a $(LDFLAGS) $(LDLIBS)
# The fuzz targets built without libFuzzer (fuzz/replay_main.c): `make test` replays the corpora
# and every crash kept there through them, with this build's compiler and sanitizers.
FUZZ_SRC = $(filter-out fuzz/replay_main.c $(if $(filter 0,$(SERVE)),fuzz/fuzz_serve_request.c),$(sort $(wildcard fuzz/*.c)))
FUZZ_NAMES = $(FUZZ_SRC:fuzz/%.c=%)
REPLAY_BIN = $(FUZZ_NAMES:%=$(BUILD)/fuzz-replay/%)
$(BUILD)/fuzz-replay/%: $(BUILD)/fuzz/%.o $(BUILD)/fuzz/replay_main.o $(BUILD)/libtierkv.a
	@mkdir -p $(dir $@)
	$(CC) $(BASEFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/fuzz/replay_main.o $(BUILD)/libtierkv.a $(LDFLAGS) $(LDLIBS)
.SECONDARY: $(FUZZ_SRC:%.c=$(BUILD)/%.o) $(BUILD)/fuzz/replay_main.o

# TESTS=substring picks tests by name (=NAME: that test alone); SHARED points at the shared fixtures.
SHARED ?= ../shared
test: test-build
	TIERKV_SHARED=$(SHARED) TIERKV_BIN=$(BUILD)/tierkv TIERKV_FUZZ_REPLAY=$(BUILD)/fuzz-replay $(BUILD)/tierkv-tests $(TESTS)
# what make test runs, built and not run
test-build: $(BUILD)/tierkv-tests $(BUILD)/tierkv $(REPLAY_BIN)

# The CUDA build: compile and link only; `make cuda-test` also runs the suite (CUDA tests skip
# without a GPU, with the runtime's reason). Into build-cuda/, or BUILD when given on the command line.
CUDA_BUILD = $(if $(filter command line,$(origin BUILD)),$(BUILD),build-cuda)
cuda:
	$(MAKE) CUDA=1 BUILD=$(CUDA_BUILD) $(CUDA_BUILD)/tierkv $(CUDA_BUILD)/tierkv-tests
cuda-test:
	$(MAKE) CUDA=1 BUILD=$(CUDA_BUILD) test
# the sanitizers' compile flags, spelled once for asan, ubsan, asan-ubsan and EMU_ASAN=1
SAN_ADDRESS = -fsanitize=address -fno-omit-frame-pointer
SAN_UNDEFINED = -fsanitize=undefined -fno-sanitize-recover=undefined
# The CUDA backend on the CPU (tests/cuda_emu, docs/CUDA.md "Checked on the CPU by emulation"): the
# .cu files compiled as host C++ by tests/cuda_emu/nvcc-emu, linked with the emulated runtime
# (EMU=1), into build-cuda-emu/ (EMU_BUILD), with the emulated cuBLAS beside the binaries.
# `make cuda-emu-test` runs the GPU tests (EMU_TESTS) on it, once per EMU_MODES. EMU_CXXFLAGS: the
# emulation's own C++ flags (-O2).
# EMU_ASAN=1: the same under AddressSanitizer, into build-cuda-emu-asan/ (out-of-bounds accesses of
# the kernels, shared memory included).
ifeq ($(EMU_ASAN),1)
EMU_BUILD ?= build-cuda-emu-asan
EMU_SAN_ARGS = OPT=-O1 CFLAGS="$(SAN_ADDRESS)" LDFLAGS=-fsanitize=address EMU_CXXFLAGS="-O1 $(SAN_ADDRESS)"
# leaks are `make asan`'s: here the toolkit's cuBLAS libraries, which cuda_host_blas_probe loads and
# unloads, leave their C++ runtimes' exception pools (2 x 71 KiB) in modules no suppression can name
EMU_SAN_ENV = ASAN_OPTIONS=detect_leaks=0
endif
# EMU_TSAN=1: under ThreadSanitizer, into build-cuda-emu-tsan/: races between the device's threads,
# streams and the host's threads, whatever order the emulation runs them in (tests/cuda_emu/emu_rt.cpp).
# The device code is compiled by clang++: g++ leaves unchecked a store of a call's struct result
# (`rec[i] = __float2half_rn(x)`), the device code's usual way to write a half.
ifeq ($(EMU_TSAN),1)
EMU_BUILD ?= build-cuda-emu-tsan
EMU_SAN_ARGS = OPT=-O1 CFLAGS="-fsanitize=thread" LDFLAGS=-fsanitize=thread EMU_CXXFLAGS="-O1 -fsanitize=thread" \
               EMU_RT_CXXFLAGS="-O1 -DEMU_TSAN=1" EMU_DEVICE_CXX=clang++
EMU_SAN_ENV = TSAN_OPTIONS="halt_on_error=1 abort_on_error=1 second_deadlock_stack=1"
EMU_EXTRA = $(EMU_BUILD)/race_check
EMU_RACE_CHECK = cuda-emu-race-check
endif
EMU_BUILD ?= build-cuda-emu
EMU_CUDA_HOME = $(or $(CUDA_HOME),$(patsubst %/bin/,%,$(dir $(realpath $(shell command -v nvcc 2>/dev/null)))),/usr/local/cuda)
cuda-emu:
	$(MAKE) CUDA=1 EMU=1 SERVE=0 BUILD=$(EMU_BUILD) NVCC=$(CURDIR)/tests/cuda_emu/nvcc-emu CUDA_HOME=$(EMU_CUDA_HOME) $(EMU_SAN_ARGS) \
	    $(EMU_BUILD)/tierkv $(EMU_BUILD)/tierkv-tests $(EMU_BUILD)/libcublas_emu.so $(EMU_EXTRA)
$(BUILD)/race_check: $(BUILD)/tests/cuda_emu/race_check.o $(BUILD)/tests/cuda_emu/emu_rt.o
	$(CC) $(LDFLAGS) $^ -o $@ -lstdc++ -lm -pthread
# That the race finder finds (tests/cuda_emu/race_check.cu): each case's exit status, 66 where
# ThreadSanitizer must report a race, 0 where CUDA orders the accesses. Part of cuda-emu-test with
# EMU_TSAN=1.
EMU_RACE_CASES = streams-ordered:0 streams-racy:66 half-racy:66 host-ordered:0 host-racy:66 reuse-ordered:0 \
                 reuse-racy:66 block-ordered:0 block-racy:66 blocks-racy:66 shared-streams-ordered:0 warp-ordered:0
cuda-emu-race-check: cuda-emu
	@[ "$(EMU_TSAN)" = 1 ] || { echo "cuda-emu-race-check: the race finder is EMU_TSAN=1's" >&2; exit 2; }
	set -e; for c in $(EMU_RACE_CASES); do n=$${c%:*}; want=$${c#*:}; rc=0; \
	    TSAN_OPTIONS=exitcode=66 $(EMU_BUILD)/race_check $$n >$(EMU_BUILD)/race_check.$$n.log 2>&1 || rc=$$?; \
	    if [ $$rc != $$want ]; then cat $(EMU_BUILD)/race_check.$$n.log; echo "race check $$n: exit $$rc, expected $$want"; exit 1; fi; \
	    echo "race check $$n: exit $$rc, as expected"; done
# EMU_MODES: the orders the tests run under (tests/cuda_emu/emu_rt.cpp): EMU_DEFER 0 (streams run
# work as queued), 1 and 2 (deferred), with r: each block's threads in reverse order (EMU_REVERSE).
EMU_TESTS ?= cuda gpu_order split qwen3_reference_logits_gpu
EMU_MODES ?= 0 1 2r
cuda-emu-test: cuda-emu $(EMU_RACE_CHECK)
	set -e; for m in $(EMU_MODES); do d=$${m%r}; r=$$([ "$$d" = "$$m" ] && echo 0 || echo 1); \
	    echo "cuda emulation, EMU_DEFER=$$d EMU_REVERSE=$$r"; \
	    EMU_DEFER=$$d EMU_REVERSE=$$r $(EMU_SAN_ENV) TIERKV_CUBLAS=$(CURDIR)/$(EMU_BUILD)/libcublas_emu.so TIERKV_SHARED=$(SHARED) \
	    TIERKV_BIN=$(EMU_BUILD)/tierkv $(EMU_BUILD)/tierkv-tests $(EMU_TESTS); done
# the nvcc a CUDA build uses (`make -s CUDA=1 print-nvcc`; scripts/check-cuda-noserve.sh)
print-nvcc:
	@echo $(NVCC)

asan:
	$(MAKE) test BUILD=build-asan OPT=-O1 CFLAGS="$(SAN_ADDRESS)" LDFLAGS=-fsanitize=address
ubsan:
	$(MAKE) test BUILD=build-ubsan OPT=-O1 CFLAGS="$(SAN_UNDEFINED)" LDFLAGS=-fsanitize=undefined
# asan-ubsan: both in one build and one run of the suite (CI's: the checks of the two, once)
ASAN_UBSAN_BUILD = BUILD=build-asan-ubsan OPT=-O1 CFLAGS="$(SAN_ADDRESS) $(SAN_UNDEFINED)" LDFLAGS="-fsanitize=address,undefined"
asan-ubsan:
	$(MAKE) test $(ASAN_UBSAN_BUILD)
# asan-ubsan-build, tsan-build: those suites built, not run (CI builds them while its single-core
# runs keep the other core busy: scripts/ci-lanes.sh)
asan-ubsan-build:
	$(MAKE) test-build $(ASAN_UBSAN_BUILD)
tsan-build:
	$(MAKE) test-build $(TSAN_BUILD)
# tsan: the suite under ThreadSanitizer (the thread pool, the transfer thread, the server's threads and
# the tierkv processes the tests start). Every process writes its reports to build-tsan/tsan-report.PID
# instead of its stderr (a test that reads a child's stderr cannot swallow one), and any such file
# fails the target, whatever the tests said. TESTS= names a part of the suite, as for make test.
TSAN_LOG = $(CURDIR)/build-tsan/tsan-report
TSAN_BUILD = BUILD=build-tsan OPT=-O1 CFLAGS="-fsanitize=thread" LDFLAGS="-fsanitize=thread"
tsan:
	rm -f $(TSAN_LOG).*
	rc=0; TSAN_OPTIONS="log_path=$(TSAN_LOG) $(TSAN_OPTIONS)" $(MAKE) test $(TSAN_BUILD) || rc=$$?; \
	if ls $(TSAN_LOG).* >/dev/null 2>&1; then cat $(TSAN_LOG).*; \
	    echo "tsan: ThreadSanitizer reported in $$(ls $(TSAN_LOG).* | wc -l) process(es): build-tsan/tsan-report.*"; exit 1; fi; \
	[ $$rc = 0 ] && echo "tsan: no report"; exit $$rc

# libFuzzer targets (clang only, ASan + UBSan). fuzz-run: each target FUZZ_SECONDS from its seeds
# (fuzz/corpus/TARGET; new inputs go to build-fuzz/corpus/TARGET, crashes to build-fuzz/crashes),
# with the coverage reached and the time run so far (build-fuzz/fuzz-time.tsv) printed at the end.
FUZZ_SECONDS ?= 60
fuzz:
	$(MAKE) $(FUZZ_NAMES:%=build-fuzz/fuzz_bin/%) BUILD=build-fuzz CC=clang OPT=-O1 CFLAGS="-fsanitize=fuzzer-no-link,address,undefined" LDFLAGS="-fsanitize=address,undefined"
build-fuzz/fuzz_bin/%: fuzz/%.c build-fuzz/libtierkv.a
	@mkdir -p $(dir $@)
	clang $(BASEFLAGS) -O1 -fsanitize=fuzzer,address,undefined -o $@ $< build-fuzz/libtierkv.a $(LDLIBS)
fuzz-run: fuzz
	TIERKV_SHARED=$(SHARED) scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_NAMES)
fuzz-smoke: fuzz
	TIERKV_SHARED=$(SHARED) scripts/fuzz.sh 25 $(FUZZ_NAMES)

clean:
	rm -rf build build-asan build-ubsan build-asan-ubsan build-tsan build-fuzz build-cuda build-cuda-noserve build-cuda-emu build-cuda-emu-asan build-cuda-emu-tsan

format:
	clang-format -i $(LIB_SRC) $(TOOL_SRC) $(TEST_SRC) $(wildcard fuzz/*.c) $(wildcard src/*/*.h src/backend/*/*.h include/*.h tests/*.h)

# The README's first command: set up, build, fetch the default model, answer one GSM8K question
# in chat mode with the tiered KV cache, print speed and tier statistics.
DEMO_Q = Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her friends every day with four. She sells the remainder at the farmers' market daily for \$$2 per fresh duck egg. How much in dollars does she make every day at the farmers' market?
demo:
	scripts/setup.sh
	$(MAKE) all
	@model=$$(scripts/fetch-model.sh 1.5b) && \
	build/tierkv run -m "$$model" --chat -n 400 --policy hierarchy --hbm-ratio 0.5 --evict-ratio 0.03 --stats \
	  -p "$(DEMO_Q) Please reason step by step, and put your final answer within \\boxed{}."

.PHONY: all bench test test-build cuda cuda-test cuda-emu cuda-emu-test cuda-emu-race-check print-nvcc asan ubsan asan-ubsan asan-ubsan-build tsan tsan-build fuzz fuzz-run fuzz-smoke clean format demo FORCE
-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_SRC:%.c=$(BUILD)/%.d) $(FUZZ_SRC:%.c=$(BUILD)/%.d) $(BUILD)/fuzz/replay_main.d $(BUILD)/tests/cuda_emu/race_check.d
