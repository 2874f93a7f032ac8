#!/usr/bin/env python3
"""Opens the web demo in headless Chromium, waits until it has drawn frames, saves a
screenshot and fails on an error page, a stalled page or a blank canvas.

Usage: screenshot.py URL OUT.png [MIN_FRAMES] [CANVAS_ID]

CANVAS_ID is the canvas checked for blankness ('view', the web demo's; the egui viewer's
is 'viewer'). The web demo must also have drawn its timeline (an SVG); a page that sets
`document.body.dataset.fps` has it printed.

Talks WebDriver to chromedriver (CHROMEDRIVER, default /usr/bin/chromedriver) with the
browser flags of the repository's webdriver.json, so it needs nothing beyond Python's
standard library. The blank check decodes the PNG here (zlib) and asks for real variety
inside the canvas: a black, white or single-colour view fails.
"""

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["value"]


def decode_png(png):
    """RGBA rows of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 4
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and colour in (2, 6), f"PNG depth {depth} colour {colour}"
            channels = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def main():
    url, out = sys.argv[1], sys.argv[2]
    min_frames = int(sys.argv[3]) if len(sys.argv) > 3 else 90
    canvas = sys.argv[4] if len(sys.argv) > 4 else "view"
    needs_svg = canvas == "view"
    with open(os.path.join(ROOT, "webdriver.json")) as f:
        caps = json.load(f)
    options = caps["goog:chromeOptions"]
    options["args"] = options["args"] + ["--headless", "--no-sandbox",
                                         "--disable-dev-shm-usage", "--window-size=1280,800"] + os.environ.get("CHROME_EXTRA", "").split()
    port = free_port()
    driver = subprocess.Popen([os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"),
                               f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    session = None
    try:
        for _ in range(100):
            try:
                call(base, "GET", "/status")
                break
            except OSError:
                time.sleep(0.1)
        session = call(base, "POST", "/session",
                       {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options,
                                                         "goog:loggingPrefs": {"browser": "ALL"}}}})["sessionId"]
        s = f"/session/{session}"
        call(base, "POST", s + "/url", {"url": url})
        deadline = time.time() + float(os.environ.get("SCREENSHOT_TIMEOUT", "240"))
        state = {}
        while time.time() < deadline:
            state = call(base, "POST", s + "/execute/sync", {
                "script": "return {frames: document.body.dataset.frames || '0', "
                          "error: document.body.dataset.error || '', "
                          "stats: (document.getElementById('stats') || {}).textContent || '', "
                          "svg: !!document.querySelector('#timeline svg'), "
                          "fps: document.body.dataset.fps || '', "
                          "canvas: document.getElementById(arguments[0]).getBoundingClientRect().toJSON()};",
                "args": [canvas]})
            ready = int(state["frames"]) >= min_frames and (state["svg"] or not needs_svg)
            if state["error"] or ready:
                break
            time.sleep(1)
        png = base64.b64decode(call(base, "GET", s + "/screenshot"))
        with open(out, "wb") as f:
            f.write(png)
        if state.get("error"):
            try:
                for entry in call(base, "POST", s + "/se/log", {"type": "browser"})[-20:]:
                    print("console:", entry.get("message", "")[:400])
            except OSError:
                pass
            sys.exit(f"the page reports an error: {state['error']}")
        if int(state.get("frames", "0")) < min_frames or (needs_svg and not state.get("svg")):
            sys.exit(f"the page stalled: {state}")
        width, height, channels, rows = decode_png(png)
        box = state["canvas"]
        x0, y0 = int(box["x"]) + 2, int(box["y"]) + 2
        x1, y1 = min(width, int(box["x"] + box["width"]) - 2), min(height, int(box["y"] + box["height"]) - 2)
        colours = set()
        for y in range(y0, y1, 4):
            row = rows[y]
            for x in range(x0, x1, 4):
                colours.add(row[x * channels:x * channels + 3])
        print(f"screenshot {out}: {width}x{height}, {state['frames']} frames, "
              f"{len(colours)} distinct colours in the canvas")
        if len(colours) < 64:
            sys.exit(f"the canvas looks blank ({len(colours)} colours)")
        if state.get("fps"):
            print(f"frames_per_second_panning: {state['fps']}")
        print(state["stats"])
    finally:
        if session:
            try:
                call(base, "DELETE", f"/session/{session}")
            except OSError:
                pass
        driver.terminate()


if __name__ == "__main__":
    main()
