"""The web explorer in a real browser: Playwright driving the system Chromium (headless).

Loads the page, changes TP and the GPU, and checks that the numbers shown are the Python
API's (:func:`symcost.api.predict_training`, computed here), that an invalid layout shows the
rule it breaks (the API's one-line ConfigError), that the URL reproduces the view, and that the
CLI command shown prints the same step time; takes a screenshot (written to ``docs/ui.png``
only with ``SYMCOST_UPDATE_SCREENSHOT=1``).

Skipped when Playwright, FastAPI/uvicorn or ``/usr/bin/chromium`` is missing, unless
``SYMCOST_REQUIRE_BROWSER=1`` (CI), where that is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from symcost.api import predict_training
from symcost.config import ConfigError

CHROMIUM = os.environ.get("SYMCOST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
REQUIRED = os.environ.get("SYMCOST_REQUIRE_BROWSER") == "1"
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "ui.png"
MODEL, GPU_A, GPU_B = "llama-3-8b", "h100-sxm5-80gb", "a100-sxm4-80gb"


def _missing() -> str | None:
    for mod in ("playwright", "fastapi", "uvicorn"):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (pip install 'symcost[ui]' playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server():
    why = _missing()
    if why is not None:
        if REQUIRED:
            pytest.fail(f"SYMCOST_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    import uvicorn

    from symcost.cli.webapp import create_app

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port,
                                        log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the explorer did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                     headless=True)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.set_default_timeout(60_000)
        yield pg
        browser.close()


def _settle(pg, before: str | None = None) -> None:
    """Wait until the page has rendered an answer newer than version ``before``."""
    pg.wait_for_function(
        "([v]) => document.body.dataset.state === 'ready' && "
        "(v === null || document.body.dataset.version !== v)", arg=[before])


def _version(pg) -> str:
    return pg.evaluate("document.body.dataset.version")


def _shown(pg, key: str) -> tuple[float, str]:
    el = pg.locator(f"#out-{key}")
    return float(el.get_attribute("data-value")), el.inner_text()


def _to_precision(x: float, digits: int) -> str:
    """JavaScript's ``Number.toPrecision`` for the page's magnitudes: trailing zeros kept
    (``22.70``), as Python's ``#g`` does, without the bare trailing point (``1234``)."""
    return f"{x:#.{digits}g}".rstrip(".")


def _check_numbers(pg, **config) -> None:
    """The summary shows the API's step time, MFU and memory per GPU, exactly (data-value)
    and as printed (text, rounded as the page rounds)."""
    hw = config.pop("hardware")
    r = predict_training(MODEL, hw, **config)
    step, text = _shown(pg, "step_time_s")
    assert step == r.step_time
    assert text == f"{_to_precision(r.step_time, 4)} s"
    mfu, text = _shown(pg, "mfu")
    assert mfu == r.values["mfu"]
    assert text == f"{100 * r.values['mfu']:.2f} %"
    mem, text = _shown(pg, "memory_per_gpu_bytes")
    assert mem == r.values["mem_total"]
    assert text == f"{r.values['mem_total'] / 2**30:.2f} GiB"
    assert pg.locator("#out-fits").inner_text() == ("yes" if r.fits else "no")
    # the fit line sits at the usable HBM the API reports
    usable = pg.locator(".fitlabel").inner_text()
    assert usable == f"usable {r.values['mem_usable'] / 2**30:.2f} GiB"
    for term, seconds in r.breakdown.items():
        assert float(pg.locator(f"#brk-{term}").get_attribute("data-value")) == seconds


