"""What replicas write and how it becomes a submission.

* :mod:`kitlib.outputs.shards`: the atomic per-rank shard writer.
* :mod:`kitlib.outputs.merge`: the shard merger (also ``python -m kitlib merge``).
* :mod:`kitlib.outputs.blend`: blend submissions, by value or rank (``python -m kitlib blend``).
* :mod:`kitlib.outputs.cascade`: a confidence cascade: B re-scores A's least certain rows (``python -m kitlib cascade``).
* :mod:`kitlib.outputs.submission_csv`: the one reader of submission-like CSVs.
* :mod:`kitlib.outputs.collapse`: predictions that barely vary, refused at the hand-off and never submitted silently.
* :mod:`kitlib.outputs.provenance`: who wrote a submission, and saying so when another writer replaces it.
"""
