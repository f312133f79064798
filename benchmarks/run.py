"""Benchmarks: merge speed, XLA compilations, padding waste, the kit against plain eager torch, memory.

    .venv/bin/python benchmarks/run.py            # all five (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py merge      # one of: merge compile padding eager memory
    .venv/bin/python benchmarks/run.py eager --eager-models multilingual-e5-small   # the e5 lines only

Every figure is a ratio of two things measured in the same run on the same machine, and the
machine is printed first. Each measured job runs in a fresh subprocess, so peak memory
(``ru_maxrss``) and XLA compile counters belong to that job alone. Nothing here asserts a time:
correctness of the same code paths is tested in tests/.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "jigsaw-sample"
sys.path.insert(0, str(ROOT))

MERGE_ROWS, MERGE_WORLD = 4_000_000 - 5, 8  # DistributedSampler pads 3,999,995 rows to 4,000,000
COMPILE_BATCH, COMPILE_MAX_LEN = 16, 256


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import torch
    import torch_xla

    return (f"{cpu}; {os.cpu_count()} cores; {mem:.0f} GiB; Python {platform.python_version()}; "
            f"torch {torch.__version__}; torch_xla {torch_xla.__version__}")


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM). Unlike ru_maxrss it is not inherited from
    the parent across fork + exec, so each worker reports its own peak."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker(job: str, args: list[str]) -> None:
    """Run one job and print one JSON line: {"seconds": ..., "peak_mib": ..., ...}."""
    out: dict = {}
    if job.startswith("merge-"):
        shard_dir, dest = Path(args[0]), Path(args[1])
        files = sorted(shard_dir.glob("shard-*.parquet"))
        if job == "merge-kit":
            from kitlib.outputs.merge import merge_shards

            def op():
                merge_shards([shard_dir], dest)
        elif job == "merge-seed":
            import pandas as pd

            def op():
                df = pd.concat([pd.read_parquet(f, columns=["id", "toxic"]) for f in files])
                df.groupby("id").mean().to_csv(dest)
        else:  # floor: read the same shards (in parallel, as the kit does) and write the output, nothing else
            from concurrent.futures import ThreadPoolExecutor

            import pyarrow as pa
            import pyarrow.csv as pacsv
            import pyarrow.parquet as pq

            def op():
                with ThreadPoolExecutor(os.cpu_count()) as pool:
                    table = pa.concat_tables(pool.map(lambda f: pq.read_table(f, columns=["id", "toxic"]), files))
                pacsv.write_csv(table, dest, pacsv.WriteOptions(quoting_style="none"))  # the kit's (fastest) style
        times = []
        for _ in range(3):  # best of 3 in one process: steady state, not first-touch costs
            t = time.perf_counter()
            op()
            times.append(time.perf_counter() - t)
        out["seconds"] = min(times)
    elif job in ("compile-kit", "compile-seed"):
        out.update(_compile_job(job, int(args[0])))
    out["peak_mib"] = peak_rss_mib()
    print(json.dumps(out))


def run_worker(job: str, *args, env: dict | None = None) -> dict:
    r = subprocess.run([sys.executable, __file__, "--worker", job, *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, cwd=ROOT)
    if r.returncode:
        raise RuntimeError(f"{job} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def tiny_checkpoint() -> Path:
    from kitlib.models.model import resolve_checkpoint

    return resolve_checkpoint("tiny-random", data_dir=SAMPLE, cache_dir=ROOT / ".cache")


# ---------------------------------------------------------------- 1. merge
def bench_merge(tmp: Path) -> None:
    import numpy as np
    from torch.utils.data import DistributedSampler

    from kitlib.outputs.shards import write_shard

    print(f"\n## 1. Merge: {MERGE_WORLD} shards, {MERGE_ROWS + 5:,} rows with padding duplicates, string ids")
    rng = np.random.default_rng(0)
    ids = np.char.add("id", rng.permutation(10 * MERGE_ROWS)[:MERGE_ROWS].astype(str)).astype(object)
    preds = rng.random(MERGE_ROWS, dtype=np.float32)
    shard_dir = tmp / "merge-shards"
    for rank in range(MERGE_WORLD):
        rows = np.fromiter(DistributedSampler(range(MERGE_ROWS), num_replicas=MERGE_WORLD, rank=rank, shuffle=False), np.int64)
        write_shard(shard_dir, rank=rank, world_size=MERGE_WORLD, num_rows=MERGE_ROWS, rows=rows, ids=ids[rows],
                    predictions={"toxic": preds[rows]}, run_id="bench")
    res = {}
    for job in ("merge-floor", "merge-kit", "merge-seed"):
        res[job] = run_worker(job, shard_dir, tmp / f"{job}.csv")
        print(f"  {job[6:]:5s}: {res[job]['seconds']:6.2f} s (best of 3), peak RSS {res[job]['peak_mib']:,.0f} MiB")
    kit, seed, floor = res["merge-kit"], res["merge-seed"], res["merge-floor"]
    print(f"  kit vs seed : {seed['seconds'] / kit['seconds']:.1f}x faster   (target >= 5x)")
    print(f"  kit / floor : {kit['seconds'] / floor['seconds']:.2f}x          (target <= 1.5x)")
    print(f"  seed / floor: {seed['seconds'] / floor['seconds']:.1f}x")
    print(f"  peak memory kit / seed: {kit['peak_mib'] / seed['peak_mib']:.2f}   (target <= 1.0)")


# ---------------------------------------------------------------- 2. compilations
def _compile_job(job: str, limit: int) -> dict:
    import numpy as np
    import torch

    from kitlib import compat
    from kitlib.data import read_csv_checked
    from kitlib.models.model import load_classifier, probabilities

    ck = str(tiny_checkpoint())
    t = time.perf_counter()
    if job == "compile-kit":  # the kit's own path: predict() on one PJRT CPU device in this process's child
        from kitlib.infer import InferJob, predict, replica_stats
        from kitlib.run.runtime import detect_runtime

        tmp = Path(tempfile.mkdtemp())
        read_csv_checked(SAMPLE / "test.csv").iloc[:limit].rename(columns={"text": "content"}).to_csv(tmp / "t.csv", index=False)
        predict(InferJob(checkpoint=ck, test_csv=str(tmp / "t.csv"), shard_dir=str(tmp / "shards"), batch_size=COMPILE_BATCH,
                         max_len=COMPILE_MAX_LEN, num_buckets=4, precision="fp32"), detect_runtime(1, "xla-cpu-processes"))
        stats = replica_stats(tmp / "shards")[0]
        return {"compiles": stats["xla_compiles"], "seconds": time.perf_counter() - t, "rows": limit, "shapes": 4}
    os.environ["PJRT_DEVICE"] = "CPU"  # the seed pattern: dynamic padding per batch, a ragged last batch
    texts = read_csv_checked(SAMPLE / "test.csv")["text"].tolist()[:limit]
    device = compat.xla_device()
    tok, model = load_classifier(ck)
    model.to(device)
    shapes = set()
    with torch.no_grad():
        for s in range(0, len(texts), COMPILE_BATCH):
            enc = tok(texts[s : s + COMPILE_BATCH], padding=True, truncation=True, max_length=COMPILE_MAX_LEN, return_tensors="pt")
            shapes.add(tuple(enc["input_ids"].shape))
            probabilities(model(**{k: v.to(device) for k, v in enc.items()}).logits).cpu()
    del np
    return {"compiles": compat.xla_compile_count(), "seconds": time.perf_counter() - t, "rows": len(texts), "shapes": len(shapes)}


def bench_compile(tmp: Path) -> None:
    print(f"\n## 2. XLA compilations during inference on the real test sample (PJRT CPU, batch {COMPILE_BATCH}, max_len {COMPILE_MAX_LEN})")
    tiny_checkpoint()
    for limit in (250, 1000):
        kit = run_worker("compile-kit", limit)
        seed = run_worker("compile-seed", limit)
        print(f"  {limit:5d} rows: kit {kit['compiles']:3d} compiles for {kit['shapes']} configured shape(s) "
              f"({kit['seconds']:.1f} s); seed {seed['compiles']:3d} compiles for {seed['shapes']} batch shapes "
              f"({seed['seconds']:.1f} s); seed/kit = {seed['compiles'] / kit['compiles']:.1f}x")


# ---------------------------------------------------------------- 3. padding waste
def bench_padding(tmp: Path) -> None:
    import numpy as np
    from torch.utils.data import DistributedSampler
    from transformers import AutoTokenizer

    from kitlib.data import choose_bucket_lengths, padding_waste, plan_batches, read_csv_checked, token_lengths

    print("\n## 3. Padding waste on the real test sample (share of computed tokens that are padding; batch 32)")
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint())
    texts = read_csv_checked(SAMPLE / "test.csv")["text"].tolist()
    for max_len in (128, 256):
        lengths = token_lengths(tok, texts, max_len)
        buckets = choose_bucket_lengths(lengths, max_len, 4)
        for world in (1, 2, 8):
            single, bucketed = [], []
            for rank in range(world):
                rows = np.fromiter(DistributedSampler(range(len(texts)), num_replicas=world, rank=rank, shuffle=False), np.int64)
                single += plan_batches(rows, 32, max_len)
                bucketed += plan_batches(rows, 32, max_len, lengths, buckets)
            ws, wb = padding_waste(single, lengths), padding_waste(bucketed, lengths)
            print(f"  max_len {max_len}, {world} replica(s): single length {ws:5.1%} -> {len(buckets)} buckets {buckets}: "
                  f"{wb:5.1%} (target <= 25%); computes {(1 - ws) / (1 - wb):.2f}x the tokens")


# ---------------------------------------------------------------- 4. the kit against plain eager torch
# What a competitor writes without the kit. For a mean-pooled checkpoint (multilingual-e5-small:
# config.json "kitlib_pooling": "mean", no pooler) it pools the last hidden states over the real
# tokens and applies the saved head by hand, and it puts the model's text prefix ("query: ") first.
PLAIN_EAGER = """\
import json, sys, time
t0 = time.perf_counter()
import pandas as pd, torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
checkpoint, test_csv, out_csv, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
config = json.load(open(checkpoint + "/config.json"))
test = pd.read_csv(test_csv, dtype=str, keep_default_na=False)
tok = AutoTokenizer.from_pretrained(checkpoint)
if config.get("kitlib_pooling") == "mean":
    from safetensors import safe_open
    body = AutoModel.from_pretrained(checkpoint, add_pooling_layer=False).eval()
    with safe_open(checkpoint + "/model.safetensors", "pt") as f:
        w, b = f.get_tensor("classifier.weight"), f.get_tensor("classifier.bias")
    def logits(enc):
        h = body(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
        return ((h * m).sum(1) / m.sum(1)) @ w.T + b
else:
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    def logits(enc):
        return model(**enc).logits
texts, probs = [config.get("kitlib_text_prefix", "") + t for t in test["content"].tolist()], []
t1 = time.perf_counter()
with torch.inference_mode():
    for s in range(0, len(texts), 32):  # dynamic padding per batch, in input order
        enc = tok(texts[s:s + 32], padding=True, truncation=True, max_length=128, return_tensors="pt")
        probs.append(torch.sigmoid(logits(enc)[:, 0]))
pd.DataFrame({"id": test["id"], "toxic": torch.cat(probs).numpy()}).to_csv(out_csv, index=False)
print("LOOP", time.perf_counter() - t1)
"""

KIT = """\
import sys, time
from kitlib.infer import InferJob, predict, replica_stats
from kitlib.run.runtime import detect_runtime
checkpoint, test_csv, out_dir, replicas, precision = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
rt = detect_runtime(replicas or None)
predict(InferJob(checkpoint=checkpoint, test_csv=test_csv, shard_dir=out_dir + "/shards", output_csv=out_dir + "/sub.csv",
                 batch_size=32, max_len=128, precision=precision, collapsed="warn"), rt)  # timings; the random model on purpose
stats = replica_stats(out_dir + "/shards")
print("LOOP", max(s["seconds"] for s in stats))
print("RUNTIME", f"{rt.mode} x{rt.num_replicas}, {stats[0]['precision']}")
"""

E5 = "multilingual-e5-small"
EAGER_MODELS = ("tiny-random", "all-minilm-l6-v2", E5)  # --eager-models chooses among them


def _classifier(name: str, tmp: Path) -> Path | None:
    """A checkpoint with a fixed classifier head, so the kit and the plain script load the same weights."""
    import torch

    from kitlib.models.model import load_classifier, resolve_checkpoint
    from kitlib.models.packaged import PRETRAINED

    out = ROOT / ".cache" / f"bench-{name}-classifier"
    if (out / "config.json").is_file():
        return out
    if name != "tiny-random" and name not in PRETRAINED:
        return None
    try:
        src = resolve_checkpoint(name, data_dir=SAMPLE, cache_dir=ROOT / ".cache")
    except ModuleNotFoundError as e:
        print(f"  skipped {name}: {e}")
        return None
    torch.manual_seed(0)
    tok, model = load_classifier(src, head_for_training=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _timed(args: list[str]) -> tuple[float, float, float, str]:
    """Run a script in a fresh process: (wall s, CPU s of the process and its children, its LOOP s, its RUNTIME line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode:
        raise RuntimeError(f"{args[:2]} failed:\n{r.stderr[-3000:]}")
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if line.startswith(("LOOP", "RUNTIME")))
    return wall, cpu, float(lines["LOOP"]), lines.get("RUNTIME", "")


def bench_eager(tmp: Path, models: tuple[str, ...] = EAGER_MODELS) -> None:
    import numpy as np
    import pandas as pd

    from kitlib.run.hardware import cpu_cores

    print("\n## 4. The kit's whole inference job against a plain eager script (whole processes, same rows and model)")
    print("  plain: AutoModelForSequenceClassification (or AutoModel + mean pooling + the saved head, for a mean-pooled")
    print(f"  checkpoint), torch.inference_mode, batch 32, dynamic padding per batch in input order, {cpu_cores()} threads.")
    print("  kit: detect_runtime() defaults + predict() (tokenize once, rows sorted by length, shard, merge).")
    print("  Target: kit <= 0.8x plain, whole job, on multilingual-e5-small, 1,000 rows. cpu = CPU seconds of the")
    print("  process (all threads): less disturbed than wall time when other jobs share the machine.")
    (tmp / "plain.py").write_text(PLAIN_EAGER)
    (tmp / "kit.py").write_text(KIT)
    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    big = pd.concat([test.assign(id=test["id"] + f"-{k}") for k in range(4)])
    big.to_csv(tmp / "test4k.csv", index=False)
    cases = [("tiny-random", SAMPLE / "test.csv", 1000, ("fp32",)), ("tiny-random", tmp / "test4k.csv", 4000, ("fp32",)),
             ("all-minilm-l6-v2", SAMPLE / "test.csv", 1000, ("fp32",)), (E5, SAMPLE / "test.csv", 1000, ("fp32",))]
    for name, csv, rows, precisions in cases:
        ck = _classifier(name, tmp) if name in models else None
        if ck is None:
            continue
        plain_wall, plain_cpu, plain_loop, _ = _timed([str(tmp / "plain.py"), str(ck), str(csv), str(tmp / "plain.csv"),
                                                       str(cpu_cores())])
        a = pd.read_csv(tmp / "plain.csv", dtype={"id": str}, keep_default_na=False)
        for precision in precisions:
            out = tmp / f"kit-{name}-{rows}-{precision}"
            kit_wall, kit_cpu, kit_loop, described = _timed([str(tmp / "kit.py"), str(ck), str(csv), str(out), "0", precision])
            b = pd.read_csv(out / "sub.csv", dtype={"id": str}, keep_default_na=False)
            gap = float(np.abs(a["toxic"].to_numpy() - b["toxic"].to_numpy()).max())
            print(f"  {name}, {rows} rows, kit {precision}: plain {plain_wall:5.1f} s (cpu {plain_cpu:5.1f} s, loop "
                  f"{plain_loop:5.1f} s), kit {kit_wall:5.1f} s (cpu {kit_cpu:5.1f} s, loop {kit_loop:5.1f} s): "
                  f"kit/plain = {kit_wall / plain_wall:.2f}x whole job (cpu {kit_cpu / plain_cpu:.2f}x), "
                  f"{kit_loop / plain_loop:.2f}x loop; predictions differ by <= {gap:.1e}; {described}")
    if "tiny-random" not in models:
        return
    ck = _classifier("tiny-random", tmp)
    one = _timed([str(tmp / "kit.py"), str(ck), str(tmp / "test4k.csv"), str(tmp / "k1"), "1", "fp32"])
    two = _timed([str(tmp / "kit.py"), str(ck), str(tmp / "test4k.csv"), str(tmp / "k2"), "2", "fp32"])
    print(f"  replicas on {cpu_cores()} cores, tiny model, 4,000 rows: 1 replica {one[0]:.1f} s, 2 replicas {two[0]:.1f} s "
          f"({one[0] / two[0]:.2f}x; no target: replicas on the same cores only share them)")


# ---------------------------------------------------------------- 5. memory in the notebook's process
MEMORY_JOB = """\
import json, sys, time
def vm(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) / 1024
import kitlib, transformers
from kitlib import infer
from kitlib.infer import InferJob, predict
from kitlib.outputs.merge import merge_shards
from kitlib.run.runtime import detect_runtime
part, checkpoint, test_csv, work = sys.argv[1:5]
transformers.AutoTokenizer.from_pretrained(checkpoint)  # the tokenizer's own memory is not the test set's
start, t = vm("VmRSS:"), time.perf_counter()
if part == "parent":  # predict's work in the notebook's process before the replicas: read, check, tokenize, plan
    infer.launch = lambda fn, plan, rt, start_method="fork", **kw: None
    predict(InferJob(checkpoint=checkpoint, test_csv=test_csv, shard_dir=work + "/run", batch_size=32, max_len=128),
            detect_runtime(1, "cpu"))
else:  # and after them: predict's merge without a sample submission (ordered and checked by the test file)
    merge_shards([work + "/shards"], work + "/sub.csv", test=test_csv, collapsed="warn")  # the random tiny model on purpose
print(json.dumps({"start_mib": start, "peak_mib": vm("VmHWM:"), "seconds": time.perf_counter() - t,
                  "kitlib": kitlib.__file__}))
"""


NOTEBOOK_POLL_S = 0.05  # how often the notebook's process tree is sampled


def process_tree_peak(cmd: list[str], *, env: dict, cwd: Path, poll_s: float = NOTEBOOK_POLL_S) -> dict:
    """Run ``cmd`` (papermill) and measure, from outside, the peak memory of the processes below it.

    Every ``poll_s`` seconds the resident memory (RSS) of every descendant of ``cmd``'s process
    (the notebook's kernel and whatever it starts: replica processes, a tokenizer's workers) is
    summed; papermill's own process (which holds the notebook's JSON, not the run) is left out.
    The kernel's own high-water mark (``VmHWM``, exact, not sampled) is read at each poll too.

    Returns:
        ``{"rc", "peak_mib", "kernel_hwm_mib", "seconds", "stderr"}``: ``peak_mib`` is the larger of
        the sampled tree peak and the kernel's last ``VmHWM`` (a spike between two samples of a
        one-process tree is not missed).
    """
    import psutil

    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        me = psutil.Process(proc.pid)
        peak = kernel_hwm = 0.0
        while proc.poll() is None:
            total = 0
            try:
                tree = me.children(recursive=True)
            except psutil.Error:
                tree = []
            for child in tree:
                try:
                    total += child.memory_info().rss
                    if "ipykernel" in " ".join(child.cmdline()):
                        kernel_hwm = max(kernel_hwm, _vm_hwm_mib(child.pid))
                except (psutil.Error, OSError):
                    continue
            peak = max(peak, total / 2**20)
            time.sleep(poll_s)
        err.seek(0)
        stderr = err.read()
    return {"rc": proc.returncode, "peak_mib": max(peak, kernel_hwm), "kernel_hwm_mib": kernel_hwm,
            "seconds": time.perf_counter() - t, "stderr": stderr}


def _vm_hwm_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def notebook_peak(kit: Path, work: Path) -> dict:
    """The whole inference notebook of checkout ``kit`` on ``work/test.csv`` and
    ``work/sample_submission.csv`` (papermill; ``model="tiny-random"``, built once from the bundled
    sample into this checkout's ``.cache``, as :func:`tiny_checkpoint`; max_len 128), measured as a
    process: :func:`process_tree_peak`."""
    cmd = [sys.executable, "-m", "papermill", "--cwd", str(kit / "notebooks"), "-k", "python3",
           str(kit / "notebooks" / "xla_multicore_inference.ipynb"), str(work / "notebook.ipynb"),
           "-p", "model", "tiny-random", "-p", "data_dir", str(SAMPLE), "-p", "max_len", "128",
           "-p", "test_csv", str(work / "test.csv"), "-p", "sample_submission", str(work / "sample_submission.csv"),
           "-p", "output_csv", str(work / "notebook-submission.csv"), "-p", "shard_dir", str(work / "notebook-shards"),
           "-p", "cache_dir", str(ROOT / ".cache")]
    return process_tree_peak(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(kit)}, cwd=work)


