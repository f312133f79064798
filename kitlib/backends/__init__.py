"""One backend per launch mode: how its replicas start and stop, their rank, world size and device,
collectives, optimizer step, precision and environment (:mod:`kitlib.backends.base` says what each
is asked). :data:`kitlib.runtime.MODES` is the table that maps mode names to them.

==================  =====================================  =========================================
mode                module                                  replicas
==================  =====================================  =========================================
tpu                 :mod:`kitlib.backends.xla`              ``torch_xla.launch``, one process per chip
tpu-pod             :mod:`kitlib.backends.xla`              the same, on every host of a pod slice
cuda                :mod:`kitlib.backends.cuda`             one process per GPU, nccl
cuda-torchrun       :mod:`kitlib.backends.torchrun`         this process, started by torchrun, nccl
cpu                 :mod:`kitlib.backends.cpu`              eager; in this process, or N processes, gloo
cpu-torchrun        :mod:`kitlib.backends.torchrun`         this process, started by torchrun, gloo
xla-cpu             :mod:`kitlib.backends.xla_threads`      PJRT CPU devices as threads (TPU rehearsal)
xla-cpu-processes   :mod:`kitlib.backends.xla_processes`    one PJRT CPU device per process, inference
==================  =====================================  =========================================

Shared pieces: :mod:`~kitlib.backends.precision` (the precision rule),
:mod:`~kitlib.backends.processes` (starting local processes), :mod:`~kitlib.backends.distributed`
(``torch.distributed`` collectives). Nothing here imports torch, torch_xla or transformers at
module import.
"""
