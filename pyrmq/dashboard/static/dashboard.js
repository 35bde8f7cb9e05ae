// Live charts: each <figure class="chart" data-url data-path data-kind data-unit>
// polls its JSON endpoint (one fetch per URL and tick, shared by the figures
// that use it) and draws the last POINTS values as an SVG line. data-kind
// "rate" plots the change per second of a counter, "value" the value itself.
"use strict";
(function () {
  const PERIOD_MS = 5000, POINTS = 60, W = 480, H = 140, PAD = 4;
  const SVG = "http://www.w3.org/2000/svg";

  function pick(obj, path) {
    return path.split(".").reduce((o, k) => (o == null ? undefined : o[k]), obj);
  }
  function fmt(v) {
    if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (Math.abs(v) >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return Number.isInteger(v) ? String(v) : v.toFixed(1);
  }
  function setup(fig) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const axis = document.createElementNS(SVG, "line");
    axis.setAttribute("x1", PAD); axis.setAttribute("x2", W - PAD);
    axis.setAttribute("y1", H - PAD); axis.setAttribute("y2", H - PAD);
    axis.setAttribute("class", "axis");
    const line = document.createElementNS(SVG, "polyline");
    const dot = document.createElementNS(SVG, "circle");
    dot.setAttribute("r", "3");
    svg.append(axis, line, dot);
    const status = document.createElement("div");
    status.className = "chart-status";
    status.textContent = "waiting for the first samples…";
    fig.insertBefore(svg, fig.firstChild);
    fig.appendChild(status);
    return { fig, line, dot, status, points: [], last: null,
             path: fig.dataset.path, kind: fig.dataset.kind, unit: fig.dataset.unit || "" };
  }
  function draw(c) {
    const ys = c.points.map((p) => p.y);
    if (ys.length === 0) return;
    const top = Math.max(...ys), max = Math.max(1, top);
    const n = Math.max(1, c.points.length - 1);  // spread over the width until it is full
    const pts = c.points.map((p, i) => {
      const x = PAD + (c.points.length === 1 ? 1 : i / n) * (W - 2 * PAD);
      const y = H - PAD - (p.y / max) * (H - 2 * PAD);
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    c.line.setAttribute("points", pts.join(" "));
    const [x, y] = pts[pts.length - 1].split(",");
    c.dot.setAttribute("cx", x); c.dot.setAttribute("cy", y);
    c.status.textContent = `now ${fmt(ys[ys.length - 1])} ${c.unit} · max ${fmt(top)} ${c.unit}` +
      ` · last ${ys.length} samples`;
    c.fig.dataset.samples = String(ys.length);
    c.fig.dataset.last = String(ys[ys.length - 1]);
  }
  function feed(c, data) {
    const v = Number(pick(data, c.path)), t = Number(data.ts);
    if (!Number.isFinite(v) || !Number.isFinite(t)) {
      c.status.textContent = "no value in the answer";
      return;
    }
    let y = v;
    if (c.kind === "rate") {
      const prev = c.last;
      c.last = { v, t };
      if (!prev || t <= prev.t) return;
      y = Math.max(0, ((v - prev.v) * 1000) / (t - prev.t));
    }
    c.points.push({ t, y });
    if (c.points.length > POINTS) c.points.shift();
    draw(c);
  }
  async function tick(url, charts) {
    try {
      const resp = await fetch(url, { headers: { Accept: "application/json" } });
      const data = await resp.json();
      if (!resp.ok) {
        charts.forEach((c) => (c.status.textContent = data.error || resp.statusText));
        return;
      }
      charts.forEach((c) => feed(c, data));
    } catch (e) {
      charts.forEach((c) => (c.status.textContent = "dashboard not answering"));
    }
  }
  function start() {
    const byUrl = new Map();
    document.querySelectorAll("figure.chart").forEach((fig) => {
      const url = fig.dataset.url;
      if (!byUrl.has(url)) byUrl.set(url, []);
      byUrl.get(url).push(setup(fig));
    });
    byUrl.forEach((charts, url) => {
      const run = () => { if (!document.hidden) tick(url, charts); };
      run();
      setInterval(run, PERIOD_MS);
    });
  }
  document.addEventListener("DOMContentLoaded", start);
})();
