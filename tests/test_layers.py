"""Issue 41.3: kitlib's packages import downwards only, and one entry opens a model (:func:`kitlib.models.open.open_model`).

The imports are read from the source (``ast``), those inside functions too (kitlib imports lazily), so a lazy
import back up is seen as well as a top-level one.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import SAMPLE, write_slice

ROOT = Path(__file__).resolve().parents[1]

# The shared leaves: modules (and compat/) that any part may import, and that import no part above them.
LEAVES = frozenset({"kitlib", "atomic", "storage", "paths", "params", "metrics", "compat", "locks", "data", "sample",
                    "checkpoint", "notebook"})
# What each part may import besides the leaves: the layers, bottom up (run/ knows nothing of models/).
ALLOWED = {
    "run": set(),
    "models": {"run"},
    "outputs": set(),
    "infer": {"run", "models", "outputs"},
    "training": {"run", "models", "outputs", "infer"},
    "cv": {"run", "models", "outputs", "infer", "training"},
    "keras": {"run", "models", "outputs", "training"},  # the Keras side
    "__main__": {"outputs"},
}
# Upward imports that are known and named, each with why (no other is allowed).
EXCEPTIONS = {("checkpoint", "models"): "save_checkpoint writes a LoRA run's adapters (models.adapters.write_adapter)"}


def _part(module: str) -> str:
    """``kitlib.run.backends.precision`` -> ``run``; ``kitlib`` -> ``kitlib``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "kitlib"


