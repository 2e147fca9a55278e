# The two commands of the README: `make demo` runs the main job, `make test` the test suite.
# Both set the machine up first (Debian packages when missing, .venv with the package).
PY := .venv/bin/python

.PHONY: setup demo test test-fast bench lint fuzz

# What `make lint` type-checks: the five packages and ground, every file of them.
TYPED := ground packets compiler amdgpu hsa tools

setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) examples/demo.py

# The tests run with the emulated AMD kernel preloaded (inert until a test opens
# amdgpu:emulated, which names the node): see scripts/emulated.sh.
EMULATED_KERNEL := LD_PRELOAD=$(CURDIR)/build/emulated/libamdgpu_kfd.so

test: setup
	@$(EMULATED_KERNEL) $(PY) -m pytest -q $(PYTEST_ARGS)

# The inner loop: everything but the tests marked slow.
test-fast: setup
	@$(EMULATED_KERNEL) $(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

# Coverage-guided fuzzing (atheris): each target of tools/fuzz/targets.py for FUZZ_SECONDS,
# from its seed corpus in tests/data/fuzz/; findings land in build/fuzz/TARGET/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= codeobject loader bundle trace kernargs kfd_ioctl
fuzz: setup
	@mkdir -p build/fuzz; status=0; for t in $(FUZZ_TARGETS); do \
		echo "== fuzz $$t ($(FUZZ_SECONDS) s, log build/fuzz/$$t.log)"; \
		$(PY) -m tools.fuzz $$t --seconds $(FUZZ_SECONDS) >build/fuzz/$$t.log 2>&1 || status=1; \
		grep -E "^stat::(number|average)|DONE|Uncaught|Error|crash-|timeout-|oom-" \
			build/fuzz/$$t.log; done; exit $$status

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: setup
	@$(PY) -m ruff check .
	@$(PY) -m mypy $(TYPED)
