"""Training: ``train(job, rt)`` and what a training run needs beside it.

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
* :mod:`kitlib.training.marks`: the ready and refused marks a hand-off leaves (apart, so a Keras kernel writes them too).
* :mod:`kitlib.training.plots`: the held-out ROC curve, and the figure file saved beside the checkpoint.
"""