def kitlib_imports(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """``(importer module, imported module, "file:line")`` for every import of kitlib inside kitlib, at any depth."""
    found = []
    for path in sorted((root / "kitlib").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        module = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
        package = module if rel[-1] == "__init__" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" for a in node.names] if base == "kitlib" else [base]
            else:
                continue
            found += [(module, t, f"{path.relative_to(root).as_posix()}:{node.lineno}") for t in targets
                      if t == "kitlib" or t.startswith("kitlib.")]
    return found


def upward_imports(root: Path = ROOT) -> list[str]:
    """Each import from one part of kitlib into another that :data:`ALLOWED` and :data:`EXCEPTIONS` do not allow."""
    bad = []
    for importer, imported, where in kitlib_imports(root):
        a, b = _part(importer), _part(imported)
        if a == b or b in LEAVES or (a, b) in EXCEPTIONS:
            continue
        if a in LEAVES or b not in ALLOWED.get(a, set()):
            bad.append(f"{where}: {a} imports {imported}")
    return bad


def test_run_imports_nothing_of_models():
    """run/ (how replicas run) does not import models/ back, not even lazily inside a function."""
    back = [f"{where}: {imported}" for importer, imported, where in kitlib_imports()
            if _part(importer) == "run" and _part(imported) == "models"]
    assert not back, "run/ imports models/:\n" + "\n".join(back)


def test_packages_import_downwards_only():
    bad = upward_imports()
    assert not bad, "imports against the layers (tests/test_layers.py ALLOWED):\n" + "\n".join(bad)


def test_the_import_reader_sees_lazy_and_relative_imports(tmp_path):
    (tmp_path / "kitlib" / "run").mkdir(parents=True)
    (tmp_path / "kitlib" / "__init__.py").write_text("")
    (tmp_path / "kitlib" / "run" / "__init__.py").write_text("from .. import atomic\n")
    (tmp_path / "kitlib" / "run" / "x.py").write_text("def f():\n    from ..models import memory\n    import kitlib.models.kinds\n")
    assert [(i, t) for i, t, _ in kitlib_imports(tmp_path)] == [
        ("kitlib.run", "kitlib.atomic"), ("kitlib.run.x", "kitlib.models"), ("kitlib.run.x", "kitlib.models.kinds")]
    assert upward_imports(tmp_path) == ["kitlib/run/x.py:2: run imports kitlib.models",
                                        "kitlib/run/x.py:3: run imports kitlib.models.kinds"]


# --- one loader ---

OPEN = "kitlib/models/open.py"
# Where a model's own class is built: the kinds' ``load`` (and the encoder's ``load_model`` it calls), and the GGUF
# converter writing a folder once. Anything else goes through open_model.
BUILDS = {"kitlib/models/kinds.py", "kitlib/models/model.py", "kitlib/models/gguf_convert.py"}
NOT_MODELS = {"AutoTokenizer", "AutoConfig", "tok", "tokenizer", "config"}  # from_pretrained of what is not a model


def _receiver(node) -> str:
    """The last name of a call's receiver: ``r.kind.load`` -> ``kind``, ``PeftModel.from_pretrained`` -> ``PeftModel``."""
    f = node.func.value if isinstance(node.func, ast.Attribute) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def model_loads(root: Path = ROOT) -> list[str]:
    """``file:line call`` for each call that opens a model outside :data:`OPEN` (and the builders, :data:`BUILDS`)."""
    found = []
    for path in sorted((root / "kitlib").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("kitlib/keras/"):  # the Keras side opens .keras files (kitlib.keras.model.load_classifier)
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            who = _receiver(node)
            opens = ((name == "load" and who.lower().endswith("kind"))
                     or name in ("load_adapted", "load_quantized")
                     or (name == "from_pretrained" and who == "PeftModel"))
            builds = name == "load_model" or (name == "from_pretrained" and who not in NOT_MODELS and who != "PeftModel")
            if (opens and rel != OPEN) or (builds and rel not in BUILDS):
                found.append(f"{rel}:{node.lineno} {who + '.' if who else ''}{name}")
    return found


def test_one_loader_opens_every_model_in_kitlib():
    """Issue 41.3: no module but kitlib/models/open.py opens a model (``kind.load``, peft's ``PeftModel.from_pretrained``,
    a quantized load); the model classes are built only in the kinds (and the GGUF converter)."""
    found = model_loads()
    assert not found, "models opened outside kitlib.models.open.open_model:\n" + "\n".join(found)


def test_the_loader_count_sees_a_direct_load(tmp_path):
    (tmp_path / "kitlib" / "models").mkdir(parents=True)
    (tmp_path / "kitlib" / "infer.py").write_text(
        "def f(job, plan):\n    m = plan.kind.load(job.checkpoint)\n    t = AutoTokenizer.from_pretrained(job.checkpoint)\n"
        "    return PeftModel.from_pretrained(m, 'a'), AutoModelForCausalLM.from_pretrained('b')\n")
    (tmp_path / "kitlib" / "models" / "open.py").write_text("def g(r):\n    return r.kind.load(r.folder)\n")
    assert model_loads(tmp_path) == ["kitlib/infer.py:2 kind.load", "kitlib/infer.py:4 PeftModel.from_pretrained",
                                     "kitlib/infer.py:4 AutoModelForCausalLM.from_pretrained"]


def test_training_predict_and_the_handoff_open_through_the_one_entry(tiny_checkpoint, tmp_path, monkeypatch):
    """Every model a tiny run opens (training's replica, the hand-off's reload, predict's replica: what the test-time
    kernel runs) goes through open_model: each kind's ``load`` is counted, and none is called outside it."""
    from kitlib.infer import InferJob, predict
    from kitlib.models import kinds, open as opening
    from kitlib.run.runtime import detect_runtime
    from kitlib.training.handoff import check_reload
    from kitlib.training.job import TrainJob
    from kitlib.training.train import train

    log, inside = [], []
    entry = opening.open_model

    def counted_entry(*args, **kwargs):
        log.append("open_model")
        inside.append(True)
        try:
            return entry(*args, **kwargs)
        finally:
            inside.pop()

    for cls in (kinds.Encoder, kinds.Decoder, kinds.AnswerTokens):
        def counted_load(self, *args, _load=cls.load, **kwargs):
            log.append("kind.load" if inside else "kind.load outside open_model")
            return _load(self, *args, **kwargs)
        monkeypatch.setattr(cls, "load", counted_load)
    monkeypatch.setattr(opening, "open_model", counted_entry)

    out, rt = tmp_path / "ckpt", detect_runtime(1, "cpu")  # one replica: in this process
    train(TrainJob(checkpoint=str(tiny_checkpoint), out_dir=str(out), train_csv=str(SAMPLE / "train.csv"),
                   valid_csv=str(SAMPLE / "validation.csv"), epochs=1, max_len=32, batch_size=8, train_limit=16,
                   valid_limit=16, precision="fp32"), rt)
    trained = list(log)
    saved = pd.read_csv(out / "valid_predictions.csv")
    texts = pd.read_csv(SAMPLE / "validation.csv", dtype=str, keep_default_na=False).set_index("id").loc[
        saved["id"].astype(str), "comment_text"].tolist()
    check_reload(out, texts, saved["toxic"].to_numpy(), 32, "fp32", rows=4)
    reloaded = log[len(trained):]
    test_csv, _ = write_slice(tmp_path / "slice", 8)
    predict(InferJob(checkpoint=str(out), test_csv=str(test_csv), shard_dir=str(tmp_path / "shards"),
                     output_csv=str(tmp_path / "sub.csv"), batch_size=8, max_len=32, precision="fp32",
                     collapsed="warn"), rt)  # the tiny random model, trained 2 steps: near chance, on purpose
    predicted = log[len(trained) + len(reloaded):]
    assert trained == reloaded == predicted == ["open_model", "kind.load"], json.dumps(log)


# --- one reader of config.json ---

CONVERTERS = {"kitlib/models/minilm_convert.py", "kitlib/models/e5_convert.py"}  # they write config.json: read it to change it


def config_reads(root: Path = ROOT) -> list[str]:
    """``file:line`` of each ``json.load(s)`` of a ``config.json`` and each ``AutoConfig.from_pretrained`` (any
    ``*Config``) outside kitlib/models/config.py (and the converters)."""
    found = []
    for path in sorted((root / "kitlib").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("kitlib/keras/") or rel in CONVERTERS | {"kitlib/models/config.py"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = getattr(node.func.value, "id", "")
            if ((node.func.attr in ("load", "loads") and owner == "json" and "config.json" in ast.unparse(node))
                    or (node.func.attr == "from_pretrained" and owner.endswith("Config"))):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_one_reader_of_config_json():
    found = config_reads()
    assert not found, "config.json read outside kitlib.models.config.read_config:\n" + "\n".join(found)


def test_the_config_reader_count_sees_a_transformers_config(tmp_path):
    (tmp_path / "kitlib" / "models").mkdir(parents=True)
    (tmp_path / "kitlib" / "models" / "x.py").write_text(
        "def f(p):\n    from transformers import AutoConfig\n    return AutoConfig.from_pretrained(p)\n")
    assert config_reads(tmp_path) == ["kitlib/models/x.py:3"]


def test_read_config_reads_each_version_once_and_hands_out_copies(tmp_path):
    from kitlib.models.config import read_config

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "id2label": {"0": "toxic"}}))
    first = read_config(tmp_path)
    first["id2label"]["0"] = "changed"
    assert read_config(tmp_path)["id2label"] == {"0": "toxic"}  # the caller's change is its own
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert read_config(tmp_path) == {"model_type": "llama"}  # a new version is read again
    assert read_config(tmp_path / "none", missing={}) == {}
    with pytest.raises(FileNotFoundError, match="no config.json"):
        read_config(tmp_path / "none")
