"""One backend per launch mode, built from three parts: how its replicas start, the device they
compute on, and how they talk to each other (:mod:`kitlib.run.backends.base` says what each is asked).
:data:`kitlib.run.runtime.MODES` is the table of rows built from them.

==================  =====================  ====================  ==========================
mode                launcher               accelerator           collectives
==================  =====================  ====================  ==========================
tpu                 ``XlaLaunch``          ``Xla("TPU")``        ``Xla``
tpu-pod             ``XlaLaunch`` (pod)    ``Xla("TPU")``        ``Xla``
cuda                ``Processes``          ``Cuda``              ``Nccl``
cuda-torchrun       ``Torchrun``           ``Cuda``              ``Nccl``
cpu                 ``HereOrProcesses``    ``Cpu``               ``TorchDistributed`` (gloo)
cpu-torchrun        ``Torchrun``           ``Cpu``               ``TorchDistributed`` (gloo)
xla-cpu             ``XlaLaunch`` (threads) ``Xla("CPU")``       ``ThreadedXla``
xla-cpu-processes   ``Processes``          ``Xla("CPU")``, one   ``NoCollectives``
                                           device per process
==================  =====================  ====================  ==========================

The modules: the map (:mod:`kitlib`). Nothing here imports torch, torch_xla or transformers at module import.
"""
