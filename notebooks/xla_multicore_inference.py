# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Multicore inference: every device predicts a shard, the shards merge into one submission
#
# This notebook spreads the Jigsaw Multilingual test set over every device on the machine,
# one `_mp_fn` per device (8 TPU v5e cores, 2 T4 GPUs, or N PJRT CPU devices), and merges
# the per-device prediction shards into a Kaggle submission with exactly one row per test row.
#
# * Each replica takes its rows with `DistributedSampler(shuffle=False, drop_last=False)`,
#   runs fixed-shape `[batch_size, max_len]` batches (no XLA recompilation at the tail), and
#   writes its shard atomically.
# * The merger drops the sampler's padding duplicates, checks that every row and every id is
#   there, and writes the rows in `sample_submission.csv` order. It refuses, writing nothing,
#   when something is wrong.
#
# The replica function lives in `kitlib.infer_template`, not in this notebook, so the
# `spawn` start method (Colab) can import it.

# %% tags=["parameters"]
model = "auto"  # "auto": the training notebook's checkpoint if present, else "tiny-random"; or a folder, or a hub name such as "xlm-roberta-base"
data_dir = ""  # "": the competition data when mounted on Kaggle, else the bundled sample data/jigsaw-sample
test_csv = ""  # "": <data_dir>/test.csv
sample_submission = ""  # "": <data_dir>/sample_submission.csv
output_csv = ""  # "": <working dir>/submission.csv (/kaggle/working on Kaggle, the repository locally)
batch_size = 32  # rows per device per step; the global batch is batch_size x devices
max_len = 128  # tokens per row (longer comments are truncated)
length_buckets = 4  # pad each batch to one of at most this many lengths (rows sorted by length per device); 1: always max_len
num_devices = 0  # 0: every device found (TPU cores, GPUs, or one PJRT CPU device per core)
accelerator = "auto"  # "auto", "tpu", "cuda" or "cpu"
start_method = "fork"  # "fork" in Kaggle notebooks; "spawn" on Colab
cpu_processes = False  # CPU only: one process per PJRT CPU device instead of one thread each (scales better on CPU)
cache_dir = ""  # "": <working dir>/.cache (the offline tiny model is built there once)

# %% [markdown]
# ## Setup
# `kitlib` comes from the repository (locally), or is written next to the notebook by the
# push step (on Kaggle). The runtime detector looks for the accelerator without touching it:
# touching the XLA device here would make the launch below fail.

# %%
import sys
import time
from pathlib import Path

if not Path("kitlib").is_dir() and Path("../kitlib").is_dir():
    sys.path.insert(0, str(Path("..").resolve()))

import pandas as pd

from kitlib import paths
from kitlib.data import read_csv_checked
from kitlib.infer_template import InferConfig, _mp_fn, length_buckets as choose_lengths
from kitlib.merge import merge_shards
from kitlib.model import resolve_checkpoint
from kitlib.runtime import detect_runtime, launch
from kitlib.shards import clear_shards

root = paths.project_root()
work = paths.working_dir(root)
data = Path(data_dir) if data_dir else paths.default_data_dir(root)
test_path = Path(test_csv) if test_csv else data / "test.csv"
sample_path = Path(sample_submission) if sample_submission else data / "sample_submission.csv"
out_path = Path(output_csv) if output_csv else work / "submission.csv"
shard_dir = work / "shards" / "xla_multicore_inference"

rt = detect_runtime(num_devices or None, prefer=accelerator, cpu_processes=cpu_processes)
print(rt.describe())
print(f"test: {test_path}\nsample submission: {sample_path}\noutput: {out_path}")

# %% [markdown]
# ## Data
# Ids are read as the exact strings of the file. Bad rows (a blank or repeated id, a missing
# column) stop here with the file, row and field named.

# %%
test = read_csv_checked(test_path)
print(f"{len(test):,} rows; {len(test) / rt.num_devices:,.1f} per device before padding")
if "lang" in pd.read_csv(test_path, nrows=0).columns:
    langs = pd.read_csv(test_path, dtype=str, keep_default_na=False, usecols=["id", "lang"])
    display(langs["lang"].value_counts().rename("rows").to_frame().T)

# %% [markdown]
# ## Model
# Resolved once, here, to a local folder; every replica then loads that folder.

# %%
checkpoint = resolve_checkpoint(
    model,
    data_dir=data,
    cache_dir=Path(cache_dir) if cache_dir else work / ".cache",
    trained_dir=work / paths.TRAINED_CHECKPOINT,
)
print(f"model {model!r} -> {checkpoint}")

# %% [markdown]
# ## Run: one `_mp_fn` per device
# The padded lengths are chosen once, here, from the token lengths of the whole test set, so
# every device compiles the same few shapes (one XLA graph each). Shards of an earlier run are
# cleared first; each shard also carries this run's id, so the merger refuses stragglers.

# %%
buckets = choose_lengths(checkpoint, test_path, max_len, length_buckets)
print(f"padded lengths: {buckets or (max_len,)}")
cfg = InferConfig(
    checkpoint=str(checkpoint),
    test_csv=str(test_path),
    shard_dir=str(shard_dir),
    batch_size=batch_size,
    max_len=max_len,
    length_buckets=buckets,
    xla=rt.xla,
    processes=rt.processes or not rt.xla,
    num_devices=rt.num_devices,
)
clear_shards(shard_dir)
t0 = time.perf_counter()
launch(_mp_fn, (cfg,), rt, start_method)
print(f"{rt.num_devices} replica(s) finished in {time.perf_counter() - t0:.1f} s")

# %% [markdown]
# ## Merge the shards into the submission

# %%
result = merge_shards([shard_dir], out_path, sample_submission=sample_path)
print(
    f"wrote {result.output}: {result.num_rows:,} rows from {result.num_shards} shard(s); "
    f"{result.num_padding_duplicates} padding duplicate(s) dropped"
)

# %% [markdown]
# ## Results
# What each replica did (rows, batches, XLA compilations), and the predictions by language.

# %%
import pyarrow.parquet as pq

from kitlib.shards import read_shard_info

per_rank = []
for f in sorted(shard_dir.glob("shard-*.parquet")):
    info = read_shard_info(pq.read_schema(f))
    per_rank.append({"rank": info.rank, "rows": info.num_samples, **info.stats})
display(pd.DataFrame(per_rank).set_index("rank"))

submission = pd.read_csv(out_path, dtype={"id": str}, keep_default_na=False)
assert len(submission) == len(test), (len(submission), len(test))
assert submission["toxic"].between(0, 1).all()
print(submission["toxic"].describe().to_string())

# %%
import matplotlib.pyplot as plt

if "lang" in pd.read_csv(test_path, nrows=0).columns:
    by_lang = submission.merge(langs, on="id")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for lang, group in by_lang.groupby("lang"):
        ax.hist(group["toxic"], bins=30, histtype="step", label=f"{lang} ({len(group)})")
    ax.set(xlabel="predicted P(toxic)", ylabel="rows", title="Predictions by language")
    ax.legend()
    plt.show()
