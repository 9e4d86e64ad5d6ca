# tessel: two entry points. Both install missing Debian packages (scripts/packages.txt),
# configure and build into build/, then act.
#   make demo   runs the planner on the embedded presets and prints its results
#   make test   runs every test and ends with ctest's summary
BUILD_DIR ?= build

.PHONY: demo test

demo:
	@scripts/build.sh $(BUILD_DIR)
	@scripts/demo.sh $(BUILD_DIR)

test:
	@scripts/build.sh $(BUILD_DIR)
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $$(nproc)
