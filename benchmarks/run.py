"""Benchmarks: merge speed, XLA compilations, padding waste, replica scaling.

    .venv/bin/python benchmarks/run.py            # all four (about 5 minutes on 2 cores)
    .venv/bin/python benchmarks/run.py merge      # one of: merge compile padding scaling

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
            from kitlib.merge import merge_shards

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
    from kitlib.model import resolve_checkpoint

    return resolve_checkpoint("tiny-random", data_dir=SAMPLE, cache_dir=ROOT / ".cache")


# ---------------------------------------------------------------- 1. merge
def bench_merge(tmp: Path) -> None:
    import numpy as np
    from torch.utils.data import DistributedSampler

    from kitlib.shards import write_shard

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
    os.environ["PJRT_DEVICE"] = "CPU"
    import numpy as np
    import torch

    from kitlib import compat
    from kitlib.data import read_csv_checked
    from kitlib.infer_template import InferConfig, length_buckets, predict_rows
    from kitlib.model import load_classifier, probabilities

    ck = str(tiny_checkpoint())
    texts = read_csv_checked(SAMPLE / "test.csv")["text"].tolist()[:limit]
    device = compat.xla_device()
    t = time.perf_counter()
    if job == "compile-kit":
        tok, model = load_classifier(ck, xla=True)
        model.to(device)
        tmp_csv = Path(tempfile.mkdtemp()) / "t.csv"
        read_csv_checked(SAMPLE / "test.csv").iloc[:limit].rename(columns={"text": "content"}).to_csv(tmp_csv, index=False)
        buckets = length_buckets(ck, tmp_csv, COMPILE_MAX_LEN, 4)
        cfg = InferConfig(checkpoint=ck, test_csv=str(tmp_csv), shard_dir="", batch_size=COMPILE_BATCH, max_len=COMPILE_MAX_LEN, length_buckets=buckets)
        predict_rows(model, tok, texts, np.arange(len(texts)), cfg, device, xla=True, progress=False)
        extra = {"shapes": len(buckets)}
    else:  # the seed pattern: dynamic padding per batch, a ragged last batch, the default attention
        tok, model = load_classifier(ck)
        model.to(device)
        shapes = set()
        with torch.no_grad():
            for s in range(0, len(texts), COMPILE_BATCH):
                enc = tok(texts[s : s + COMPILE_BATCH], padding=True, truncation=True, max_length=COMPILE_MAX_LEN, return_tensors="pt")
                shapes.add(tuple(enc["input_ids"].shape))
                probabilities(model(**{k: v.to(device) for k, v in enc.items()}).logits).cpu()
        extra = {"shapes": len(shapes)}
    return {"compiles": compat.xla_compile_count(), "seconds": time.perf_counter() - t, "rows": len(texts), **extra}


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

    from kitlib.data import choose_buckets, padding_waste, plan_batches, read_csv_checked, token_lengths

    print("\n## 3. Padding waste on the real test sample (share of computed tokens that are padding; batch 32)")
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint())
    texts = read_csv_checked(SAMPLE / "test.csv")["text"].tolist()
    for max_len in (128, 256):
        lengths = token_lengths(tok, texts, max_len)
        buckets = choose_buckets(lengths, max_len, 4)
        for world in (1, 2, 8):
            single, bucketed = [], []
            for rank in range(world):
                rows = np.fromiter(DistributedSampler(range(len(texts)), num_replicas=world, rank=rank, shuffle=False), np.int64)
                single += plan_batches(rows, 32, max_len)
                bucketed += plan_batches(rows, 32, max_len, lengths, buckets)
            ws, wb = padding_waste(single, lengths), padding_waste(bucketed, lengths)
            print(f"  max_len {max_len}, {world} replica(s): single length {ws:5.1%} -> {len(buckets)} buckets {buckets}: "
                  f"{wb:5.1%} (target <= 25%); computes {(1 - ws) / (1 - wb):.2f}x the tokens")


# ---------------------------------------------------------------- 4. scaling
def bench_scaling(tmp: Path) -> None:
    import pandas as pd
    import pyarrow.parquet as pq

    print("\n## 4. Replica scaling: the inference template at 1 and 2 PJRT CPU devices (threads of one process)")
    ck = tiny_checkpoint()
    test = pd.read_csv(SAMPLE / "test.csv", dtype=str, keep_default_na=False)
    big = pd.concat([test.assign(id=test["id"] + f"-{k}") for k in range(4)])  # 4,000 rows: compile time amortised
    big.to_csv(tmp / "test4k.csv", index=False)
    code = (
        "import sys, time, json; sys.path.insert(0, %r)\n"
        "from kitlib.runtime import detect_runtime, launch\n"
        "from kitlib.infer_template import InferConfig, _mp_fn\n"
        "if __name__ == '__main__':\n"
        "    rt = detect_runtime(int(sys.argv[1]), prefer='cpu', cpu_processes=sys.argv[3] == 'processes')\n"
        "    cfg = InferConfig(checkpoint=%r, test_csv=%r, shard_dir=sys.argv[2], batch_size=32, max_len=128,\n"
        "                      processes=rt.processes, num_devices=rt.num_devices)\n"
        "    t = time.perf_counter(); launch(_mp_fn, (cfg,), rt, 'fork')\n"
        "    print(json.dumps({'wall': time.perf_counter() - t}))\n"
    ) % (str(ROOT), str(ck), str(tmp / "test4k.csv"))
    (tmp / "scale.py").write_text(code)
    from kitlib.shards import read_shard_info

    res = {}
    one_core = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}  # each device computes on one core
    for n, mode, env in ((1, "threads", {}), (2, "threads", {}), (2, "processes", {}),
                         (1, "processes/1 core", one_core), (2, "processes/1 core", one_core)):
        out = tmp / f"s{n}{mode.replace('/', '-').replace(' ', '')}"
        r = subprocess.run([sys.executable, str(tmp / "scale.py"), str(n), str(out), mode.split("/")[0]],
                           capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
        if r.returncode:
            raise RuntimeError(r.stderr[-3000:])
        wall = json.loads(r.stdout.strip().splitlines()[-1])["wall"]
        loop = max(read_shard_info(pq.read_schema(p)).stats["seconds"] for p in out.glob("*.parquet"))
        res[n, mode] = (len(big) / loop, len(big) / wall)
        print(f"  {n} device(s), {mode:16s}: {res[n, mode][0]:6.1f} rows/s in the prediction loop, "
              f"{res[n, mode][1]:6.1f} rows/s for the whole launch")
    for two_mode, one_mode in (("threads", "threads"), ("processes", "threads"), ("processes/1 core", "processes/1 core")):
        one, two = res[1, one_mode], res[2, two_mode]
        print(f"  2 devices ({two_mode}) vs 1 ({one_mode}): {two[0] / one[0]:.2f}x (prediction loop), "
              f"{two[1] / one[1]:.2f}x (whole launch); target >= 1.6x")


PARTS = {"merge": bench_merge, "compile": bench_compile, "padding": bench_padding, "scaling": bench_scaling}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", help=f"any of {', '.join(PARTS)} (default: all)")
    parts = ap.parse_args().parts or list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    print(f"# kit benchmarks, {time.strftime('%Y-%m-%d %H:%M')}\nmachine: {machine()}")
    with tempfile.TemporaryDirectory() as d:
        for p in parts:
            PARTS[p](Path(d))


if __name__ == "__main__":
    main()
