"""int8 (and fp32) through maintained CPU runtimes against the kit's torch fp32, on the held-out rows.

    # an overlay venv that sees the shared torch/transformers and adds the runtimes (see BENCHMARKS.md section 4)
    PYTHONPATH=. .venv-rt/bin/python benchmarks/cpu_runtimes.py                  # prepare once, then 3 interleaved rounds
    PYTHONPATH=. .venv-rt/bin/python benchmarks/cpu_runtimes.py --reps 1 --caps native --runtimes torch-fp32,ort-fp32

What is compared (issue 28, "int8 through a maintained runtime, or not at all"), each on the same batches:

==============  ====================================================================================
torch-fp32      the kit's eager path (``kitlib.infer``): ``load_model`` + ``keep_head_float32``, ``torch.no_grad``
torch-bf16      the same under ``torch.autocast("cpu", bfloat16)`` (``kitlib.run.backends.precision.autocast``)
torch-int8      the same after torch.ao's ``quantize_dynamic`` of the body's ``nn.Linear`` layers (per-channel
                qint8, fbgemm): what the kit shipped as ``precision="int8"`` until issue 28 removed it
ort-fp32        ONNX Runtime (CPU EP, graph optimizations all) on ``torch.onnx.export`` of the kit's own model
ort-int8        ``onnxruntime.quantization.quantize_dynamic`` of that file (int8 weights, per channel; uint8
                activations quantized per batch at run time), the body's MatMuls; the head stays float32
ort-int8t       the same with one weight scale per tensor (``per_channel=False``, quantize_dynamic's default)
ov-fp32         OpenVINO CPU, the same ONNX file, ``INFERENCE_PRECISION_HINT=f32`` (its default on a CPU with
                avx512_bf16 or AMX is bf16, which would be another precision)
ov-int8         NNCF post-training quantization (``nncf.quantize``, ``ModelType.TRANSFORMER``: int8 weights and
                activations; calibrated on 320 of the rows the head was fitted on, never the held-out ones)
ov-int8w        NNCF weight compression (``nncf.compress_weights``, INT8_ASYM: int8 weights, float32 compute)
==============  ====================================================================================

Rows: validation.csv rows 500-999 of the bundled sample (tr 179, es 168, it 153; 88 toxic), the rows
``make submission`` holds out (:func:`kitlib.cv.splits.validation_split`). They are tokenized as
``kitlib.infer`` does (the checkpoint's ``query: `` prefix, max_len 128) and batched as its eager path
does with one replica: sorted by length, 32 rows a batch, each padded to its own longest row
(:func:`kitlib.infer.padded_lengths`, ``plan_batches(fill_last=False)``): 16 batches. Every runtime
gets exactly these arrays.

Model: ``--checkpoint`` (a fine-tuned multilingual-e5-small folder), else the frozen-body probe of
``benchmarks/e5_precision.py`` (the pretrained body, a logistic-regression head fitted on 800 English
training rows plus validation.csv rows 0-499). The ONNX file is exported from that checkpoint's
:class:`kitlib.models.mean_pooling.BertMeanPooledClassifier` (the kit's class: same mean pooling, same head),
wrapped to return the logits.

Timing: each (runtime, cap) runs in a fresh subprocess, in rounds (every configuration once per round,
A B C ... A B C ...), and the median over rounds is reported. In each process: load, one untimed call on
the first batch, then two timed passes over the 16 batches; pass 1 includes whatever a runtime compiles
per new shape, pass 2 is the steady state (a real test set repeats shapes). CPU seconds are
``time.process_time`` (every thread of the process) over a pass; wall seconds ``time.perf_counter``.
Both threads of the machine, as the kit's one CPU replica uses (torch: ``get_num_threads()``; ONNX
Runtime: ``intra_op_num_threads=2``; OpenVINO: ``INFERENCE_NUM_THREADS=2``, one stream).

AVX2 cap (``--caps avx2``): the target CPUs are AVX2-only (AMD EPYC Zen 2/3). Where a runtime honours a
cap, the capped process gets it: torch ``ATEN_CPU_CAPABILITY=avx2`` (ATen's vectorized kernels),
``ONEDNN_MAX_CPU_ISA=AVX2`` (oneDNN: bf16 matmuls), ``MKL_ENABLE_INSTRUCTIONS=AVX2`` (fp32 GEMM) and
``FBGEMM_ENABLE_INSTRUCTIONS=AVX2`` (torch.ao's int8 GEMM); OpenVINO ``ONEDNN_MAX_CPU_ISA=AVX2`` plus
``OV_CPU_MAX_ISA=AVX2`` (the plugin's own kernels; both are needed) and each process reports the kernel
names its compiled model chose (OpenVINO's bundled MLAS, ``gemm_mlas_f32``, is not capped by either).
ONNX Runtime has no cap at all: MLAS picks its kernels from CPUID and XCR0 alone
(``onnxruntime/core/mlas/lib/platform.cpp``). Its capped runs use a copy of the installed package with MLAS's
AVX-512 branch patched out (:func:`ort_avx2_package`): ONNX Runtime's own AVX2/FMA3 kernels, selected as an
AVX2-only CPU would select them; an emulation, not a setting ONNX Runtime offers.

The overlay environment (torch and transformers from the kit's ``.venv``, the runtimes on top)::

    python3 -m venv .venv-rt
    echo "$PWD/.venv/lib/python3.11/site-packages" > .venv-rt/lib/python3.11/site-packages/kit.pth
    .venv-rt/bin/pip install onnxruntime==1.31.1 onnx==1.23.2 onnxscript==0.7.2 openvino==2026.4.1 nncf==3.4.0
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "jigsaw-sample"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

WORK = ROOT / ".cache" / "bench-cpu-runtimes"
HELD_OUT = slice(500, 1000)  # kitlib.cv.splits.validation_split's second half
BATCH, MAX_LEN = 32, 128  # InferJob defaults, as make submission's inference notebook runs them
CALIBRATION_ROWS = 320  # for ov-int8's activation ranges: from the probe's training rows, never held-out ones
THREADS = 2
RUNTIMES = ("torch-fp32", "torch-bf16", "torch-int8", "ort-fp32", "ort-int8", "ort-int8t", "ov-fp32", "ov-int8", "ov-int8w")
CAPS = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "OV_CPU_MAX_ISA": "AVX2"},
}
CAPPABLE = ("torch", "ov", "ort")  # ONNX Runtime only through a patched copy (ort_avx2_package)
# In MLAS_PLATFORM's constructor (onnxruntime/core/mlas/lib/platform.cpp), the AVX-512 branch as compiled into
# the 1.31.1 wheel: test $0x10000,<CPUID.7.EBX> ; je <skip> ; mov <xcr0>,%rax ; not %rax ; test $0xe0,%al ; je
MLAS_AVX512_BRANCH = (rb"((?:\xf7[\xc0-\xc7]|\x41\xf7[\xc0-\xc7])\x00\x00\x01\x00)\x74(.)"
                      rb"(?:\x4c\x89[\xc0-\xff]|\x48\x89[\xc0-\xff])\x48\xf7\xd0\xa8\xe0\x0f\x84")


# --- prepare: batches, the ONNX file, the quantized files (once, cached under WORK) ---

def checkpoint(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from e5_precision import probe_checkpoint

    return probe_checkpoint()


def kit_batches(tok, ck: Path, texts: list[str]) -> tuple[list[dict], list]:
    """``texts`` tokenized and batched as ``kitlib.infer`` does on one eager CPU replica (module doc)."""
    import numpy as np

    from kitlib.checkpoint import with_text_prefix
    from kitlib.data import PlannedBatches, choose_bucket_lengths, plan_batches, tokenize

    tokens = tokenize(tok, with_text_prefix(ck, texts), MAX_LEN)
    buckets = choose_bucket_lengths(tokens.lengths, MAX_LEN, MAX_LEN, multiple=1)  # padded_lengths(), eager
    plans = plan_batches(np.arange(tokens.num_rows), BATCH, buckets[-1], tokens.lengths,
                         buckets if len(buckets) > 1 else (), fill_last=False)
    data = PlannedBatches(tokens, plans)
    return [{k: v.numpy() for k, v in data[i].items()} for i in range(len(plans))], plans


def prepare(ck: Path, force: bool = False) -> dict:
    """Write WORK/batches.npz, WORK/model.onnx and the quantized models; return what was made."""
    import numpy as np
    import pandas as pd

    WORK.mkdir(parents=True, exist_ok=True)
    meta_path = WORK / "prepared.json"
    if meta_path.is_file() and not force:
        meta = json.loads(meta_path.read_text())
        if meta["checkpoint"] == str(ck.resolve()) and meta["mtime"] == (ck / "config.json").stat().st_mtime:
            return meta
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ck)
    val = pd.read_csv(SAMPLE / "validation.csv", dtype=str, keep_default_na=False)
    held = val.iloc[HELD_OUT].reset_index(drop=True)
    batches, plans = kit_batches(tok, ck, held["comment_text"].tolist())
    arrays = {}
    for i, (b, p) in enumerate(zip(batches, plans)):
        arrays[f"ids{i}"], arrays[f"mask{i}"], arrays[f"rows{i}"] = b["input_ids"], b["attention_mask"], p.rows
    np.savez(WORK / "batches.npz", n=len(batches), labels=held["toxic"].astype(float).to_numpy(),
             lang=held["lang"].to_numpy(), **arrays)
    # calibration rows for ov-int8: every 4th of the probe's training rows (train.csv 0-799 + validation 0-499)
    en = pd.read_csv(SAMPLE / "train.csv", dtype=str, keep_default_na=False).iloc[:800]
    fit_texts = en["comment_text"].tolist() + val.iloc[:HELD_OUT.start]["comment_text"].tolist()
    calib, _ = kit_batches(tok, ck, fit_texts[::4][:CALIBRATION_ROWS])
    np.savez(WORK / "calibration.npz", n=len(calib),
             **{f"{k}{i}": b[name] for i, b in enumerate(calib) for k, name in (("ids", "input_ids"), ("mask", "attention_mask"))})
    for f in ("model.onnx", "model.int8.onnx", "model.int8t.onnx", "ov-fp32.xml", "ov-int8.xml", "ov-int8w.xml"):
        (WORK / f).unlink(missing_ok=True)
    t = time.perf_counter()
    export_onnx(ck, WORK / "model.onnx", batches[0])
    times = {"export_onnx": time.perf_counter() - t}
    t = time.perf_counter()
    quantize_ort(WORK / "model.onnx", WORK / "model.int8.onnx")
    quantize_ort(WORK / "model.onnx", WORK / "model.int8t.onnx", per_channel=False)
    times["ort_quantize_dynamic"] = (time.perf_counter() - t) / 2
    times.update(prepare_openvino(WORK / "model.onnx", [
        {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]} for b in calib]))
    meta = {"checkpoint": str(ck.resolve()), "mtime": (ck / "config.json").stat().st_mtime, "batches": len(batches),
            "rows": int(sum(len(p.rows) for p in plans)), "real_tokens": int(sum(b["attention_mask"].sum() for b in batches)),
            "computed_tokens": int(sum(b["attention_mask"].size for b in batches)), "calibration_rows": CALIBRATION_ROWS,
            "seconds": {k: round(v, 1) for k, v in times.items()}}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def load_torch(ck: Path):
    from kitlib.models.model import keep_head_float32, load_model

    model = load_model(ck)
    keep_head_float32(model)
    return model


def export_onnx(ck: Path, out: Path, example: dict) -> None:
    """``torch.onnx.export`` of the kit's own model (its class, pooling and head), returning the logits."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    wrapped = Logits(load_torch(ck)).eval()
    args = (torch.from_numpy(example["input_ids"]), torch.from_numpy(example["attention_mask"]))
    batch, seq = torch.export.Dim("batch", min=2, max=4096), torch.export.Dim("seq", min=2, max=MAX_LEN)
    with torch.no_grad():
        torch.onnx.export(wrapped, args, str(out), input_names=["input_ids", "attention_mask"], output_names=["logits"],
                          dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
                          dynamo=True, external_data=False, optimize=True)
    import onnx

    # the exporter's stored intermediate shapes include one that onnx's own shape inference rejects ("differ
    # in dimension 0: (384) vs (1)"), which stops quantize_dynamic; drop them (they are only hints) and keep
    # the graph, inputs and outputs as exported
    m = onnx.load(str(out))
    del m.graph.value_info[:]
    onnx.save(m, str(out))


