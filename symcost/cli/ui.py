"""``symcost ui``: the web explorer (FastAPI app of :mod:`symcost.cli.webapp`, served by
uvicorn).

Example::

    symcost ui --port 8050              # opens http://127.0.0.1:8050/ in a browser
    symcost ui --host 0.0.0.0 --no-browser

Needs the ``ui`` extra (``pip install 'symcost[ui]'``: fastapi, uvicorn).
"""

from __future__ import annotations

import threading
import webbrowser
from typing import Annotated

import typer

from .common import CliInputError

# fastapi/uvicorn (and through the app every model module) are imported inside the command
# only: ``symcost --help`` must not load them.


def ui_cmd(
    port: Annotated[int, typer.Option(help="TCP port to serve on.", min=0, max=65535)] = 8050,
    host: Annotated[str, typer.Option(
        help="Interface to bind (0.0.0.0: every interface; the explorer has no login).")
    ] = "127.0.0.1",
    browser: Annotated[bool, typer.Option(
        "--browser/--no-browser", help="Open the page in a web browser.")] = True,
) -> None:
    """Serve the web explorer: model, hardware, layout and workload in a form; step time, MFU,
    memory, breakdown, formulas, search, roofline and sensitivity, each with its URL and the
    equivalent command."""
    try:
        import uvicorn

        from .webapp import create_app
    except ImportError as exc:
        raise CliInputError(f"ui: needs the web packages ({exc.name} is missing; "
                            "pip install 'symcost[ui]')") from None
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/"
    typer.echo(f"symcost explorer on {url} (Ctrl-C stops it)", err=True)
    if browser:
        threading.Timer(1.0, webbrowser.open, (url,)).start()
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")


def register(app: typer.Typer) -> None:
    """Add the ``ui`` command to ``app``."""
    app.command("ui")(ui_cmd)
