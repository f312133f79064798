# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # XLM-RoBERTa toxicity classifier with Keras 3: TPU (JAX), 2x T4 and CPU (TensorFlow)
#
# One notebook for every runtime. `kitlib.keras.runtime` picks the Keras backend and the data
# parallelism before Keras is imported:
#
# * Kaggle TPU v5e-8: the image ships `jax[tpu]` and `tensorflow-cpu`, so TensorFlow cannot see
#   the TPU; the notebook runs on **JAX** with `keras.distribution.DataParallel` over 8 chips.
# * Kaggle 2x T4: **TensorFlow** with `MirroredStrategy`. Colab GPU and CPU: TensorFlow,
#   default strategy. A TPU that TensorFlow can use: TensorFlow with `TPUStrategy`.
#
# Every batch has one shape (`global batch x max_len`): training drops the remainder, prediction
# pads the last batch and drops the filler rows, so the submission has exactly one row per test
# row. Nothing is installed: on Kaggle the notebook uses the image's own packages (never the full
# `tensorflow` wheel over the TPU image's `tensorflow-cpu`). See `docs/training-keras.md` for the
# runtime table and how to override it.

# %% tags=["parameters"]
backend = "auto"          # "auto", "tensorflow" or "jax" ("auto": KERAS_BACKEND, else detection)
preset = "tiny"           # "tiny" (offline, random init); "multilingual-e5-small" or "all-minilm-l6-v2" (packaged, offline); a transformers folder; or a keras-hub preset, e.g. "xlm_roberta_base_multi"
split = "auto"            # "auto": "none" when validation.csv exists, else "holdout"; "none": train on the training file, score all of validation.csv; "validation": also train on validation.csv's first half, score its second half; "holdout": hold out holdout_frac of the training file (stratified by label and lang), no validation file (kitlib.cv.splits)
holdout_frac = 0.2        # split "holdout": share of the training rows held out and scored
id_col = "id"             # the id column of every CSV: "id" only, today (the submission writers' column)
text_col = ""             # "": the text column is content, comment_text or text; else its name in every CSV
label_col = "toxic"       # the 0/1 (or [0, 1]) label column of the training and validation files
prediction_column = ""    # "": the sample submission's prediction column; without sample_submission.csv: label_col
epochs = 2
batch_per_replica = 16    # examples per replica (device) per step; the global batch is this x replicas
max_len = 128             # tokens per row, <s> and </s> included
learning_rate = 0.0       # 0: the recipe's (kitlib.training.recipe.RECIPES): 1e-3 tiny; multilingual-e5-small 3e-5 body, 1e-3 head; 2e-5 other pretrained
mixed_precision = True    # bfloat16 on TPU, float16 on GPU; CPU stays float32
train_limit = 0           # 0: every training row; N: the first N (quick runs)
valid_limit = 0           # 0: every validation row
virtual_replicas = 0      # CPU testing only: N emulated replicas (TF logical CPUs / JAX host devices)
seed = 0
data_dir = ""             # "": the competition data on Kaggle, else data/jigsaw-sample
work_dir = ""             # "": /kaggle/working on Kaggle, else the repository
cache_dir = ""            # "": kitlib.paths.scratch_dir(), outside the kernel's output (the offline tokenizer proto)
submission = "submission.csv"  # relative to work_dir


# %%
# Each parameter must have its default's type (papermill's `-p mixed_precision false` is the string
# "false", which is truthy): checked against the parameters cell, "true"/"false" read as booleans.
import sys
from pathlib import Path

if not Path("kitlib").is_dir() and Path("../kitlib").is_dir():
    sys.path.insert(0, str(Path("..").resolve()))
from kitlib.params import check_notebook_parameters

converted = check_notebook_parameters(globals())  # kitlib/params.py; each conversion is printed (a bare call would show its dict)

# %% [markdown]
# ## Setup
# The backend must be chosen before anything imports `keras`: a process holds one backend.

# %%
from kitlib import compat
from kitlib.keras.runtime import keras_runtime

print(compat.version_report(compat.KERAS_PACKAGES))  # the versions found; a warning line for each untested one
rt = keras_runtime(backend, batch_per_replica, mixed_precision=mixed_precision, virtual_replicas=virtual_replicas)

import json
import time

import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from kitlib import paths, storage
from kitlib.data import read_csv_checked
from kitlib.outputs.submission_csv import check_id_col, choose_prediction_column
from kitlib.compat.keras import keras_guarded
from kitlib.metrics import auc_text, check_two_classes, one_class_reason, slice_name
from kitlib.training.plots import plot_roc, save_figure
from kitlib.keras.data import make_dataset, predict_probabilities, row_weights, write_submission
from kitlib.training.recipe import positive_weight
from kitlib.keras.model import (
    KerasModelConfig,
    build_classifier,
    compile_classifier,
    config_json,
    epoch_timer,
    is_pretrained_folder,
    recipe_for_preset,
    resolve_preset,
    save_classifier,
)
from kitlib.keras.runtime import count_compiles

