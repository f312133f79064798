# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Test-time training: fine-tune with LoRA and predict the test set in one kernel
#
# The code-competition path of Kaggle's 2025 text competitions (Jigsaw Agile Community Rules: 1st place
# fine-tuned its decoders inside the 12-hour submission): internet off, the base model's weights attached
# as a model or data set. One run of this notebook
#
# 1. takes the rows labelled at submission time: the training file, plus the test set's own labelled rows
#    when a column says so (`test_label_col`), first; a small stratified share of the training texts is held
#    out to check the model, never a text it trains on (`kitlib/cv/splits.py`, `ttt_split`);
# 2. **probes**: trains `probe_steps` steps and scores as many held-out batches with the real model on the
#    real devices, and from those times fits the run to the deadline (`time_budget_minutes`): as asked, or
#    one epoch, or the first rows only, or it refuses before training, saying which and why
#    (`kitlib/training/deadline.py`);
# 3. trains (`train`, with LoRA by default: only the adapters and the head), checks the held-out
#    predictions say something (the hand-off's collapse rule), and predicts the test set into the
#    submission (`predict`: one model copy per device, rows balanced by tokens), before the deadline.
#
# Rehearse it locally as Kaggle would run it: `python scripts/kernels.py run-local ttt_train_predict -p model tiny-random`.

# %% tags=["parameters"]
model = "auto"  # "auto": a pretrained checkpoint attached under /kaggle/input (the base model); "tiny-random" on the bundled sample only. Or a folder, a GGUF file (converted once), a packaged name ("smollm2-135m", "multilingual-e5-small"), or a hub name (internet on)
data_dir = ""  # "": the competition data when mounted on Kaggle, else the bundled sample data/jigsaw-sample
train_csv = ""  # "": <data_dir>/jigsaw-toxic-comment-train.csv (the competition's), else <data_dir>/train.csv
test_csv = ""  # "": <data_dir>/test.csv
sample_submission = ""  # "": <data_dir>/sample_submission.csv; "none": no sample, rows in the test set's order
id_col = "id"  # the id column of test_csv and the submission: "id" only, today (the submission writers' column); train_csv's is read as it
text_col = ""  # "": the text column is content, comment_text or text; else its name in both files
label_col = "toxic"  # the 0/1 (or [0, 1]) label column of train_csv, trained on and predicted
test_label_col = ""  # "": the test set carries no labels; else its column whose non-empty values (0/1 or in [0, 1]) are labels: those rows train too, first
holdout_frac = 0.1  # share of the training rows held out (stratified, seeded): scored after every epoch, and refused when it says nothing
valid_limit = 1000  # the held-out rows scored (the first N; 0: all of them): each epoch pays for them
output_csv = ""  # "": <working dir>/submission.csv (/kaggle/working on Kaggle)
cache_dir = ""  # "": kitlib.paths.scratch_dir(), outside the kernel's output
accelerator = "auto"  # "auto", "tpu", "cuda", "cpu" (eager torch, gloo), or "xla-cpu" (torch_xla on the CPU: the TPU rehearsal)
num_devices = 0  # 0: the default for what is found (every TPU chip, every GPU, one CPU replica per 4 cores)
start_method = "fork"  # "fork" in Kaggle notebooks; "spawn" on Colab and in scripts
epochs = 1  # asked for; the deadline may cut it to 1 (the order: kitlib/training/deadline.py)
batch_size = 16  # rows per replica per step (training and predicting)
max_len = 128  # tokens per row (longer ones are truncated)
lr = 0.0  # AdamW rate; 0: the recipe's (kitlib/training/recipe.py)
recipe = "auto"  # "auto": the one the checkpoint calls for, or a name in kitlib.training.recipe.RECIPES
precision = "auto"  # "auto", "fp32", "bf16" or "fp16": the rule is kitlib/run/backends/precision.py's
kind = "auto"  # the model kind (kitlib/models/kinds.py): "auto" (what config.json says), "encoder", "decoder" or "answer-tokens"
prompt = ""  # kind "answer-tokens": the template around each row ({text} once); "": kitlib.models.kinds.DEFAULT_TEMPLATE
lora_r = 16  # LoRA rank (kitlib/models/adapters.py): only adapters and head train; 0: a full fine-tune
lora_alpha = 32.0  # LoRA's scale is lora_alpha / lora_r
lora_dropout = 0.05
lora_targets = "all-linear"  # "all-linear", or module names separated by commas ("q_proj,v_proj")
weights = "auto"  # the weights' width for decoders: "auto" (the precision's where the memory plan fits, printed per device; else 8bit, then 4bit on CUDA), "fp32", "bf16", "fp16", "8bit" or "4bit" (bitsandbytes, CUDA only, with LoRA)
seed = 0
time_budget_minutes = -1.0  # -1: on Kaggle, the session's limit (9 h TPU, 12 h CPU/GPU) less 20 min; 0: no deadline; else minutes from the start of this notebook
probe_steps = 4  # training steps timed before the run is fitted to the deadline (at least 2; 0: no probe, only without a deadline)
min_train_rows = 256  # refuse, rather than train on fewer rows than this to meet the deadline