MEMORY_ROWS = (1000, 8000, 32000)
NOTEBOOK_GROWTH_MB = 300  # the target: the whole notebook grows by at most this from 1k to 32k rows (issue 27.12)


def bench_memory(tmp: Path, rows_list: tuple[int, ...] = MEMORY_ROWS) -> None:
    """Peak memory (VmHWM) of the notebook's process at 1k, 8k and 32k rows, against the packed ids.

    Rows are the sample's texts repeated (ids suffixed). Measured: predict's own work before the
    replicas start (reading, checking and tokenizing the test set, choosing the bucket lengths;
    the replicas are not started) and its merge afterwards (8 shards written by
    :func:`kitlib.outputs.shards.write_shard`). Each job runs in a fresh process that imports kitlib from
    ``$PYTHONPATH`` (default: this checkout), so ``PYTHONPATH=/other/checkout`` measures another
    version with the same script and inputs.

    Then the whole inference notebook (:func:`notebook_peak`: papermill, every cell, the replica
    running in the kernel's process on a CPU with fewer than 8 cores), measured from outside as
    the peak RSS of the kernel's process tree, against :data:`NOTEBOOK_GROWTH_MB`.
    """
    import numpy as np
    import pandas as pd
    from transformers import AutoTokenizer

    from kitlib.data import token_lengths
    from kitlib.outputs.shards import write_shard

    ck = tiny_checkpoint()
    kit = os.environ.get("PYTHONPATH") or str(ROOT)
    print("\n## 5. Memory in the notebook's process (VmHWM), tiny model's tokenizer, max_len 128, the sample's texts repeated")
    (tmp / "memory.py").write_text(MEMORY_JOB)
    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    per_copy = int(token_lengths(AutoTokenizer.from_pretrained(ck), test["content"].tolist(), 128).sum())
    res = {}
    for rows in rows_list:
        big = pd.concat([test.assign(id=test["id"] + f"-{k}") for k in range(-(-rows // len(test)))]).iloc[:rows]
        work = tmp / f"memory-{rows}"
        work.mkdir()
        big.to_csv(work / "test.csv", index=False)
        big[["id"]].assign(toxic=0.5).to_csv(work / "sample_submission.csv", index=False)
        for rank in range(8):
            r = np.arange(rank, rows, 8)
            write_shard(work / "shards", rank=rank, world_size=8, num_rows=rows, rows=r, ids=big["id"].to_numpy(object)[r],
                        predictions={"toxic": (r % 97 / 97).astype(np.float32)}, run_id="bench")
        packed = 4 * per_copy * rows / len(test) / 2**20  # int32 ids, MiB
        for part in ("parent", "merge"):
            out = subprocess.run([sys.executable, str(tmp / "memory.py"), part, str(ck), str(work / "test.csv"), str(work)],
                                 capture_output=True, text=True, cwd=tmp, env={**os.environ, "PYTHONPATH": kit, "HF_HUB_OFFLINE": "1"})
            if out.returncode:  # an older kitlib may refuse a file (its merge read CSVs over 1 MB by other rules)
                res[part, rows] = {"failed": out.stderr.strip().splitlines()[-1][:150]}
                continue
            res[part, rows] = {**json.loads(out.stdout.strip().splitlines()[-1]), "packed": packed}

        def show(r: dict, what: str) -> str:
            if "failed" in r:
                return f"{what} FAILED ({r['failed']})"
            return f"{what} {r['peak_mib']:6,.0f} MiB peak ({r['peak_mib'] - r['start_mib']:+6,.0f} over its start, {r['seconds']:4.1f} s)"

        print(f"  {rows:6,d} rows ({(work / 'test.csv').stat().st_size / 2**20:5.1f} MiB CSV, packed ids {packed:5.1f} MiB): "
              f"{show(res['parent', rows], 'before the replicas')}; {show(res['merge', rows], 'merge')}", flush=True)
        nb = res["notebook", rows] = notebook_peak(Path(kit), work)
        if nb["rc"]:
            nb["failed"] = (nb["stderr"].strip().splitlines() or ["?"])[-1][:150]
        print(f"         the whole notebook (papermill, the kernel's process tree from outside): "
              + (f"FAILED ({nb['failed']})" if nb["rc"] else
                 f"{nb['peak_mib']:6,.0f} MiB peak ({nb['peak_mib'] * 2**20 / 1e6:,.0f} MB; kernel VmHWM "
                 f"{nb['kernel_hwm_mib']:,.0f} MiB), {nb['seconds']:.0f} s"), flush=True)
    lo, hi = min(rows_list), max(rows_list)
    if lo < hi and not res["notebook", lo]["rc"] and not res["notebook", hi]["rc"]:
        grow = (res["notebook", hi]["peak_mib"] - res["notebook", lo]["peak_mib"]) * 2**20 / 1e6
        print(f"  notebook {lo:,d} -> {hi:,d} rows: peak {grow:+,.0f} MB (target <= {NOTEBOOK_GROWTH_MB} MB: "
              f"{'met' if grow <= NOTEBOOK_GROWTH_MB else 'NOT met'})")
    for lo, hi in ((1000, 32000), (8000, 32000)):
        for part in ("parent", "merge"):
            if (part, hi) not in res or (part, lo) not in res or "failed" in res[part, hi] or "failed" in res[part, lo]:
                continue
            dpacked = res[part, hi]["packed"] - res[part, lo]["packed"]
            grow = res[part, hi]["peak_mib"] - res[part, lo]["peak_mib"]
            print(f"  {part:6s} {lo:6,d} -> {hi:,} rows: peak {grow:+7,.1f} MiB, packed ids {dpacked:+5.1f} MiB: "
                  f"{grow / dpacked:5.2f}x (target <= 1.0: no faster than the packed ids)")
    print(f"  kitlib measured: {Path(res['parent', 1000]['kitlib']).parent if 'kitlib' in res['parent', 1000] else kit}")


PARTS = {"merge": bench_merge, "compile": bench_compile, "padding": bench_padding, "eager": bench_eager,
         "memory": bench_memory}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", help=f"any of {', '.join(PARTS)} (default: all)")
    ap.add_argument("--eager-models", default=",".join(EAGER_MODELS),
                    help=f"the eager part's models, comma-separated (default: {','.join(EAGER_MODELS)})")
    ap.add_argument("--memory-rows", default=",".join(map(str, MEMORY_ROWS)),
                    help=f"the memory part's test-set sizes, comma-separated (default: {','.join(map(str, MEMORY_ROWS))})")
    args = ap.parse_args()
    parts = args.parts or list(PARTS)
    models = tuple(m for m in args.eager_models.split(",") if m)
    if set(models) - set(EAGER_MODELS):
        ap.error(f"unknown --eager-models {sorted(set(models) - set(EAGER_MODELS))}; choose from {', '.join(EAGER_MODELS)}")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    print(f"# kit benchmarks, {time.strftime('%Y-%m-%d %H:%M')}\nmachine: {machine()}")
    with tempfile.TemporaryDirectory() as d:
        for p in parts:
            if p == "eager":
                PARTS[p](Path(d), models)
            elif p == "memory":
                PARTS[p](Path(d), tuple(int(r) for r in args.memory_rows.split(",")))
            else:
                PARTS[p](Path(d))


if __name__ == "__main__":
    main()