root = paths.project_root()
data = storage.as_path(data_dir) if data_dir else paths.default_data_dir(root)
work = storage.as_path(work_dir) if work_dir else paths.working_dir(root)
cache = storage.as_path(cache_dir) if cache_dir else paths.scratch_dir(root)
model_path = work / paths.KERAS_MODEL
print(f"keras {keras.__version__} on {keras.backend.backend()}; data {data}; output {work}")

# %% [markdown]
# ## Data
# The training file (`kitlib.paths.train_file`: the competition's `jigsaw-toxic-comment-train.csv`,
# else the sample's `train.csv`), `validation.csv`, `test.csv`, `sample_submission.csv`. Ids stay
# exact strings. With `split = "validation"` the rows are split by `kitlib.cv.splits.validation_split`
# (the torch notebook's rule): the scored rows are never trained on.

# %%
from kitlib.cv.splits import holdout_split, resolve_split, validation_split

check_id_col(id_col)  # kitlib/outputs/submission_csv.py
train_file, valid_file = paths.train_file(data), data / "validation.csv"
split = resolve_split(split, valid_file, present="none", choices=("none", "validation", "holdout"))
columns = dict(text_col=text_col or None, label_col=label_col)
if split == "validation":
    train_file, valid_file = validation_split(train_file, valid_file, model_path.parent / "split", **columns)
elif split == "holdout":
    train_file, valid_file = holdout_split(train_file, model_path.parent / "split-holdout", frac=holdout_frac, seed=seed, **columns)
train = read_csv_checked(train_file, text_col=text_col or None, label_cols=(label_col,), limit=train_limit or None)
valid = read_csv_checked(valid_file, text_col=text_col or None, label_cols=(label_col,), limit=valid_limit or None)
test = read_csv_checked(data / "test.csv", text_col=text_col or None)
y_train, y_valid = train[label_col], valid[label_col]
check_two_classes(y_train, slice_name(train_file, train_limit or None))  # one class trains a constant: refused
if one_class := one_class_reason(y_valid, slice_name(valid_file, valid_limit or None)):
    print(f"note: {one_class}: its ROC AUC is undefined (the val_auc Keras logs for it means nothing)")
print(f"split {split!r}: train {len(train)} rows ({y_train.mean():.1%} {label_col}), validation {len(valid)} "
      f"({y_valid.mean():.1%}), test {len(test)}")

# %% [markdown]
# ## Model
# The classifier is built inside the runtime's scope (TF: the strategy's; JAX: the global
# `DataParallel` distribution is already set), the preprocessor outside it. A transformers folder
# (multilingual-e5-small, a 4-bit copy: see README) is read by keras-hub and fine-tuned with the torch
# side's recipe (`kitlib.training.recipe`): frozen word embeddings, warm-up then linear decay, the head at its
# own rate, positive rows weighted by `pos_weight`.

# %%
cfg = KerasModelConfig(preset=resolve_preset(preset, cache), max_len=max_len, seed=seed)
recipe = recipe_for_preset(cfg.preset)
lr = learning_rate or recipe.lr
model, preprocessor = build_classifier(cfg, data_dir=data, cache_dir=cache, scope=rt.scope,
                                       freeze_word_embeddings=recipe.freeze_word_embeddings)
