"""A GGUF file of one's own as a model source (kitlib.models.packaged.gguf_source, from_gguf): the notebooks' ``model``
parameter and :func:`kitlib.models.open.open_model` (its ``GgufSource`` dispatcher, first in the table) take a ``.gguf``
file, or a folder holding one (a Kaggle data set of a GGUF), and convert it once with the one GGUF converter.
The file is the tiny random Gemma 3 of tests/support/tiny_gguf.py."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from kitlib.checkpoint import SOURCE_FILE
from kitlib.models import gguf_convert
from kitlib.models.kinds import kind_for
from kitlib.models.model import resolve_checkpoint
from kitlib.models.open import DISPATCHERS, GgufSource, open_model
from kitlib.models.packaged import from_gguf, gguf_source
from kitlib.paths import TMP_ENV
from support.tiny_gguf import write_gemma3_gguf

IDS = torch.tensor([[2, 40, 41, 42, 43, 44], [2, 50, 51, 52, 0, 0]])
MASK = (IDS != 0).long()


@pytest.fixture(scope="module")
def attached(tmp_path_factory):
    """A data set of one GGUF file, as Kaggle mounts it: ``<root>/gemma-tiny/model.gguf``; with the drawn model."""
    root = tmp_path_factory.mktemp("input") / "gemma-tiny"
    root.mkdir()
    model = write_gemma3_gguf(root / "model.gguf")
    return {"folder": root, "file": root / "model.gguf", "model": model}


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """The kit's scratch folder (where open_model converts) and the notebooks' cache_dir, one folder."""
    monkeypatch.setenv(TMP_ENV, str(tmp_path / "scratch"))
    return tmp_path / "scratch"


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK).logits


def test_the_model_parameter_takes_a_folder_of_a_gguf_and_converts_it_once(attached, scratch, monkeypatch):
    folder = resolve_checkpoint(str(attached["folder"]), data_dir=".", cache_dir=scratch, purpose="training")
    assert folder.parent == scratch and folder.name.startswith("gguf-model-")
    source = (folder / SOURCE_FILE).read_text()
    assert "not stated in the GGUF file" in source and '"sha256"' in source  # no general.license in the tiny file
    kind = kind_for(folder)
    assert kind.name == "answer-tokens" and kind.load_tokenizer(folder).pad_token == "<pad>"  # the file's own pad

    monkeypatch.setattr(gguf_convert, "convert", lambda *a, **k: pytest.fail("converted again"))
    assert resolve_checkpoint(str(attached["file"]), data_dir=".", cache_dir=scratch, purpose="training") == folder
    opened = open_model(attached["file"], kind=kind)  # the GgufSource dispatcher, the same cached folder
    want = _logits(attached["model"])
    assert float(want.std()) > 0.1  # a model whose outputs spread
    assert torch.allclose(_logits(opened), want, atol=1e-4)


def test_the_files_licence_and_type_are_recorded(tmp_path):
    (tmp_path / "in").mkdir()
    write_gemma3_gguf(tmp_path / "in" / "tiny-Q.gguf", licence="apache-2.0")
    folder = from_gguf(tmp_path / "in" / "tiny-Q.gguf", tmp_path / "cache")
    source = json.loads((folder / SOURCE_FILE).read_text())
    assert source["licence"] == "apache-2.0" and "file type ALL_F32" in source["quantization"]
    assert source["files"] == [{"path": str((tmp_path / "in" / "tiny-Q.gguf").resolve())}] and len(source["sha256"]) == 64


def test_adapters_open_on_a_gguf_base_as_on_its_converted_folder(attached, scratch, tmp_path):
    from kitlib.models.adapters import LoraSpec, save_adapter, wrap

    folder = from_gguf(attached["file"], scratch)
    kind = kind_for(folder)
    model = wrap(kind.load(folder, dtype=torch.float32), kind, LoraSpec(r=4, alpha=8, dropout=0.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # adapters that change the output
    save_adapter(model, tmp_path / "adapter", base=folder, kind=kind, spec=LoraSpec(r=4, alpha=8, dropout=0.0))
    by_record = _logits(open_model(tmp_path / "adapter", kind=kind))
    by_gguf = _logits(open_model(tmp_path / "adapter", kind=kind, base=attached["folder"]))  # checked once converted
    assert torch.allclose(by_gguf, by_record, atol=1e-5)
    assert float((by_record - _logits(attached["model"])).abs().max()) > 0.1  # the adapters count


def test_the_dispatcher_is_asked_first_and_only_for_gguf(attached, tmp_path):
    assert DISPATCHERS[0] is GgufSource and DISPATCHERS[-1].__name__ == "Plain"
    assert gguf_source(attached["folder"]) == attached["file"] == gguf_source(attached["file"])
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "x.gguf").write_bytes(b"")
    assert gguf_source(tmp_path) is None  # a checkpoint folder, whatever else it holds
    assert gguf_source(tmp_path / "config.json") is None


def test_a_folder_of_two_gguf_files_names_both_and_the_fix(tmp_path):
    for name in ("a-Q4_K_M.gguf", "a-Q8_0.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(ValueError, match=r"2 GGUF files \(a-Q4_K_M.gguf, a-Q8_0.gguf\).*model=<.*file.gguf>"):
        resolve_checkpoint(str(tmp_path), data_dir=".", cache_dir=tmp_path / "c", purpose="training")


def test_a_folder_with_neither_says_so(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"no config.json\) nor a GGUF file"):
        resolve_checkpoint(str(tmp_path), data_dir=".", cache_dir=tmp_path / "c", purpose="training")


def test_a_kernel_without_the_converter_is_told_what_to_attach(attached, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kitlib.models.gguf_convert", None)  # as in a kernel's vendored kit
    with pytest.raises(ModuleNotFoundError, match="no GGUF converter: convert it where the kit is installed.*attach that folder"):
        from_gguf(attached["file"], tmp_path)