def quantize_ort(src: Path, out: Path, per_channel: bool = True) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # int8 weights, one scale per output channel (as torch_ao_int8), for the MatMuls with a weight (the
    # body's linear layers; MatMulConstBOnly, quantize_dynamic's default); not the word embeddings (Gather),
    # and not the classifier head (a Gemm reading model.classifier.*), which the kit keeps float32. No
    # quant_pre_process: its symbolic shape inference fails on the exported attention masks.
    import onnx

    head = [n.name for n in onnx.load(str(src), load_external_data=False).graph.node
            if any("classifier" in i for i in n.input)]
    head += [f"{n}_MatMul" for n in head]  # the quantizer first splits a Gemm into MatMul + Add under this name
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, per_channel=per_channel, op_types_to_quantize=["MatMul"],
                     nodes_to_exclude=head)


def ov_head(model) -> list[str]:
    """Names of the OpenVINO ops that read the classifier head's weights (kept float32, as the kit keeps it)."""
    return [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"
            and any("classifier" in i.get_source_output().get_node().get_friendly_name() for i in op.inputs())]


def prepare_openvino(src: Path, calib: list[dict]) -> dict:
    """ov-fp32 (the ONNX file converted), ov-int8 (``nncf.quantize``), ov-int8w (``nncf.compress_weights``).

    NNCF's defaults otherwise: ``ModelType.TRANSFORMER`` (SmoothQuant, fast bias correction; softmax and
    layer norms float32); both also give the word-embedding table int8 weights (the kit's torch int8 keeps it
    float32; a table lookup costs little either way).
    """
    import nncf
    import openvino as ov

    times = {}
    t = time.perf_counter()
    model = ov.convert_model(str(src))
    ov.save_model(model, str(WORK / "ov-fp32.xml"), compress_to_fp16=False)  # the default stores fp16 weights
    times["ov_convert"] = time.perf_counter() - t
    head = nncf.IgnoredScope(names=ov_head(model))
    t = time.perf_counter()
    q = nncf.quantize(ov.Core().read_model(str(WORK / "ov-fp32.xml")), nncf.Dataset(calib),
                      model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calib) * BATCH, ignored_scope=head)
    ov.save_model(q, str(WORK / "ov-int8.xml"), compress_to_fp16=False)
    times["nncf_quantize"] = time.perf_counter() - t
    t = time.perf_counter()
    w = nncf.compress_weights(ov.Core().read_model(str(WORK / "ov-fp32.xml")), mode=nncf.CompressWeightsMode.INT8_ASYM,
                              ignored_scope=head)
    ov.save_model(w, str(WORK / "ov-int8w.xml"), compress_to_fp16=False)
    times["nncf_compress_weights"] = time.perf_counter() - t
    return times