steps = epochs * (len(train) // rt.global_batch)
if is_pretrained_folder(cfg.preset):
    from kitlib.keras.pretrained import compile_pretrained

    compile_pretrained(model, recipe, lr, max(steps, 1), jit_compile=rt.jit_compile, scope=rt.scope)
else:
    compile_classifier(model, lr, jit_compile=rt.jit_compile, scope=rt.scope)
pos_weight = positive_weight(y_train, recipe)
trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
print(f"{preset}: {model.count_params():,} parameters ({trainable:,} trainable); recipe {recipe.name}, "
      f"learning rate {lr:g} (head {recipe.head_lr or lr:g}), {steps} steps, pos_weight {pos_weight}")

# %% [markdown]
# ## Train
# Fixed shapes: every training and validation batch is `[global_batch, max_len]` (the remainder
# is dropped). Under JAX a failed `fit` restores the model's state (`kitlib.compat.keras.keras_guarded`).

# %%
weights = None if pos_weight is None else row_weights(y_train, pos_weight)
train_ds = make_dataset(train.text, y_train, preprocessor, rt.global_batch, shuffle=True, seed=seed, sample_weight=weights)
valid_fit = make_dataset(valid.text, y_valid, preprocessor, rt.global_batch) if len(valid) >= rt.global_batch else None
timer = epoch_timer()
with count_compiles(model) as fit_compiles:
    history = keras_guarded(model, "fit", train_ds, validation_data=valid_fit, epochs=epochs, callbacks=[timer], verbose=2)
save_classifier(model, preprocessor, model_path)
(model_path.parent / "config.json").write_text(config_json(cfg))
print(f"epoch times (s): {[round(t, 1) for t in timer.times]}; fit compilations: {fit_compiles.count}; saved {model_path}")

# %% [markdown]
# ## Results
# ROC AUC on every scored validation row (padded prediction, no row dropped), overall and per
# language, the curves per epoch and the validation rows' ROC curve, saved beside the model
# (`curves.png`, `kitlib/training/plots.py`).

# %%
with count_compiles(model) as valid_compiles:
    valid_prob = predict_probabilities(model, valid.text, preprocessor, rt.global_batch, checkpoint=model_path)
assert len(valid_prob) == len(valid)
auc, auc_shown = auc_text(y_valid, valid_prob, slice_name(valid_file, valid_limit or None))
langs = pd.read_csv(valid_file, dtype=str, keep_default_na=False, nrows=len(valid)).get("lang")
per_language = {} if langs is None else {
    lang: auc_text(y_valid[langs == lang], valid_prob[(langs == lang).to_numpy()], f"{valid_file} ({lang})")[0]
    for lang in sorted(langs.unique())}
print(f"validation ROC AUC {auc_shown} on {len(valid)} rows ({valid_file.name}); per language "
      + ", ".join(f"{k} {v:.4f}" for k, v in per_language.items()) + f"; predictions std {valid_prob.std():.4f}")

hist = history.history
fig, axes = plt.subplots(1, 3, figsize=(15, 3.5))
for ax, key in zip(axes, ("loss", "auc")):
    ep = np.arange(1, len(hist[key]) + 1)
    ax.plot(ep, hist[key], "o-", label=f"train {key}")
    if f"val_{key}" in hist:
        ax.plot(ep, hist[f"val_{key}"], "o-", label=f"validation {key}")
    ax.set_xticks(ep)
    ax.set_xlabel("epoch")
    ax.set_title(key)
    ax.legend()
plot_roc(axes[2], y_valid, valid_prob, name=valid_file.name)
fig.tight_layout()
print(f"curves saved: {save_figure(fig, model_path.parent)}")
plt.show()

# %% [markdown]
# ## Predict
# The test set is padded to a multiple of the global batch, predicted in one compiled shape and
# sliced back: exactly one probability per test row, in file order.

# %%
with count_compiles(model) as test_compiles:
    test_prob = predict_probabilities(model, test.text, preprocessor, rt.global_batch, checkpoint=model_path)
assert len(test_prob) == len(test)
print(f"{len(test_prob)} test predictions; predict compilations: validation {valid_compiles.count}, test {test_compiles.count}")

# %% [markdown]
# ## Submission
# Written with the main job's rules (`kitlib.outputs.merge`): rows in `sample_submission.csv` order,
# ids as exact strings, every id predicted once; on any mismatch nothing is written.

# %%
sample = data / "sample_submission.csv" if (data / "sample_submission.csv").is_file() else None
column = choose_prediction_column(prediction_column, sample, label_col, label_parameter="label_col")
result = write_submission(
    test.id, test_prob, work / submission, sample_submission=sample, test=data / "test.csv", column=column,
    source=f"model {model_path}",
)
metrics = {
    "backend": rt.backend,
    "accelerator": rt.accelerator,
    "virtual_replicas": rt.virtual_replicas,
    "replicas": rt.num_replicas,
    "global_batch": rt.global_batch,
    "epoch_seconds": timer.times,
    "fit_compilations": fit_compiles.count,
    "predict_compilations": {"validation": valid_compiles.count, "test": test_compiles.count},
    "validation_auc": auc,
    "validation_auc_per_language": per_language,
    "validation_csv": str(valid_file),
    "validation_prediction_std": float(valid_prob.std()),
    "split": split,
    "preset": preset,
    "recipe": {"name": recipe.name, "lr": lr, "head_lr": recipe.head_lr or lr, "pos_weight": pos_weight,
               "freeze_word_embeddings": recipe.freeze_word_embeddings, "steps": steps},
    "train_rows": len(train),
    "validation_rows": len(valid),
    "test_rows": len(test),
    "submission": str(result.output),
    "submission_rows": result.num_rows,
    "history": hist,
}
(model_path.parent / "metrics.json").write_text(json.dumps(metrics, indent=1, default=float))
print(f"wrote {result.output} ({result.num_rows} rows); {rt.describe()}")
