#!/usr/bin/env bash
# TPU check (issue 40 item 7), gpu_check.sh's counterpart for the sharded JAX side: on a TPU v5e-8, a real
# decoder's shape (default Qwen3-14B, its layers cut to 8; random bf16 weights) LoRA-trains and predicts on
# a (batch, model) mesh (default 1x8, 8 rows x 256 tokens), and prints tokens/s, achieved TFLOP/s and the
# share of the chips' peak (8 x 197 TFLOP/s bf16: kitlib.keras.chip_plan.V5E), beside the planned figures
# of the full shape (the step floor at peak, labelled PLANNED). The plan per chip is printed and checked
# before any weight is built (kitlib.keras.chip_plan.check_fits).
# Without a TPU it runs the same code on 8 virtual JAX CPU devices and a tiny Qwen3 shape at fp32, and
# says so on its first line of figures ("CPU REHEARSAL"): it tests the script, it measures no chip.
#
#   bash scripts/tpu_check.sh [PYTHON] [--model qwen3-14b] [--layers 8] [--mesh 1x8] [--batch 8] [--length 256]
#                             [--steps 5] [--json FILE]
#
# --layers 0 keeps every layer (Qwen3-14B at 1x8 plans 3.69 GB of frozen weights per chip; its random
# initialisation takes minutes). Needs the JAX environment (make setup; on Kaggle's TPU image: jax[tpu],
# keras, keras-hub). A few minutes on a v5e-8; about half a minute on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [[ $# -gt 0 && "$1" != --* ]]; then PY=$1; shift; fi
unset KERAS_BACKEND  # the script selects JAX itself, before Keras loads
export TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/tpu_throughput.py "$@"
