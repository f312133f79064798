"""The Keras side of the kit (TensorFlow or JAX backend), one module per concept:

* :mod:`kitlib.keras.runtime`: the Keras backend choice and the data-parallel runtime a notebook
  builds its models in (``keras_runtime()``), and compile counting.
* :mod:`kitlib.keras.strategy`: the TensorFlow ``tf.distribute`` strategy detector.
* :mod:`kitlib.keras.precision`: the mixed-precision policy per accelerator.
* :mod:`kitlib.keras.data`: fixed-shape input pipelines, padded prediction, the submission file.
* :mod:`kitlib.keras.model`: the classifier (keras-hub): build, compile, save, load.
* :mod:`kitlib.keras.pretrained`: a transformers folder (multilingual-e5-small) read by keras-hub,
  its head, and the torch side's fine-tune recipe in Keras's terms.
* :mod:`kitlib.keras.mesh`: sharded decoders (JAX): the ``("batch", "model")`` device mesh, each decoder
  family's weight table and layout, ``ModelParallel`` set before the model is built.
* :mod:`kitlib.keras.chip_plan`: the memory plan per chip of a sharded LoRA run, worked out before any
  weight loads, refused with the figure and the fix; real decoders' sizes and a TPU v5e-8's table.
* :mod:`kitlib.keras.sharded`: LoRA on a sharded keras-hub backbone with a last-token head: build, train
  steps, predict, save (LoRA + head + the base's record) and load on any mesh.
* :mod:`kitlib.keras.sharded_predict`: sharded inference: rows padded to the global batch and laid over the
  mesh's ``"batch"`` axis, one prediction per input row through the kit's shard writer and merger, at the
  width the precision rule gives (bf16 on a TPU).
* :mod:`kitlib.keras.hf_decoder`: a transformers decoder folder (the packaged SmolLM2-135M) as the sharded
  path's base, read by keras-hub's converter; its rows tokenized by its own tokenizer in the parent.
* :mod:`kitlib.keras.sharded_run`: a sharded run as the kit's other surfaces take it: the base by name
  (``model="auto"``), the run's identity (mesh and LoRA settings), a state a cut-off run continues, the trained
  folder's history, hand-off marks and runs-table row (``notebooks/keras_sharded_lora.py``).

Shared with the torch side: the machine probe and the accelerator names
(:mod:`kitlib.run.hardware`: ``"tpu"``, ``"cuda"``, ``"cpu"``), the CSV rules (:mod:`kitlib.data`),
the paths (:mod:`kitlib.paths`), the submission merger (:mod:`kitlib.outputs.merge`) and version drift
(:mod:`kitlib.compat`; Keras's own in :mod:`kitlib.compat.keras`). Importing this package imports neither Keras nor a backend: a process
holds one backend, chosen by :func:`kitlib.keras.runtime.keras_runtime` before Keras is imported.
"""
