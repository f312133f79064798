"""kitlib/training/plots.py: the training notebooks' held-out ROC curve and the figure file beside the checkpoint
(issue 27.11: the torch training notebook saved no figure; neither drew a ROC curve)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from kitlib.training.plots import CURVES_FILE, plot_roc, save_figure


def test_the_roc_curve_drawn_is_sklearns_and_its_auc_is_returned():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    p = np.clip(y * 0.3 + rng.random(300) * 0.7, 0, 1)
    fig, ax = plt.subplots()
    auc = plot_roc(ax, y, p, name="held-out English")
    fpr, tpr, _ = roc_curve(y, p)
    assert auc == pytest.approx(roc_auc_score(y, p)) and 0.7 < auc < 1
    curve = ax.lines[-1]
    np.testing.assert_allclose(curve.get_xdata(), fpr)
    np.testing.assert_allclose(curve.get_ydata(), tpr)
    assert curve.get_label() == f"held-out English: AUC {auc:.4f} (300 rows)"
    plt.close(fig)


def test_one_class_gives_no_curve_and_says_so():
    fig, ax = plt.subplots()
    assert plot_roc(ax, [0] * 10, np.linspace(0, 1, 10)) is None
    assert [t.get_text() for t in ax.texts] == ["undefined: 10 rows, one class only"]
    with pytest.raises(ValueError, match="3 labels but 2 predictions"):
        plot_roc(ax, [0, 1, 1], [0.1, 0.2])
    plt.close(fig)


def test_the_figure_is_saved_as_a_png_beside_the_checkpoint(tmp_path):
    fig, ax = plt.subplots()
    plot_roc(ax, [0, 1, 0, 1], [0.1, 0.9, 0.4, 0.6])
    path = save_figure(fig, tmp_path)
    plt.close(fig)
    assert path == tmp_path / CURVES_FILE == tmp_path / "curves.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # no temporary left
