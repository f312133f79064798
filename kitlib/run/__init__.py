"""How replicas run: what this host has, the launch modes, and what each replica is handed.

* :mod:`kitlib.run.runtime`: the runtime detector, the table of launch modes, and ``launch``.
* :mod:`kitlib.run.replica`: the one object each replica is handed (rank, device, collectives, precision, ``together``).
* :mod:`kitlib.run.hardware`: what accelerators the host has, read without initialising any.
* :mod:`kitlib.run.balance`: rows split over replicas by tokens (not rows), and batched to a token budget.
* :mod:`kitlib.run.heap`: memory a long loop has freed, given back to the system (``malloc_trim``).
* :mod:`kitlib.run.backends`: one backend per launch mode (launcher, accelerator, collectives);
  :mod:`kitlib.run.backends.precision` is the precision rule.
"""
