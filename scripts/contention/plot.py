"""Each team's share of the region over time, against its weighted share."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from benchkit import save_figure


def plot_shares(
    path: Path,
    trace: list[tuple[float, dict[str, float]]],
    targets: dict[str, float],
    title: str,
) -> None:
    """One line per team (its share of the region's GPUs), its weighted share dashed."""
    figure, axis = plt.subplots(figsize=(12, 6))
    hours = [at / 3600 for at, _ in trace]
    for number, (team, target) in enumerate(sorted(targets.items())):
        colour = f"C{number}"
        axis.plot(hours, [shares[team] for _, shares in trace], color=colour, lw=1.2, label=team)
        axis.axhline(target, color=colour, lw=0.8, ls="--")
    axis.set_xlabel("simulated hours (after the warm-up)")
    axis.set_ylabel("share of the region's GPUs (dashed: weighted share)")
    axis.set_ylim(0, max(targets.values()) * 1.6)
    axis.legend(loc="upper right", ncol=3)
    figure.suptitle(title)
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)
