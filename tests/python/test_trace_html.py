"""`view` renders in a real browser: headless Chromium loads the self-contained page from a file
(no network), the DOM holds one lane element per actor, and the screenshot shows a drawn
timeline (not a blank page)."""

import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

from trace_cli import CLI  # noqa: E402
from actorflow.trace import synthetic  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the viewer has no session, and conftest's needs the compiled runtime."""
    yield


def chromium(tmp_path, url, *mode):
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run `bash scripts/setup.sh --test`")
    profile = tmp_path / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *mode, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def read_png(path):
    """(width, height, rows of RGB(A) bytes): a minimal decoder for Chromium's 8-bit RGB/RGBA PNGs."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, up_left = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    work = tmp_path_factory.mktemp("html")
    stages = synthetic.chain(slow_stage="dense", slow_factor=4.0)
    stages.append(synthetic.Stage("gpu_copy", "copy", 15.0, [2], device="gpu:0"))  # a second device group
    trace = work / "trace.json"
    synthetic.write_trace(str(trace), stages, 3000)
    out = work / "trace.html"
    done = subprocess.run([*CLI, "view", str(trace), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out, [s.name for s in stages]


def test_page_is_self_contained(page):
    out, _ = page
    text = out.read_text()
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|https?://", text), "the page must not load anything"
    assert text.count("<canvas") == 2


def test_dom_has_one_lane_per_actor(page, tmp_path):
    out, actors = page
    dom = chromium(tmp_path, out.as_uri(), "--dump-dom")
    lanes = re.findall(r'<div class="lane[^"]*" data-lane="\d+" data-actor="([^"]+)"', dom)
    assert sorted(lanes) == sorted(actors)
    groups = re.findall(r'<div class="group-name">([^<]+)</div>', dom)
    assert groups == ["machine 0 cpu:0", "machine 0 gpu:0"]
    assert re.search(r'class="lane bottleneck"[^>]*data-actor="dense"', dom)
    assert "bottleneck: dense" in dom


def pixel_stats(png):
    width, height, channels, rows = read_png(png)
    colors = set()
    for y in range(0, height, 4):
        row = rows[y]
        for x in range(0, width * channels, 4 * channels):
            colors.add(bytes(row[x:x + 3]))
    return width, height, colors, rows, channels


def test_screenshot_is_not_blank(page, tmp_path):
    out, _ = page
    png = tmp_path / "shot.png"
    chromium(tmp_path, out.as_uri(), f"--screenshot={png}", "--window-size=1280,800")
    width, height, colors, rows, channels = pixel_stats(png)
    assert (width, height) == (1280, 800)
    assert len(colors) > 20, f"only {len(colors)} colours: blank page?"
    # The slow stage's lane is drawn in its op colour (#edc948 for "matmul", the third op) at low
    # zoom: look for that colour in the canvas area (right of the 240 px labels).
    def has(rgb):
        target = bytes(rgb)
        for row in rows:
            for x in range(260 * channels, width * channels, channels):
                if row[x:x + 3] == target:
                    return True
        return False
    assert has((0xed, 0xc9, 0x48)) or has((0xb0, 0x7a, 0xa1)), "no act colour in the timeline"
    assert has((0xef, 0x6f, 0x4c)), "no backpressure colour in the timeline"


def test_zoomed_in_selection_renders_individual_events(page, tmp_path):
    # The URL fragment sets the view: a 400 µs window and iteration 1500 selected, drawn as
    # individual outlined acts (the page reports the iteration's end-to-end time).
    out, _ = page
    url = out.as_uri() + "#t0=100000&t1=100400&iteration=1500"
    dom = chromium(tmp_path, url, "--dump-dom")
    assert re.search(r'<span id="selection">iteration 1500: [^<]*end to end\)</span>', dom), "selection missing"
    png = tmp_path / "zoom.png"
    chromium(tmp_path, url, f"--screenshot={png}", "--window-size=1280,800")
    _, _, colors, _, _ = pixel_stats(png)
    assert len(colors) > 10
