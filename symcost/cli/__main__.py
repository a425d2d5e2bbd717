"""``python -m symcost.cli``: run the command line."""

from __future__ import annotations

from .main import main

if __name__ == "__main__":  # pragma: no cover
    main()
