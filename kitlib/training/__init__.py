"""Training: ``train(job, rt)`` and what a training run needs beside it.

* :mod:`kitlib.training.train`: ``train(job, rt)`` and its replica program ``_mp_fn`` (``xm.optimizer_step`` or DDP).
* :mod:`kitlib.training.resume`: the state a run saves as it goes, and resuming from it.
* :mod:`kitlib.training.runs`: one row per training run in a runs table, and the curves through a tracker.
* :mod:`kitlib.training.recipe`: how a checkpoint is fine-tuned (one table: learning rates, schedule, frozen parts, loss).
* :mod:`kitlib.training.session`: how long this session may still run (Kaggle's limits, the time budget).
* :mod:`kitlib.training.handoff`: the saved checkpoint predicts what the trained model predicted.
* :mod:`kitlib.training.plots`: the held-out ROC curve, and the figure file saved beside the checkpoint.
"""