def ort_avx2_package() -> Path:
    """A folder holding a copy of the installed ``onnxruntime`` whose MLAS never takes its AVX-512 branch.

    ONNX Runtime has no ISA cap: MLAS fills its kernel table from CPUID and XCR0 once, at load. In the copy,
    the conditional jump that skips the AVX-512 block when CPUID says no AVX512F becomes unconditional (one
    byte, ``je`` -> ``jmp``, at each inlined copy of the constructor), so MLAS keeps the kernels it picks on an
    AVX2 CPU without AVX-512: FMA3 SGEMM, the AVX2 U8S8 int8 GEMM (``vpmaddubsw``, no VNNI), AVX2/FMA3
    element-wise kernels. The capped runs put this folder first on ``PYTHONPATH``. Only MLAS's table is
    capped: other CPUID checks in ONNX Runtime (``onnxruntime::CPUIDInfo``) are left as they are.

    Raises:
        RuntimeError: the byte pattern is not in this onnxruntime build (another version: find the branch again).
    """
    import re
    import shutil

    import onnxruntime

    dest = WORK / "ort-avx2"
    done = dest / "patched.json"
    if done.is_file() and json.loads(done.read_text())["version"] == onnxruntime.__version__:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(Path(onnxruntime.__file__).parent, dest / "onnxruntime")
    so = next((dest / "onnxruntime" / "capi").glob("onnxruntime_pybind11_state*.so"))
    b = bytearray(so.read_bytes())
    found = list(re.finditer(MLAS_AVX512_BRANCH, bytes(b), re.S))
    if not found:
        raise RuntimeError(f"{so}: MLAS's AVX-512 branch not found (onnxruntime {onnxruntime.__version__}); "
                           "ONNX Runtime cannot be capped to AVX2 this way")
    for m in found:
        b[m.end(1)] = 0xEB  # je rel8 -> jmp rel8: always skip the AVX-512 block
    so.write_bytes(bytes(b))
    done.write_text(json.dumps({"version": onnxruntime.__version__, "offsets": [hex(m.end(1)) for m in found]}))
    return dest


