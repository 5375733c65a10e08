# Quickstart: `make run` (set-up + the default pipeline), `make test` (set-up + the tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Offline and quiet: no DVC analytics, one torch thread (small nets are fastest on one thread here).
export DVC_NO_ANALYTICS := 1
export DO_NOT_TRACK := 1
export OMP_NUM_THREADS := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup setup-dev run test test-fast bench lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is installed first by pip, pinned to the local CPU wheel (pip's configuration here finds it), so nothing later
# pulls a CUDA build; the rest by uv, which keeps that torch and installs the same versions pip resolves (compared
# with `pip freeze`: identical) in ~2 min instead of pip's ~5 min on this machine. Bytecode is compiled at install, as
# pip does: where PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile what it imports from source.
# `pip` stays in the venv for users.
UV := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "torch==2.13.0" "uv>=0.5,<1"
	$(UV) -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(UV) -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

setup-dev: $(VENV)/.installed-dev

run: setup
	$(BIN)/dvc repro
	@echo
	@name=$$($(BIN)/python -c "import yaml; print(yaml.safe_load(open('params.yaml'))['name'])"); \
	echo "Exported policy: $(CURDIR)/export/$$name/policy.onnx  (torch.export: policy.pt2, card: model_card.json)"; \
	echo "Report:          $(CURDIR)/reports/$$name/report.md  (scores.json, metrics.json, learning_curve.png)"; \
	echo "Offline branch:  $(CURDIR)/export/bc-cartpole/policy.onnx, report: reports/bc-cartpole/report.md (dataset: data/dataset.parquet)"

# The test files holding `serial` and `server` tests: the parts that run only those collect only these files (a
# collection of every file imports every test module: ~12-20 CPU s per pytest process, three times over for the server
# part's two workers and the serial part). tests/conftest.py refuses a test marked so in a file this misses.
SERIAL_FILES = $(shell grep -rlE 'mark\.serial' tests --include='test_*.py')
SERVER_FILES = $(shell grep -rlE 'mark\.server' tests --include='test_*.py')

# The tests write bytecode even where the environment says not to: pytest's assertion rewriting of the test files is
# cached only beside them (__pycache__/, ignored by git); without it every pytest process (each xdist worker too)
# rewrites them again, ~8 CPU s each.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

# Three parts, each after the other: the tests that may share the machine on two pytest-xdist workers (one per core
# here; a module stays on one worker, so its fixtures are made once; the files with the most learning tests first, in
# tests/conftest.py's order, not xdist's most-tests-first); then the `server` tests, two at a time (each server on its
# own free ports and folders; they mostly wait on their servers); then the `serial` ones alone (actor and worker
# processes, kills, whose timing and learning assume a quiet machine). All parts always run; the target fails if any did.
# Each part ends with its slowest tests (--durations): where the suite's time goes, in every CI log.
test: setup-dev
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=25 -m "not serial and not server"; parallel=$$?; \
	$(BIN)/python -m pytest -n 2 --dist loadfile --durations=10 -m "server and not serial" $(SERVER_FILES); server=$$?; \
	$(BIN)/python -m pytest --durations=10 -m serial $(SERIAL_FILES); serial=$$?; \
	[ $$parallel -eq 0 ] && [ $$server -eq 0 ] && [ $$serial -eq 0 ]

# The unit tests only: no learning runs, no whole-pipeline DVC runs, no Prefect/PostgreSQL/Dask servers. Split as
# `test` is: the ones that may share the machine on two workers, then the few `serial` ones (worker and actor
# processes) alone; the target fails if either part did.
test-fast: setup-dev
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not slow and not server and not serial"; parallel=$$?; \
	$(BIN)/python -m pytest -m "serial and not slow and not server" $(SERIAL_FILES); serial=$$?; \
	[ $$parallel -eq 0 ] && [ $$serial -eq 0 ]

bench: setup
	$(BIN)/python benchmarks/ppo_cartpole.py

lint: setup-dev
	$(BIN)/ruff check rlcore flows tests benchmarks docs
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml, pages in docs/) into site/; --strict: a broken link or a missing page fails.
docs: setup-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf site runs models export data dvclive .prefect
	find reports -mindepth 1 -maxdepth 1 ! -name .gitkeep -exec rm -rf {} +
