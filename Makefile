# Two commands for a fresh machine (Python 3.10+ with venv; CPU is enough):
#   make submission   set up .venv, run the multicore inference notebook on data/jigsaw-sample
#   make test         set up .venv, run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
STAMP := $(VENV)/.kit-installed

.PHONY: setup submission test benchmark clean

setup: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -c constraints.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# The main job: every device predicts its shard of test.csv; the shards merge into submission.csv.
submission: setup
	mkdir -p outputs
	$(PY) -m papermill --cwd notebooks -k python3 \
		notebooks/xla_multicore_inference.ipynb outputs/xla_multicore_inference.ipynb
	@echo "submission written to $(CURDIR)/submission.csv (executed notebook: outputs/xla_multicore_inference.ipynb)"

# tests/test_strategy.py imports TensorFlow at collection; with TensorFlow in the same process the
# torch_xla and kaggle-client tests abort the run ("lost sys.stderr"), so it runs in its own process.
test: setup
	$(PY) scripts/check_pairs.py
	$(PY) -m pytest -q tests/test_strategy.py
	$(PY) -m pytest -q --ignore=tests/test_strategy.py

clean:
	rm -rf outputs artifacts .cache submission.csv

benchmark: setup
	$(PY) benchmarks/run.py
