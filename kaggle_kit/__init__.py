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
* :mod:`.remote`: push, wait, download;
* :mod:`.local`: run a staged kernel as Kaggle would (papermill);
* :mod:`.cli`: the command line.

* :mod:`.pairs`: the notebook-pair rules of ``scripts/check_pairs.py``, loaded from its file.
"""
from .accelerators import ACCELERATORS, accelerator_name, notebook_accelerator
from .client import CredentialsError, kaggle_api, kaggle_username
from .local import ParameterError, check_parameters, kaggle_layout, run_local
from .offline import internet_needs
from .project import derive_metadata, entry_problems, load_project_metadata
from .remote import DownloadError, PushError, download, list_outputs, push, wait
from .rules import RULES, VENDOR_TAG, MetadataError, normalise_metadata, normalise_source, validate_metadata
from .stage import Staged, notebook_paths, read_notebook, stage
from .vendor import kitlib_digest, kitlib_files, vendor_cell_source, vendor_notebook, vendored_files

__all__ = [
    "ACCELERATORS", "RULES", "VENDOR_TAG", "CredentialsError", "DownloadError", "MetadataError", "ParameterError",
    "PushError", "Staged", "accelerator_name", "check_parameters", "derive_metadata", "download", "entry_problems",
    "internet_needs", "kaggle_api", "kaggle_layout", "kaggle_username", "kitlib_digest", "kitlib_files",
    "list_outputs", "load_project_metadata", "normalise_metadata", "normalise_source", "notebook_accelerator",
    "notebook_paths", "push", "read_notebook", "run_local", "stage", "validate_metadata", "vendor_cell_source",
    "vendor_notebook", "vendored_files", "wait",
]
