"""Subprocess body for tests/test_keras_hf_decoder.py: a transformers decoder folder read by keras-hub on JAX.

Usage: ``python tests/support/keras_hf_decoder_worker.py FOLDER IN.npz OUT.npz``. ``IN.npz`` holds
``token_ids`` and ``padding_mask`` (int32 ``[N, L]``, right-padded, tokenized in the parent). Builds the
backbone as the sharded path does (:func:`kitlib.keras.sharded._build_backbone`: keras-hub's converter plus
:func:`kitlib.compat.keras.keras_hub_hf_overrides`), and once more from keras-hub's converter alone (the
dropped ``rms_norm_eps``: a mapping that is wrong, which the test must tell apart), and writes both last
hidden states (float32 ``[N, L, hidden]``) as ``kit`` and ``converter_only``, with ``overrides`` (JSON).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kitlib.keras.runtime import select_backend  # noqa: E402

select_backend("jax")

import numpy as np  # noqa: E402

from kitlib.compat.keras import keras_hub_hf_overrides  # noqa: E402
from kitlib.keras import sharded  # noqa: E402
from kitlib.keras.hf_decoder import hf_base  # noqa: E402

folder, inp, out = sys.argv[1:4]
rows = np.load(inp)
x = {"token_ids": rows["token_ids"], "padding_mask": rows["padding_mask"]}
base = hf_base(folder)
kit = sharded._build_backbone(base, "float32")
import keras_hub  # noqa: E402

plain = keras_hub.models.LlamaBackbone.from_preset(base.preset, dtype="float32")
np.savez(out, kit=np.asarray(kit(x)), converter_only=np.asarray(plain(x)),
         overrides=json.dumps(keras_hub_hf_overrides(folder)), cls=type(kit).__name__,
         epsilon=kit.layer_norm_epsilon)
