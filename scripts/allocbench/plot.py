"""The free CPU and memory fraction of every MSB before and after the fill, as a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from benchkit import save_figure


def plot_free(
    path: Path,
    before: dict[str, tuple[float, float]],
    after: dict[str, tuple[float, float]],
    title: str,
) -> None:
    """One panel per resource; x is the MSB ("dc/msb") in order, datacenters marked apart."""
    msbs = sorted(before.keys() | after.keys())
    x = range(len(msbs))
    figure, axes = plt.subplots(2, 1, figsize=(14, 7), sharex=True)
    for panel, (axis, resource) in enumerate(zip(axes, ("CPU", "memory"), strict=True)):
        axis.plot(x, [before.get(m, (0.0, 0.0))[panel] for m in msbs], label="before", lw=1.5)
        axis.bar(x, [after.get(m, (0.0, 0.0))[panel] for m in msbs], label="after", alpha=0.7)
        axis.set_ylim(0, 1.05)
        axis.set_ylabel(f"free {resource}")
        for i in range(1, len(msbs)):
            if msbs[i].split("/")[0] != msbs[i - 1].split("/")[0]:
                axis.axvline(i - 0.5, color="grey", lw=0.8, ls="--")
        axis.legend(loc="lower right")
    axes[-1].set_xlabel("MSB (dashed lines separate datacenters)")
    axes[-1].set_xticks(list(x)[:: max(1, len(msbs) // 24)])
    axes[-1].set_xticklabels(msbs[:: max(1, len(msbs) // 24)], rotation=60, fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)
