# The two commands of the README: `make demo` runs the main job, `make test` the test suite.
# Both set the machine up first (Debian packages when missing, .venv with the package).
PY := .venv/bin/python

.PHONY: setup demo test bench lint

setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) examples/demo.py

test: setup
	@$(PY) -m pytest -q $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: setup
	@$(PY) -m ruff check .
