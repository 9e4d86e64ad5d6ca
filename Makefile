# tessel: two entry points. Both install missing Debian packages (scripts/packages.txt),
# configure and build into build/, then act.
#   make demo   runs the planner on the embedded presets and prints its results
#   make test   runs every test and ends with ctest's summary
# two that keep it so (docs/RELIABILITY.md), each in a build folder of its own:
#   make fuzz            builds the libFuzzer targets (clang) and runs each for FUZZ_SECONDS
#   make test-sanitize   ASan + UBSan build: unit suites without MPI and a 2-rank tessel run
# one that packages it (docs/INSTALL.md):
#   make package         a CPU-only build in $(BUILD_DIR)-package and its Debian package
# and two for GPU machines (docs/GPU.md):
#   make gpu-bundle  a field build here (build-gpu-bundle: sm_90, no simulator or GUI)
#                    packed as tessel-gpu-bundle.tar.gz (at most 24 MiB) for a GPU machine
#   make gpu-check   on a GPU machine that has a build: the GPU tests, fp32 layouts against
#                    the CPU, GPT-2 124M next to torch.compile, the profile, one report
#                    (on a bundle: tessel-gpu-bundle/gpu-check)
BUILD_DIR ?= build
FUZZ_SECONDS ?= 20

.PHONY: demo test fuzz test-sanitize package gpu-bundle gpu-check

demo:
	@scripts/build.sh $(BUILD_DIR)
	@scripts/demo.sh $(BUILD_DIR)

test:
	@scripts/build.sh $(BUILD_DIR)
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $$(nproc)

fuzz:
	@scripts/install-deps.sh
	@scripts/fuzz.sh --build-dir $(BUILD_DIR)-fuzz --seconds $(FUZZ_SECONDS)

test-sanitize:
	@scripts/test_sanitize.sh --build-dir $(BUILD_DIR)-sanitize

package:
	@scripts/package-deb.sh $(BUILD_DIR)-package

gpu-bundle:
	@scripts/gpu-bundle.sh

gpu-check:
	@scripts/gpu-check.sh --build-dir $(BUILD_DIR)