# --- one measurement: a fresh process, one runtime ---

def torch_ao_int8(model):
    """``model``'s body ``nn.Linear`` layers (not the ``classifier`` head) as torch.ao dynamic int8, in place.

    The kit's former ``precision="int8"`` (deprecated ``torch.ao.quantization``; torch 2.9 says it goes
    in 2.10), kept here only to measure it against the maintained runtimes.
    """
    import warnings

    import torch

    names = {n for n, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and n != "classifier" and not n.startswith("classifier.")}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(model, dict.fromkeys(names, per_channel_dynamic_qconfig), dtype=torch.qint8, inplace=True)


def runner(name: str, ck: Path):
    """``(fn, info)``: ``fn(ids, mask) -> float32 logits [batch, 1]`` as numpy; ``info()`` -> what ran."""
    import numpy as np

    if name.startswith("torch-"):
        import torch

        from kitlib.run.backends.precision import autocast

        precision = name.split("-", 1)[1]
        model = load_torch(ck)
        if precision == "int8":
            model, precision = torch_ao_int8(model), "fp32"

        def fn(ids, mask):
            with torch.no_grad(), autocast("cpu", precision):
                return model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()

        return fn, lambda: {"threads": torch.get_num_threads(), "aten_capability": torch.backends.cpu.get_cpu_capability()}
    if name.startswith("ort-"):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", os.environ.get("BENCH_ORT_SPIN", "1"))
        path = WORK / {"ort-fp32": "model.onnx", "ort-int8": "model.int8.onnx", "ort-int8t": "model.int8t.onnx"}[name]
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

        def fn(ids, mask):
            return sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]

        return fn, lambda: {"threads": THREADS, "spinning": os.environ.get("BENCH_ORT_SPIN", "1"), "package": ort.__file__,
                            "ops": dict(Counter(n.op_type for n in __import__("onnx").load(
                                str(path), load_external_data=False).graph.node).most_common(6))}
    if name.startswith("ov-"):
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(core.read_model(str(WORK / f"{name}.xml")), "CPU", {
            "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": THREADS, "NUM_STREAMS": 1,
            "PERFORMANCE_HINT": "LATENCY"})
        request = compiled.create_infer_request()

        def fn(ids, mask):
            request.infer({"input_ids": ids, "attention_mask": mask})
            return np.array(request.get_output_tensor(0).data, copy=True)

        def info():
            kinds = Counter()
            for op in compiled.get_runtime_model().get_ordered_ops():
                rt = op.get_rt_info()
                if "primitiveType" in rt:
                    kinds[f"{rt['layerType'].astype(str)}:{rt['primitiveType'].astype(str)}"] += 1
            return {"threads": THREADS, "kernels": dict(kinds.most_common(12)),
                    "precision": str(compiled.get_property("INFERENCE_PRECISION_HINT"))}

        return fn, info
    raise ValueError(f"unknown runtime {name!r}; one of {', '.join(RUNTIMES)}")


