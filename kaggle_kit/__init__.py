"""Kaggle kernels from the paired notebooks, and competition submissions (``python -m kaggle_kit``,
or ``python scripts/kernels.py``; docs/kernels.md).

One module per part:

* :mod:`.client`: the ``kaggle`` package's authenticated client (its warnings passed through);
* :mod:`.accelerators`: the accelerator table (``tpu``, ``gpu``, ``none``; Kaggle's names for them);
* :mod:`.rules`: the kernel-metadata rules, one table row each (:data:`~.rules.RULES`);
* :mod:`.offline`: what in a notebook needs the internet (for ``enable_internet: false``);
* :mod:`.project`: the top-level ``kernel-metadata.json`` (an entry per notebook);
* :mod:`.vendor` (+ ``vendor_cell.py``, the cell itself): kitlib vendored into the notebook;
* :mod:`.stage`: a notebook pair -> a kernel folder;
* :mod:`.publish`: a checkpoint as a new data set version, attached by name;
* :mod:`.images`: Kaggle's GPU and TPU images, one row each (:data:`~.images.IMAGES`: Python, platforms, packages);
* :mod:`.wheels` (+ ``wheels_cell.py``, the cell itself): what a notebook needs that its image lacks, built
  into a wheels data set, attached and installed offline by the kernel's first cell;
* :mod:`.parameters`: ``-p NAME=VALUE``, checked and injected as papermill would;
* :mod:`.remote`: push, wait, download (one version at a time);
* :mod:`.fanout`: a chain fanned out over folds or seeds, within the account's concurrent sessions;
* :mod:`.submit` (+ :mod:`.sdk`, the kagglesdk calls KaggleApi does not wrap): submit, wait for the score, list submissions;
* :mod:`.local`: run a staged kernel as Kaggle would (papermill);
* :mod:`.cli`: the command line.

* :mod:`.pairs`: the notebook-pair rules (the module ``notebook_pairs``).
"""
from .accelerators import ACCELERATORS, accelerator_name, notebook_accelerator
from .client import CredentialsError, kaggle_api, kaggle_username
from .images import IMAGES, image_for
from .local import MountError, kaggle_layout, run_local
from .offline import internet_needs
from .parameters import ParameterError, check_parameters, inject_parameters
from .project import chain, derive_metadata, entry_problems, load_project_metadata
from .remote import DownloadError, PushError, WaitTimeout, download, list_outputs, push, wait
from .rules import RULES, VENDOR_TAG, MetadataError, normalise_metadata, normalise_source, validate_metadata
from .stage import Staged, notebook_paths, read_notebook, stage, strip_editor_metadata
from .submit import SubmitError, list_submissions, submit_code, submit_file, wait_scored
from .vendor import import_closure, kitlib_digest, kitlib_files, vendor_cell_source, vendor_notebook, vendored_files
from .wheels import WheelsError

__all__ = [
    "ACCELERATORS", "IMAGES", "RULES", "VENDOR_TAG", "CredentialsError", "DownloadError", "MetadataError", "MountError",
    "ParameterError", "PushError", "Staged", "SubmitError", "WaitTimeout", "WheelsError", "accelerator_name", "chain",
    "check_parameters", "derive_metadata", "download", "entry_problems", "image_for", "import_closure", "inject_parameters",
    "internet_needs", "kaggle_api", "kaggle_layout", "kaggle_username", "kitlib_digest", "kitlib_files",
    "list_outputs", "list_submissions", "load_project_metadata", "normalise_metadata", "normalise_source",
    "notebook_accelerator", "notebook_paths", "push", "read_notebook", "run_local", "stage",
    "strip_editor_metadata", "submit_code", "submit_file", "validate_metadata", "vendor_cell_source",
    "vendor_notebook", "vendored_files", "wait", "wait_scored",
]
