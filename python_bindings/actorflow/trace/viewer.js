// actorflow trace viewer (inlined into the page by timeline.py; no network, no libraries).
// Data: the JSON in #trace-data (timeline.py page_data). Times are µs from the trace start.
// Drawing picks, per lane, the cheapest faithful form for the visible window:
//   few events (<= 2 per pixel)   -> each event as a rectangle
//   up to EVENTS_PER_FRAME events -> per-pixel occupancy computed from the events
//   more                          -> the precomputed occupancy level whose buckets are >= 1 px
(function () {
  "use strict";
  const ROW = 30;                       // must match .lane / .group-name height in viewer.css
  const EVENTS_PER_FRAME = 300000;
  const INPUT_COLOR = "#c3cedc";        // waiting: input not ready (starved by upstream)
  const BACKPRESSURE_COLOR = "#ef6f4c"; // stalled: output registers full (held back downstream)
  const WORKER_COLOR = "#e8c547";       // ready to act, but every worker thread was busy
  const D = JSON.parse(document.getElementById("trace-data").textContent);
  const K = D.kinds;

  function decode(b64, Type) {
    const bin = atob(b64);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Type(bytes.buffer);
  }

  const E = D.events && {
    offsets: D.events.offsets, ts: decode(D.events.ts, Float64Array), dur: decode(D.events.dur, Float32Array),
    iter: decode(D.events.iter, Int32Array), name: decode(D.events.name, Uint16Array),
    kind: decode(D.events.kind, Uint8Array),
  };
  const B0 = D.levels.buckets;
  const levels = [decode(D.levels.data, Uint8Array)];  // levels[k]: lanes x (B0 >> k) x 3 shares, 0..255

  function level(k) {
    // Level k halves level k-1: each bucket is the mean of two finer ones.
    while (levels.length <= k) {
      const prev = levels[levels.length - 1], nPrev = B0 >> (levels.length - 1), n = nPrev >> 1;
      const next = new Uint8Array(D.lanes.length * n * 3);
      for (let l = 0; l < D.lanes.length; l++)
        for (let b = 0; b < n; b++)
          for (let c = 0; c < 3; c++) {
            const i = (l * nPrev + 2 * b) * 3 + c;
            next[(l * n + b) * 3 + c] = (prev[i] + prev[i + 3] + 1) >> 1;
          }
      levels.push(next);
    }
    return levels[k];
  }

  const nameIndex = new Map(D.names.map((n, i) => [n, i]));
  const laneColor = D.lanes.map((lane, i) => lane.color !== null ? D.palette[lane.color]
    : D.palette[D.nameColors[nameIndex.has(lane.op) ? nameIndex.get(lane.op) : i] % D.palette.length]);
  function actColor(lane, nameId) {
    return D.colorBy === "actor" ? laneColor[lane] : D.palette[D.nameColors[nameId]];
  }

  // ---- DOM: header, legend, labels (one .lane element per actor, grouped by machine/device)
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };
  $("title").textContent = D.title;
  const S = D.summary;
  $("facts").textContent = [D.job && `job ${D.job}`, `${D.lanes.length} actors`, `${S.events} events`,
    `span ${fmt(D.span)}`, `${S.iterations} iterations (${S.rate.toFixed(1)}/s)`,
    S.bottleneck && `bottleneck: ${S.bottleneck}`].filter(Boolean).join(" · ");
  for (const line of S.advice) $("advice").appendChild(el("div", null, "▸ " + line));
  const legend = $("legend");
  function key(color, text) {
    const k = el("span", "key");
    const swatch = el("i");
    swatch.style.background = color;
    k.append(swatch, text);
    legend.appendChild(k);
  }
  if (D.colorBy === "actor") key(laneColor[0] || D.palette[0], "act (colour per actor)");
  else {
    const ops = new Set();
    D.lanes.forEach((lane) => ops.add(lane.op));
    for (const op of ops) if (nameIndex.has(op)) key(D.palette[D.nameColors[nameIndex.get(op)]], op);
  }
  key(INPUT_COLOR, "waiting: input not ready");
  key(BACKPRESSURE_COLOR, "stalled: output registers full (backpressure)");
  key(WORKER_COLOR, "ready, waiting for a worker thread");

  const rows = [];  // {group} or {lane}
  const labels = $("labels");
  for (const g of D.groups) {
    rows.push({ group: g.name });
    const group = el("div", "group");
    group.appendChild(el("div", "group-name", g.name));
    for (const i of g.lanes) {
      rows.push({ lane: i });
      const lane = D.lanes[i];
      const row = el("div", "lane" + (lane.name === S.bottleneck ? " bottleneck" : ""));
      row.dataset.lane = i;
      row.dataset.actor = lane.name;
      row.title = `${lane.name} (${lane.op})`;
      row.appendChild(el("span", "name", lane.name));
      row.appendChild(el("span", "stats", `busy ${lane.busy.toFixed(0)}% · input ${lane.input.toFixed(0)}% · ` +
        `backpr ${lane.backpressure.toFixed(0)}% · ${lane.acts} acts`));
      group.appendChild(row);
    }
    labels.appendChild(group);
  }

  // ---- view state
  const body = $("body"), plot = $("plot"), canvas = $("canvas"), axis = $("axis"), tip = $("tooltip");
  let t0 = 0, t1 = Math.max(D.span, 1e-3);
  let selected = null;   // {iteration, perLane: [[event index...]...]}
  let W = 0, H = 0;

  function fmt(us) {
    const a = Math.abs(us);
    if (a === 0) return "0";
    if (a >= 1e6) return (us / 1e6).toFixed(3) + " s";
    if (a >= 1e3) return (us / 1e3).toFixed(3) + " ms";
    return us.toFixed(a < 10 ? 3 : 1) + " µs";
  }
  function lowerBound(arr, lo, hi, t) {  // first index in [lo, hi) with arr[i] >= t
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (arr[mid] < t) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  const xOf = (t) => (t - t0) / (t1 - t0) * W;
  const tOf = (x) => t0 + x / W * (t1 - t0);

  function resize() {
    const dpr = window.devicePixelRatio || 1;
    W = Math.max(plot.clientWidth, 10);
    H = Math.max(Math.min(body.clientHeight, rows.length * ROW), ROW);
    for (const [c, w, h] of [[canvas, W, H], [axis, W, 22]]) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
      c.style.width = w + "px";
      c.style.height = h + "px";
      c.getContext("2d").setTransform(dpr, 0, 0, dpr, 0, 0);
    }
    plot.style.height = rows.length * ROW + "px";
  }

  // Stacked shares of one column: act at the bottom, then backpressure, then input waits.
  function stack(ctx, x, w, y, h, act, input, bp, color) {
    let base = y + h;
    const parts = [[act, color], [bp, BACKPRESSURE_COLOR], [input, INPUT_COLOR]];
    for (const [share, c] of parts) {
      if (share <= 0.004) continue;
      const ph = Math.min(share, 1) * h;
      ctx.fillStyle = c;
      ctx.fillRect(x, base - ph, w, ph);
      base -= ph;
    }
  }

  function drawLane(ctx, i, y) {
    const top = y + 3, h = ROW - 7;
    if (E) {
      const a = E.offsets[i], b = E.offsets[i + 1];
      const lo = Math.max(a, lowerBound(E.ts, a, b, t0) - 1), hi = lowerBound(E.ts, lo, b, t1);
      if (hi - lo <= 2 * W) return drawEvents(ctx, i, lo, hi, top, h);
      if (hi - lo <= EVENTS_PER_FRAME) return drawPixels(ctx, i, lo, hi, top, h);
    }
    drawLevels(ctx, i, top, h);
  }

  function drawEvents(ctx, i, lo, hi, top, h) {
    for (let pass = 0; pass < 2; pass++) {  // waits first, acts over them
      for (let e = lo; e < hi; e++) {
        const kind = E.kind[e], isAct = kind === K.act || kind === K.other;
        if (isAct !== (pass === 1)) continue;
        const x0 = xOf(E.ts[e]), x1 = xOf(E.ts[e] + E.dur[e]);
        if (x1 < 0 || x0 > W) continue;
        const w = Math.max(x1 - x0, isAct ? 1 : 0.5);
        ctx.fillStyle = isAct ? actColor(i, E.name[e]) : kind === K.input ? INPUT_COLOR
          : kind === K.worker ? WORKER_COLOR : BACKPRESSURE_COLOR;
        if (isAct) ctx.fillRect(x0, top, w, h);
        else ctx.fillRect(x0, top + h * 0.25, w, h * 0.75);  // waits lower: acts stand out
        if (isAct && w > 6) {
          ctx.strokeStyle = "#0004";
          ctx.strokeRect(x0 + 0.5, top + 0.5, w - 1, h - 1);
        }
      }
    }
  }

  function drawPixels(ctx, i, lo, hi, top, h) {
    const share = [new Float64Array(W), new Float64Array(W), new Float64Array(W)];
    const perPixel = (t1 - t0) / W;
    for (let e = lo; e < hi; e++) {
      const kind = E.kind[e], c = kind === K.input ? 1 : kind === K.backpressure ? 2 : kind === K.worker ? -1 : 0;
      if (c < 0) continue;  // worker waits are drawn as events only (the occupancy has no channel for them)
      let s = Math.max(E.ts[e], t0);
      const end = Math.min(E.ts[e] + E.dur[e], t1);
      while (s < end) {  // spread the event's time over the columns it covers
        const col = Math.min(Math.floor((s - t0) / perPixel), W - 1);
        const colEnd = Math.min(t0 + (col + 1) * perPixel, end);
        share[c][col] += (colEnd - s) / perPixel;
        if (colEnd <= s) break;
        s = colEnd;
      }
    }
    for (let x = 0; x < W; x++) stack(ctx, x, 1, top, h, share[0][x], share[1][x], share[2][x], laneColor[i]);
  }

  function drawLevels(ctx, i, top, h) {
    const bucketUs0 = D.levels.width;
    let k = 0;
    while ((B0 >> (k + 1)) >= 1 && bucketUs0 * (1 << k) / (t1 - t0) * W < 1) k++;
    const data = level(k), n = B0 >> k, width = bucketUs0 * (1 << k);
    const first = Math.max(0, Math.floor(t0 / width)), last = Math.min(n - 1, Math.floor(t1 / width));
    for (let bkt = first; bkt <= last; bkt++) {
      const o = (i * n + bkt) * 3, x0 = xOf(bkt * width), x1 = xOf((bkt + 1) * width);
      stack(ctx, x0, Math.max(x1 - x0, 1), top, h, data[o] / 255, data[o + 1] / 255, data[o + 2] / 255, laneColor[i]);
    }
  }

  function drawSelection(ctx, first, last) {
    ctx.fillStyle = "rgba(255,255,255,0.55)";  // dim everything, then redraw the iteration's acts
    ctx.fillRect(0, 0, W, H);
    for (let r = first; r <= last; r++) {
      const lane = rows[r].lane;
      if (lane === undefined) continue;
      const y = r * ROW - body.scrollTop + 2, h = ROW - 5;
      for (const e of selected.perLane[lane]) {
        const x0 = xOf(E.ts[e]), x1 = xOf(E.ts[e] + E.dur[e]);
        if (x1 < 0 || x0 > W) continue;
        const w = Math.max(x1 - x0, 3);
        ctx.fillStyle = actColor(lane, E.name[e]);
        ctx.fillRect(x0, y, w, h);
        ctx.lineWidth = 2;
        ctx.strokeStyle = "#000";
        ctx.strokeRect(x0, y, w, h);
        ctx.lineWidth = 1;
      }
    }
  }

  function drawAxis() {
    const ctx = axis.getContext("2d");
    ctx.clearRect(0, 0, W, 22);
    ctx.fillStyle = "#fafafa";
    ctx.fillRect(0, 0, W, 22);
    const raw = (t1 - t0) / Math.max(W / 110, 1), p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    ctx.fillStyle = "#333";
    ctx.strokeStyle = "#999";
    ctx.font = "10px sans-serif";
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const x = Math.round(xOf(t)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(x, 14);
      ctx.lineTo(x, 22);
      ctx.stroke();
      ctx.fillText(fmt(Math.abs(t) < step / 1e6 ? 0 : t).replace(/\.?0+ /, " "), x + 2, 11);
    }
  }

  function draw() {
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, W, H);
    const scroll = body.scrollTop;
    const first = Math.max(0, Math.floor(scroll / ROW)), last = Math.min(rows.length - 1, Math.floor((scroll + H) / ROW));
    for (let r = first; r <= last; r++) {
      const y = r * ROW - scroll;
      if (rows[r].group !== undefined) {
        ctx.fillStyle = "#eef1f5";
        ctx.fillRect(0, y, W, ROW);
      } else {
        ctx.fillStyle = r % 2 ? "#fff" : "#fbfbfd";
        ctx.fillRect(0, y, W, ROW);
        drawLane(ctx, rows[r].lane, y);
      }
      ctx.fillStyle = "#e4e4ea";
      ctx.fillRect(0, y + ROW - 1, W, 1);
    }
    if (selected) drawSelection(ctx, first, last);
    drawAxis();
  }

  // ---- interaction
  function eventAt(lane, x) {
    if (!E) return -1;
    const a = E.offsets[lane], b = E.offsets[lane + 1], t = tOf(x), slack = 2 * (t1 - t0) / W;
    let best = -1, bestDistance = Infinity;
    const i = lowerBound(E.ts, a, b, t);
    for (let e = Math.max(a, i - 2); e < Math.min(b, i + 2); e++) {
      const s = E.ts[e], end = s + E.dur[e];
      const distance = t < s ? s - t : t > end ? t - end : 0;
      // Prefer acts when a wait and an act are equally close (acts are what people click).
      const score = distance - (E.kind[e] === K.act ? 1e-9 : 0);
      if (distance <= slack && score < bestDistance) {
        best = e;
        bestDistance = score;
      }
    }
    return best;
  }

  function rowAt(clientY) {
    const r = Math.floor((clientY - canvas.getBoundingClientRect().top + body.scrollTop) / ROW);
    return r >= 0 && r < rows.length ? rows[r].lane : undefined;
  }

  function describe(lane, x) {
    const L = D.lanes[lane];
    const head = `${L.name} — ${L.op}${L.kind ? " (" + L.kind + ")" : ""}`;
    const regs = L.registers.length ? "registers: " + L.registers.map((r) =>
      `${r.name} ×${r.register_num}` + (r.consumers.length ? " → " + r.consumers.join(", ") : "")).join("; ") : "";
    const inputs = L.inputs.length ? "inputs from: " + L.inputs.join(", ") : "";
    const e = eventAt(lane, x);
    if (e >= 0) {
      const kind = E.kind[e];
      const what = kind === K.act || kind === K.other ? `act: ${D.names[E.name[e]]}`
        : kind === K.input ? "wait: input not ready"
        : kind === K.worker ? "wait: worker busy (ready to act, every worker thread was running other actors)"
        : "wait: output registers full (backpressure)";
      return [head, what, E.iter[e] >= 0 ? `iteration ${E.iter[e]}` : "", `start ${fmt(E.ts[e])}`,
        `duration ${fmt(E.dur[e])}`, regs, inputs].filter(Boolean).join("\n");
    }
    // Between events or zoomed out: the share of time in the pixel under the cursor.
    const k0 = Math.floor(tOf(x) / D.levels.width), k1 = Math.max(k0, Math.floor(tOf(x + 1) / D.levels.width));
    const share = [0, 0, 0];
    const data = levels[0];
    let n = 0;
    for (let k = Math.max(k0, 0); k <= Math.min(k1, B0 - 1); k++, n++)
      for (let c = 0; c < 3; c++) share[c] += data[(lane * B0 + k) * 3 + c] / 255;
    const pct = (c) => (n ? 100 * share[c] / n : 0).toFixed(0) + "%";
    return [head, `at ${fmt(tOf(x))}: busy ${pct(0)}, input not ready ${pct(1)}, backpressure ${pct(2)}`,
      `whole trace: busy ${L.busy.toFixed(1)}%, input ${L.input.toFixed(1)}%, backpressure ` +
      `${L.backpressure.toFixed(1)}%, ${L.acts} acts, mean ${fmt(L.mean)}, p99 ${fmt(L.p99)}`, regs, inputs]
      .filter(Boolean).join("\n");
  }

  function select(iteration) {
    if (iteration === null || (selected && selected.iteration === iteration)) {
      selected = null;
      $("selection").textContent = "";
      return;
    }
    const perLane = D.lanes.map((_, lane) => {
      const out = [];
      for (let e = E.offsets[lane]; e < E.offsets[lane + 1]; e++)
        if (E.iter[e] === iteration && (E.kind[e] === K.act || E.kind[e] === K.other)) out.push(e);
      return out;
    });
    selected = { iteration, perLane };
    const spans = perLane.flat().map((e) => [E.ts[e], E.ts[e] + E.dur[e]]);
    const from = Math.min(...spans.map((s) => s[0])), to = Math.max(...spans.map((s) => s[1]));
    $("selection").textContent = `iteration ${iteration}: ${fmt(from)} → ${fmt(to)} (${fmt(to - from)} end to end)`;
  }

  let drag = null, pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); toHash(); });
  }
  canvas.addEventListener("wheel", (ev) => {
    if (ev.shiftKey) return;  // shift+wheel scrolls the lanes
    ev.preventDefault();
    const x = ev.clientX - canvas.getBoundingClientRect().left, tm = tOf(x);
    const factor = Math.exp(Math.max(-300, Math.min(300, ev.deltaY)) * 0.0025);
    const width = Math.min(Math.max((t1 - t0) * factor, 1e-3), D.span * 1.05);
    t0 = tm - (tm - t0) / (t1 - t0) * width;
    t1 = t0 + width;
    clampView();
    redraw();
  }, { passive: false });
  function clampView() {
    const width = t1 - t0, pad = D.span * 0.025;
    if (t0 < -pad) { t0 = -pad; t1 = t0 + width; }
    if (t1 > D.span + pad) { t1 = D.span + pad; t0 = t1 - width; }
  }
  canvas.addEventListener("mousedown", (ev) => {
    drag = { x: ev.clientX, y: ev.clientY, t0, t1, scroll: body.scrollTop, moved: false };
    canvas.classList.add("dragging");
  });
  window.addEventListener("mousemove", (ev) => {
    if (drag) {
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      const dt = dx / W * (drag.t1 - drag.t0);
      t0 = drag.t0 - dt;
      t1 = drag.t1 - dt;
      clampView();
      body.scrollTop = drag.scroll - dy;
      tip.style.display = "none";
      redraw();
      return;
    }
    if (ev.target !== canvas) { tip.style.display = "none"; return; }
    const lane = rowAt(ev.clientY);
    if (lane === undefined) { tip.style.display = "none"; return; }
    tip.textContent = describe(lane, ev.clientX - canvas.getBoundingClientRect().left);
    tip.style.display = "block";
    const right = ev.clientX + 14 + tip.offsetWidth > window.innerWidth;
    tip.style.left = (right ? ev.clientX - 14 - tip.offsetWidth : ev.clientX + 14) + "px";
    tip.style.top = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 4) + "px";
  });
  window.addEventListener("mouseup", (ev) => {
    if (!drag) return;
    const click = !drag.moved;
    drag = null;
    canvas.classList.remove("dragging");
    if (!click || !E || ev.target !== canvas) return;
    const lane = rowAt(ev.clientY);
    const e = lane === undefined ? -1 : eventAt(lane, ev.clientX - canvas.getBoundingClientRect().left);
    select(e >= 0 && E.iter[e] >= 0 ? E.iter[e] : null);
    redraw();
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  body.addEventListener("scroll", redraw);
  window.addEventListener("resize", () => { resize(); draw(); });
  $("reset").addEventListener("click", () => { t0 = 0; t1 = Math.max(D.span, 1e-3); redraw(); });

  // Test hooks for tests/python/test_trace_timeline.py (headless Chromium can't move a mouse).
  window.actorflowTrace = { select: (i) => { select(i); draw(); }, zoom: (a, b) => { t0 = a; t1 = b; draw(); },
    selectedLanes: () => selected ? selected.perLane.filter((l) => l.length).length : 0 };

  // The view lives in the URL (#t0=..&t1=..&iteration=..): a link or reload shows the same thing.
  function fromHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    const a = parseFloat(h.get("t0")), b = parseFloat(h.get("t1")), it = parseInt(h.get("iteration"), 10);
    if (isFinite(a) && isFinite(b) && b > a) { t0 = a; t1 = b; }
    if (E && isFinite(it)) select(it);
  }
  let hashTimer = 0;
  function toHash() {
    clearTimeout(hashTimer);
    hashTimer = setTimeout(() => {
      const h = `t0=${t0.toFixed(3)}&t1=${t1.toFixed(3)}` + (selected ? `&iteration=${selected.iteration}` : "");
      try { history.replaceState(null, "", "#" + h); } catch (e) { /* some file:// contexts refuse */ }
    }, 300);
  }
  fromHash();
  resize();
  draw();  // synchronously: the first frame exists once the page has loaded
})();