def measure(name: str, ck: Path, out: Path, passes_wanted: int = 2) -> None:
    import numpy as np
    import torch

    data = np.load(WORK / "batches.npz", allow_pickle=True)
    n = int(data["n"])
    batches = [(data[f"ids{i}"], data[f"mask{i}"]) for i in range(n)]
    rows = np.concatenate([data[f"rows{i}"] for i in range(n)])
    load0 = os.getloadavg()
    t = time.perf_counter()
    fn, info = runner(name, ck)
    fn(*batches[0])  # untimed: first-call set-up
    setup = time.perf_counter() - t
    passes, logits = [], None
    for _ in range(passes_wanted):
        c, w = time.process_time(), time.perf_counter()
        logits = [fn(ids, mask) for ids, mask in batches]
        passes.append({"cpu": time.process_time() - c, "wall": time.perf_counter() - w})
    from kitlib.models.model import probabilities

    probs = probabilities(torch.from_numpy(np.concatenate(logits).astype(np.float32))).numpy()
    p = np.empty(len(rows), np.float32)
    p[rows] = probs  # back to held-out row order
    out.write_text(json.dumps({"runtime": name, "passes": passes, "setup_wall": setup, "load_before": load0,
                               "load_after": os.getloadavg(), "info": info(), "p": p.tolist(),
                               "logit_dtype": str(np.concatenate(logits).dtype)}))