def test_numbers_follow_tp_and_gpu(page, server):
    pg = page
    pg.goto(server + f"?model={MODEL}&hardware={GPU_A}&num_gpus=8&global_batch=64")
    _settle(pg)
    _check_numbers(pg, hardware=GPU_A, num_gpus=8, global_batch=64)
    assert pg.locator("#error").is_hidden()

    v = _version(pg)
    pg.fill("#field-tp", "4")
    pg.locator("#field-tp").dispatch_event("change")
    _settle(pg, v)
    _check_numbers(pg, hardware=GPU_A, num_gpus=8, global_batch=64, tp=4)
    assert "tp=4" in pg.url

    v = _version(pg)
    pg.select_option("#hardware", GPU_B)
    _settle(pg, v)
    _check_numbers(pg, hardware=GPU_B, num_gpus=8, global_batch=64, tp=4)
    assert f"hardware={GPU_B}" in pg.url

    # the CLI command of this view
    pg.click("#cli-button")
    cmd = pg.locator("#cli-command").inner_text()
    assert cmd == (f"symcost train --model {MODEL} --hardware {GPU_B} --num-gpus 8 --tp 4 "
                   "--global-batch 64")


def test_edited_hardware_number(page, server):
    """Editing the GPU's HBM bandwidth (YAML units, GB/s) gives the API's numbers for the spec
    with that bandwidth (bytes/s)."""
    import dataclasses

    from hwspecs import load_hardware

    pg = page
    pg.goto(server + f"?model={MODEL}&hardware={GPU_A}&num_gpus=8")
    _settle(pg)
    pg.click("#hw-edit summary")
    v = _version(pg)
    box = pg.locator('[id="hw.hbm_bandwidth_gbps"]')
    box.fill("5000")
    box.dispatch_event("change")
    _settle(pg, v)
    hw = dataclasses.replace(load_hardware(GPU_A), hbm_bandwidth=5e12)
    r = predict_training(MODEL, hw, num_gpus=8)
    step, _ = _shown(pg, "step_time_s")
    assert step == pytest.approx(r.step_time, rel=1e-12)
    assert step != predict_training(MODEL, GPU_A, num_gpus=8).step_time
    assert "hw.hbm_bandwidth_gbps=5000" in pg.url


def test_invalid_layout_shows_the_rule(page, server):
    pg = page
    pg.goto(server + f"?model={MODEL}&hardware={GPU_A}")
    _settle(pg)
    v = _version(pg)
    pg.fill("#field-tp", "3")
    pg.locator("#field-tp").dispatch_event("change")
    _settle(pg, v)
    with pytest.raises(ConfigError) as exc:
        predict_training(MODEL, GPU_A, tp=3)
    err = pg.locator("#error")
    assert err.is_visible()
    assert err.inner_text() == f"error: {exc.value}"
    assert "tp" in str(exc.value) and "heads" in str(exc.value)


def test_url_reproduces_a_view_and_screenshot(page, server, tmp_path_factory):
    """A URL with a view opens that view; the formula shown is the API's value."""
    from symcost.explain import explain

    pg = page
    q = (f"?model={MODEL}&hardware={GPU_A}&num_gpus=16&tp=2&global_batch=128"
         "&recompute=selective&zero=1&view=formula&formula=mem_total&keep=tp")
    pg.goto(server + q)
    _settle(pg)
    f = explain("mem_total", MODEL, GPU_A, num_gpus=16, tp=2, global_batch=128,
                recompute="selective", zero=1, keep=["tp"])
    assert pg.locator("#view-formula").is_visible()
    assert float(pg.locator("#formula-value").get_attribute("data-value")) == f.value
    assert pg.locator("#formula-text").inner_text().strip() == f.text().strip()
    assert pg.locator("#field-recompute").input_value() == "selective"
    # the predict view of the same URL, with the search, for the screenshot
    pg.goto(server + q.replace("view=formula", "view=search"))
    _settle(pg)
    assert pg.locator("#search-top tr").count() > 1
    assert pg.locator("#pareto-svg circle.front").count() >= 1
    # docs/ui.png is rewritten only on request (SYMCOST_UPDATE_SCREENSHOT=1): a test run
    # leaves the checkout as it found it
    shot = (SCREENSHOT if os.environ.get("SYMCOST_UPDATE_SCREENSHOT") == "1"
            else tmp_path_factory.mktemp("ui") / "ui.png")
    shot.parent.mkdir(exist_ok=True)
    pg.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