# %%
# Each parameter must have its default's type (papermill's `-p epochs 2` as a string is refused, named).
import sys
from pathlib import Path

if not Path("kitlib").is_dir() and Path("../kitlib").is_dir():
    sys.path.insert(0, str(Path("..").resolve()))
from kitlib.params import check_notebook_parameters

converted = check_notebook_parameters(globals())  # kitlib/params.py; each conversion is printed

# %% [markdown]
# ## Setup
# The deadline is fixed here, once: on Kaggle from the session's start (`kitlib/training/session.py`),
# else `time_budget_minutes` from now. The runtime detector looks for the accelerator without touching it.

# %%
import dataclasses
import time
from pathlib import Path

import pandas as pd

from kitlib import compat, paths
from kitlib.cv.heldout import TEST_TIME, make_split
from kitlib.infer import predict
from kitlib.models.model import TINY
from kitlib.run.runtime import detect_runtime
from kitlib.training.deadline import DeadlineError, fit_deadline, probe
from kitlib.training.handoff import RELOAD_ROWS, check_before_training, run_handoff
from kitlib.training.job import job_from_params, predict_job_from_params
from kitlib.training.session import time_budget
from kitlib.training.train import describe_kept, train

print(compat.version_report(compat.TORCH_PACKAGES))
rt = detect_runtime(num_devices or None, accelerator)
budget_s = time_budget(time_budget_minutes, rt.backend.hardware)  # seconds from now; None: no deadline
deadline = None if budget_s is None else time.monotonic() + budget_s
left = lambda: None if deadline is None else deadline - time.monotonic()
print(rt.describe())
print("no deadline" if deadline is None else f"deadline in {budget_s / 60:.1f} min")

# %% [markdown]
# ## Data
# The test set's labelled rows (if any) come first in the training rows, then the training file's rows
# shuffled: a run the deadline cuts to its first rows keeps the rows most like the test set. The same call
# as the training notebook's (`make_split`, `kitlib/cv/heldout.py`), with the test-time split.

# %%
parts = make_split(globals(), TEST_TIME)
display(parts.table(valid_limit=valid_limit))

# %% [markdown]
# ## Model, and the two jobs
# The model is resolved once, here, to a local folder (the attached base model); every replica loads that folder.
# The training job is built by the same call as the training notebook's (`job_from_params`), the prediction job
# from it. What the hand-off and the prediction read after training (the held-out rows with `text_col`, the
# sample submission against the test set, the output folders) is checked here: a bad input is refused before
# the probe, not after training (`kitlib/training/handoff.py`).

# %%
job = job_from_params(globals(), rt, parts, default_out_dir=paths.TTT_CHECKPOINT, resume="never", time_budget_s=budget_s)
infer_job = predict_job_from_params(globals(), job, parts)
check_before_training(infer_job, job.valid_csv, rt)  # refused now, not after training
print(f"model {model!r} -> {job.checkpoint}\nafter training: the hand-off predicts {Path(job.valid_csv).name} again, "
      f"then {parts.test_csv.name} into {infer_job.output_csv}")

# %% [markdown]
# ## Probe, then fit the run to the deadline
# A few real steps and held-out batches are timed; the run is then as asked, one epoch, or the first rows only,
# or refused here, before any real training, with the times and the fix (`kitlib/training/deadline.py`).

