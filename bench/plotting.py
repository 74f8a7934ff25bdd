"""What every plot of bench/ ends with: its title, the layout, the file under plots/."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save(fig: Any, path: Path, title: str | None = None) -> None:
    """`fig` (a matplotlib Figure), under `title` if given, laid out, written to `path` and closed
    (matplotlib keeps every open figure)."""
    import matplotlib.pyplot as plt

    if title is not None:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"   wrote {path}")
