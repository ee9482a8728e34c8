"""The built documentation as a reader sees it: headless Chromium opens the gallery index, the tour example and an
API page, and each must render with its images loaded and no console error.

The site is built by ``python -m sphinx -W -b html docs docs/_build/html`` (.ci/run's docs step); this test builds
nothing. It reads the site from ``ATTNKIT_DOCS_HTML`` (else ``docs/_build/html``) and skips, saying why, only when
the site or Debian's ``chromium`` is absent. Chromium is driven over its DevTools protocol (``websockets``, in the
``docs`` extra); each page's screenshot is saved to ``ATTNKIT_DOCS_SCREENSHOTS`` (else pytest's tmp_path).
"""

import base64
import html.parser
import json
import os
import pathlib
import shutil
import subprocess
import time
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("ATTNKIT_DOCS_HTML", ROOT / "docs" / "_build" / "html"))
# (page, text the page must show, the fewest images it must hold)
PAGES = [
    ("auto_examples/index.html", "A tour of attnkit", 1),
    ("auto_examples/plot_tour.html", "TransformerClassifier test accuracy", 1),
    ("api/generated/attnkit.TransformerClassifier.html", "attention_maps", 0),
]
# Wait for every image to have loaded or failed (lazy ones are told to load now), then report what each got.
IMAGES_JS = """
(async () => {
  const images = Array.from(document.images);
  for (const img of images) { if (img.loading === "lazy") img.loading = "eager"; }
  await Promise.all(images.map(img => img.complete ? null : new Promise(done => {
    img.addEventListener("load", done); img.addEventListener("error", done); setTimeout(done, 10000);
  })));
  return JSON.stringify({
    title: document.title,
    text: document.body ? document.body.innerText : "",
    images: images.map(img => ({src: img.currentSrc || img.src, width: img.naturalWidth})),
  });
})()
"""


class _Images(html.parser.HTMLParser):
    """The ``src`` of every <img> of a page."""

    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs).get("src", ""))


@pytest.mark.parametrize("page, text, min_images", PAGES, ids=[p for p, _, _ in PAGES])
def test_the_built_page_exists_with_its_image_files(page, text, min_images):
    """Without a browser: the page is in the site and every image it names is a file there."""
    if not (SITE / "index.html").is_file():
        pytest.skip(f"no built site at {SITE}: python -m sphinx -W -b html docs docs/_build/html")
    path = SITE / page
    assert path.is_file(), f"{page} is missing from the built site {SITE}"
    images = _Images()
    images.feed(path.read_text(encoding="utf-8"))
    local = [src for src in images.sources if not urllib.parse.urlparse(src).scheme]
    assert len(local) >= min_images, f"{page}: {len(local)} local images, expected >= {min_images}"
    missing = [src for src in local if not (path.parent / urllib.parse.unquote(src)).is_file()]
    assert not missing, f"{page}: images that are not in the site: {missing}"


def _chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevTools:
    """A page target of a headless Chromium, spoken to over the DevTools protocol (one websocket)."""

    def __init__(self, socket):
        self._socket = socket
        self._next_id = 0
        self.events = []

    def call(self, method, timeout=60, **params):
        self._next_id += 1
        call_id = self._next_id
        self._socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for(self, event, timeout=60):
        for message in self.events:
            if message["method"] == event:
                return message
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if "method" in message:
                self.events.append(message)
                if message["method"] == event:
                    return message


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = _chromium()
    if chromium is None:
        pytest.skip("no Chromium: apt-get install chromium (Debian's package) to run the browser test")
    if not (SITE / "index.html").is_file():
        pytest.skip(f"no built site at {SITE}: python -m sphinx -W -b html docs docs/_build/html "
                    "(or set ATTNKIT_DOCS_HTML)")
    pytest.importorskip("websockets", reason="the browser test speaks DevTools over websockets: pip install websockets")
    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            assert process.poll() is None, f"chromium exited with {process.returncode} before listening"
            assert time.monotonic() < deadline, "chromium wrote no DevToolsActivePort in 60 s"
            time.sleep(0.1)
        port, browser_path = port_file.read_text().split()[:2]  # the port, then the browser target's path
        yield f"ws://127.0.0.1:{port}", browser_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _visit(tab, path, folder):
    """Open ``path`` in the tab, wait for its images, save a screenshot in ``folder``; what the page shows."""
    for domain in ("Runtime", "Log", "Page"):
        tab.call(f"{domain}.enable")
    tab.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    tab.call("Page.navigate", url=path.as_uri())
    tab.wait_for("Page.loadEventFired")
    result = tab.call("Runtime.evaluate", expression=IMAGES_JS, awaitPromise=True, returnByValue=True)
    assert "exceptionDetails" not in result, result["exceptionDetails"]
    time.sleep(0.5)  # late console messages (scripts that run after load)
    tab.call("Runtime.evaluate", expression="0")  # collects the events that arrived meanwhile
    size = tab.call("Page.getLayoutMetrics")["cssContentSize"]  # the whole page, up to 8,000 pixels down
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 8000), "scale": 1}
    shot = tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
    folder.mkdir(parents=True, exist_ok=True)
    name = str(path.relative_to(SITE)).replace(os.sep, "_").removesuffix(".html")
    (folder / f"{name}.png").write_bytes(base64.b64decode(shot))
    return json.loads(result["result"]["value"])


@pytest.mark.parametrize("page, text, min_images", PAGES, ids=[p for p, _, _ in PAGES])
def test_page_renders_with_its_images_and_no_console_error(browser, page, text, min_images, tmp_path):
    path = SITE / page
    assert path.is_file(), f"{page} is missing from the built site {SITE}"
    address, browser_path = browser
    from websockets.sync.client import connect

    with connect(address + browser_path, open_timeout=30) as browser_socket:
        root = DevTools(browser_socket)
        target = root.call("Target.createTarget", url="about:blank")["targetId"]
        try:
            with connect(f"{address}/devtools/page/{target}", max_size=64 * 2**20, open_timeout=30) as page_socket:
                tab = DevTools(page_socket)
                shown = _visit(tab, path, pathlib.Path(os.environ.get("ATTNKIT_DOCS_SCREENSHOTS", tmp_path)))
        finally:
            root.call("Target.closeTarget", targetId=target)

    errors = []
    for event in tab.events:
        params = event.get("params", {})
        if event["method"] == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(" ".join(str(arg.get("value", arg.get("description", ""))) for arg in params["args"]))
        elif event["method"] == "Runtime.exceptionThrown":
            errors.append(params["exceptionDetails"].get("exception", {}).get("description")
                          or params["exceptionDetails"].get("text"))
        elif event["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(f"{params['entry'].get('text')} {params['entry'].get('url', '')}".strip())
    assert not errors, f"{page}: console errors: {errors}"
    assert "attnkit" in shown["title"], f"{page}: title {shown['title']!r}"
    assert text in shown["text"], f"{page}: the page does not show {text!r}"
    assert len(shown["images"]) >= min_images, f"{page}: {len(shown['images'])} images, expected >= {min_images}"
    broken = [image["src"] for image in shown["images"] if image["width"] <= 0]
    assert not broken, f"{page}: images that did not load: {broken}"