# %%
measured, fit = None, None
trainable = parts.counts["train_rows"] + parts.counts["labelled_test_rows"]
scored = min(parts.counts["holdout_rows"], valid_limit or parts.counts["holdout_rows"])
if probe_steps:
    measured, probe_s = probe(job, rt, start_method, steps=probe_steps, out_dir=paths.scratch_dir() / "ttt-probe")
    print(f"probe ({probe_s:.0f} s): a launch {measured.launch_s:.1f} s, a step of {measured.global_batch} rows "
          f"{measured.step_s:.2f} s, a predicted row {measured.row_s * 1000:.1f} ms")
elif deadline is not None:
    raise ValueError("probe_steps=0 with a deadline: nothing to fit the run by; probe_steps >= 2, or time_budget_minutes=0")
if measured is None:
    print(f"no probe: {epochs} epoch(s) over all {trainable:,} rows, no deadline")
else:
    try:
        fit = fit_deadline(measured, left(), train_rows=trainable, epochs=epochs, valid_rows=scored,
                           test_rows=parts.counts["test_rows"], min_rows=min_train_rows, check_rows=min(RELOAD_ROWS, scored))
    except DeadlineError as e:  # refused before training: nothing written, nothing half-done
        raise DeadlineError(f"{e} (the probe: {measured})") from None
    print(("SHRUNK to fit the deadline: " if fit.shrunk else "") + fit.describe())

# %% [markdown]
# ## Train
# The run is also given the time it may take (`time_budget_s`: what is left less the prediction's share), so
# a run slower than its probe stops with its kept epoch rather than eat the prediction's time.

# %%
if fit is not None:
    job = dataclasses.replace(job, epochs=fit.epochs, train_limit=fit.train_rows if fit.train_rows < trainable else None,
                              time_budget_s=fit.train_budget(left()))
t0 = time.perf_counter()
history = train(job, rt, start_method)
if history["best"] is None:
    raise DeadlineError(f"training stopped ({history['stopped']}) before its first epoch ended: no model to predict "
                        f"with. {fit.describe() if fit else ''}; lower epochs, rows or max_len, or a larger time budget")
display(pd.DataFrame(history["epochs"]).set_index("epoch"))
print(f"trained in {time.perf_counter() - t0:.0f} s; {describe_kept(history, parts.heldout_name)}")

# %% [markdown]
# ## Hand-off checks
# Held-out predictions that say nothing (ROC AUC at most 0.5, or barely any spread) stop the run here: no
# submission is better than a silently wrong one (`kitlib/outputs/collapse.py`). Then the saved folder predicts
# its first held-out rows again, through the same `predict` as the test set, and must give what the trained
# model gave within the precision's tolerance: else the folder is not the model. The same call as the training
# notebook's (`run_handoff`, `kitlib/training/handoff.py`): refused, the folder is marked refused; every check
# passed, it is marked ready (`handoff_passed.json`).

# %%
checks = run_handoff(job, history, parts.heldout_name, random_on_purpose=model == TINY, predict_job=infer_job, rt=rt,
                     start_method=start_method)

# %% [markdown]
# ## Predict the test set
# The trained folder (with LoRA: its adapters on the base, merged once loaded), one model copy per device.

# %%
t1 = time.perf_counter()
result = predict(infer_job, rt, start_method)
print(f"wrote {result.output}: {result.num_rows:,} rows in {time.perf_counter() - t1:.0f} s")
for note in result.notes:
    print(f"{'!' * 80}\n{note}\n{'!' * 80}" if note.startswith("WARNING") else f"note: {note}")

# %% [markdown]
# ## Results
# The time each part took against the deadline, and the predictions.

# %%
submission = pd.read_csv(infer_job.output_csv, dtype={"id": str}, keep_default_na=False)
assert len(submission) == parts.counts["test_rows"], (len(submission), parts.counts["test_rows"])
print(submission[infer_job.prediction_column].describe().to_string())
if deadline is not None:
    print(f"finished with {left() / 60:.1f} min to spare of {budget_s / 60:.1f}"
          + (f" (estimated: training {fit.train_s / 60:.1f} min, predicting {fit.predict_s / 60:.1f} min)" if fit else ""))
