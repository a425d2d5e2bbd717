"""``python -m symcost.cli``: run the command line."""

from __future__ import annotations

from .main import app

if __name__ == "__main__":  # pragma: no cover
    app()
