"""Per-rank parameter states that a training run writes (``TrainJob.rank_states_dir``), compared."""
from __future__ import annotations

from pathlib import Path

import torch


def rank_states(folder: Path, world: int) -> list[dict]:
    """``folder/rank-<r>.pt`` for r in 0..world-1: each replica's state dict after training."""
    return [torch.load(Path(folder) / f"rank-{r}.pt") for r in range(world)]


def max_diff(a: dict, b: dict) -> float:
    """The largest absolute difference over the floating-point tensors of two state dicts with the same keys."""
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())
