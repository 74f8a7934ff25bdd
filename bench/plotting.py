"""What every plot of bench/ ends with: its title, the layout, the file under plots/."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save(fig: Any, path: Path, title: str) -> None:
    """`fig` (a matplotlib Figure) written to `path` and closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"   wrote {path}")