# --- the rounds, the table ---

def cpu_name() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
        fam = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("cpu family"))
        flags = next(line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags"))
    except (OSError, StopIteration):
        return platform.processor()
    has = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    zen = {"23": "Zen 2", "25": "Zen 3/4"}.get(fam, f"family {fam}")
    if fam == "25":
        zen = "Zen 4" if "avx512f" in flags else "Zen 3"
    return f"{model} ({zen}; {', '.join(has)}; {os.cpu_count()} cores)"


def scores(p, labels, lang) -> dict:
    import numpy as np
    from sklearn.metrics import roc_auc_score

    p = np.asarray(p)
    res = {"auc": roc_auc_score(labels, p)}
    for code in sorted(set(lang)):
        m = lang == code
        res[code] = roc_auc_score(labels[m], p[m])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="a fine-tuned multilingual-e5-small folder (default: the frozen-body probe)")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES))
    ap.add_argument("--caps", default="native,avx2", help="native, avx2 or both (comma-separated)")
    ap.add_argument("--reps", type=int, default=3, help="rounds; the median is reported")
    ap.add_argument("--passes", type=int, default=2, help="timed passes per process; the last one is reported")
    ap.add_argument("--force-prepare", action="store_true", help="export and quantize again")
    ap.add_argument("--results", default=str(WORK / "results.json"))
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # internal: one runtime in this process
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    ck = checkpoint(args.checkpoint)
    if args.measure:
        measure(args.measure, ck, Path(args.out), args.passes)
        return
    import numpy as np

    meta = prepare(ck, args.force_prepare)
    names, caps = args.runtimes.split(","), args.caps.split(",")
    jobs = [(n, c) for c in caps for n in names if c == "native" or n.split("-")[0] in CAPPABLE]
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')}; {cpu_name()}; checkpoint {ck}; {meta['rows']} held-out rows in "
          f"{meta['batches']} batches ({meta['real_tokens']} real of {meta['computed_tokens']} computed tokens); "
          f"{args.reps} rounds of {len(jobs)} processes", flush=True)
    runs: dict[tuple[str, str], list[dict]] = {j: [] for j in jobs}
    (WORK / "runs").mkdir(exist_ok=True)
    for rep in range(args.reps):
        for name, cap in jobs:
            out = WORK / "runs" / f"{name}.{cap}.{rep}.json"
            env = {**os.environ, **CAPS[cap]}
            if cap == "avx2" and name.startswith("ort-"):
                env["PYTHONPATH"] = os.pathsep.join([str(ort_avx2_package()), env.get("PYTHONPATH", "")])
            t = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--measure", name, "--out", str(out), "--passes", str(args.passes)]
                           + (["--checkpoint", args.checkpoint] if args.checkpoint else []),
                           env=env, check=True, stdout=subprocess.DEVNULL)
            r = json.loads(out.read_text())
            runs[(name, cap)].append(r)
            print(f"  round {rep + 1} {name:10s} {cap:6s} last pass cpu {r['passes'][-1]['cpu']:6.2f} s wall "
                  f"{r['passes'][-1]['wall']:6.2f} s (pass 1 cpu {r['passes'][0]['cpu']:.2f}); process "
                  f"{time.perf_counter() - t:.0f} s; load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}", flush=True)
    data = np.load(WORK / "batches.npz", allow_pickle=True)
    labels, lang = data["labels"], data["lang"]
    table = []
    for (name, cap), rs in runs.items():
        base = runs.get(("torch-fp32", cap)) or runs[("torch-fp32", "native")]
        med = lambda rr, k, i=-1: statistics.median(r["passes"][i][k] for r in rr)  # noqa: E731
        p, p0 = np.asarray(rs[0]["p"]), np.asarray(base[0]["p"])
        s, s0 = scores(p, labels, lang), scores(p0, labels, lang)
        table.append({"runtime": name, "cap": cap, "cpu": med(rs, "cpu"), "wall": med(rs, "wall"),
                      "cpu_pass1": med(rs, "cpu", 0), "wall_pass1": med(rs, "wall", 0),
                      "cpu_ratio": med(rs, "cpu") / med(base, "cpu"), "wall_ratio": med(rs, "wall") / med(base, "wall"),
                      "cpu_all": [r["passes"][-1]["cpu"] for r in rs], **s, "dauc": s["auc"] - s0["auc"],
                      "max_dp": float(np.abs(p - p0).max()), "mean_dp": float(np.abs(p - p0).mean()),
                      "same_every_round": all(np.array_equal(np.asarray(r["p"]), p) for r in rs),
                      "info": rs[0]["info"], "load": [r["load_before"][0] for r in rs]})
    Path(args.results).write_text(json.dumps({"cpu": cpu_name(), "meta": meta, "when": time.strftime("%Y-%m-%d %H:%M %Z"),
                                              "rows": table}, indent=1, default=str))
    langs = sorted(set(lang))
    print(f"\n| runtime | CPU | cap | CPU s (last pass) | wall s | CPU ratio | wall ratio | AUC | {' | '.join(langs)} | "
          "ΔAUC | max Δp |")
    print("|" + "---|" * (11 + len(langs)))
    for r in table:
        print(f"| {r['runtime']} | {cpu_name().split(' (')[1].split(';')[0]} | {r['cap']} | {r['cpu']:.2f} | {r['wall']:.2f} | "
              f"{r['cpu_ratio']:.2f}x | {r['wall_ratio']:.2f}x | {r['auc']:.4f} | "
              f"{' | '.join(f'{r[c]:.4f}' for c in langs)} | {r['dauc']:+.4f} | {r['max_dp']:.4f} |")
    for r in table:
        print(f"  {r['runtime']} {r['cap']}: {json.dumps(r['info'])[:400]}")
    print(f"load average now {os.getloadavg()}")


if __name__ == "__main__":
    main()
