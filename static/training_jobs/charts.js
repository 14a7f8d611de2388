// The training charts, interactive (uPlot: static/vendor/uplot). Every <figure data-chart> that the server drew as
// SVG (templates/training_jobs/_curve.html) gets a chart drawn from the JSON beside it (curve_selectors.chart):
// axes with ticks and gridlines, the step and each run's value under the cursor (the legend), EMA smoothing as
// TensorBoard's slider, a log scale, drag to zoom (double-click or "Reset zoom" undoes it), one colour per run and
// a dash pattern for a run whose line would hide under another's, a legend entry that hides its run, and a mark
// where a job was resumed. The SVG stays for the page without script and for screen readers.
// A live job page redraws its part on each progress frame (live.js + htmx): a chart then keeps its instance,
// settings, zoom and hidden runs, and only takes the new points.
(function () {
  "use strict";
  const PALETTE = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#475569"]; // training.css .series-n
  const DASHES = [undefined, [8, 4], [2, 4], [12, 4, 2, 4]]; // training.css .dash-n
  const state = {}; // chart id -> {smoothing, log, zoom: [min, max] | null, hidden: {run name: true}}
  const charts = {}; // chart id -> {plot, shape, height}

  function settings(id) {
    return state[id] || (state[id] = { smoothing: 0, log: false, zoom: null, hidden: {} });
  }

  function fmt(v) {
    if (v == null || !isFinite(v)) return "—";
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }

  // TensorBoard's smoothing: an exponential moving average, debiased so the first points are not pulled to 0
  function ema(values, weight) {
    if (!weight) return values.slice();
    let last = 0, n = 0;
    return values.map(function (v) {
      last = last * weight + (1 - weight) * v;
      n += 1;
      return last / (1 - Math.pow(weight, n));
    });
  }

  function faded(hex) {
    const n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + ",0.3)";
  }

  function readData(fig) {
    const script = document.getElementById("chart-data-" + fig.dataset.chart);
    return script ? JSON.parse(script.textContent) : null;
  }

  // uPlot wants one x array and one y array per series, aligned (null where a run has no point at that step)
  function columnsOf(data, s) {
    const steps = new Set();
    data.series.forEach(function (run) { run.steps.forEach(function (x) { steps.add(x); }); });
    const xs = Array.from(steps).sort(function (a, b) { return a - b; });
    if (data.x_max && (!xs.length || data.x_max > xs[xs.length - 1])) xs.push(data.x_max); // the schedule's end
    const at = new Map(xs.map(function (x, i) { return [x, i]; }));
    const columns = [xs];
    data.series.forEach(function (run) {
      const lines = s.smoothing > 0 ? [ema(run.values, s.smoothing), run.values] : [run.values];
      lines.forEach(function (values) {
        const y = new Array(xs.length).fill(null);
        run.steps.forEach(function (x, i) { y[at.get(x)] = values[i]; });
        columns.push(y);
      });
    });
    return columns;
  }

  function seriesOf(data, s) {
    const out = [{ label: "step", value: function (u, v) { return v == null ? "—" : String(v); } }];
    data.series.forEach(function (run) {
      const colour = PALETTE[run.colour % PALETTE.length];
      const dash = DASHES[run.dash];
      const show = !s.hidden[run.name];
      const label = run.name + (run.same_as ? " (dashed: same values as " + run.same_as + ")" : "");
      out.push({ label: label, run: run.name, stroke: colour, width: 2, dash: dash, show: show, spanGaps: true,
                 value: function (u, v) { return fmt(v); }, points: { show: run.steps.length <= 40, size: 5 } });
      if (s.smoothing > 0) {
        out.push({ label: run.name + " · raw", run: run.name, stroke: faded(colour), width: 1, dash: dash,
                   show: show, spanGaps: true, value: function (u, v) { return fmt(v); }, points: { show: false } });
      }
    });
    return out;
  }

  // where a later run of a job started (curve_selectors.resumed_at): a dotted line and "resumed"
  function drawResumes(u, data) {
    const ctx = u.ctx, box = u.bbox;
    const steps = [];
    data.series.forEach(function (run) { (run.resumed_at || []).forEach(function (x) { steps.push(x); }); });
    if (!steps.length) return;
    ctx.save();
    ctx.strokeStyle = "#94a3b8";
    ctx.fillStyle = "#64748b";
    ctx.setLineDash([3, 3]);
    ctx.lineWidth = Math.max(1, devicePixelRatio);
    ctx.font = Math.round(10 * devicePixelRatio) + "px sans-serif";
    steps.forEach(function (x) {
      const px = Math.round(u.valToPos(x, "x", true));
      if (px < box.left || px > box.left + box.width) return;
      ctx.beginPath();
      ctx.moveTo(px, box.top);
      ctx.lineTo(px, box.top + box.height);
      ctx.stroke();
      ctx.fillText("resumed", px + 3 * devicePixelRatio, box.top + 11 * devicePixelRatio);
    });
    ctx.restore();
  }

  function fullRange(columns) {
    const xs = columns[0];
    return [xs[0], xs[xs.length - 1]];
  }

  function create(fig, holder, data, s, height) {
    const id = fig.dataset.chart;
    const columns = columnsOf(data, s);
    let live = false; // hooks ignore the chart's own first scaling
    const opts = {
      width: Math.max(holder.clientWidth || 0, 240),
      height: height,
      scales: { x: { time: false }, y: s.log && data.log ? { distr: 3, log: 10 } : {} },
      axes: [
        { label: "step", stroke: "#5f6b7a", grid: { stroke: "#e5e7eb", width: 1 }, ticks: { stroke: "#cbd5e1" } },
        { stroke: "#5f6b7a", size: 64, grid: { stroke: "#e5e7eb", width: 1 }, ticks: { stroke: "#cbd5e1" },
          values: function (u, splits) { return splits.map(fmt); } },
      ],
      series: seriesOf(data, s),
      cursor: { drag: { x: true, y: false, setScale: true }, points: { size: 7 } },
      legend: { live: true },
      hooks: {
        ready: [function (u) {
          if (s.zoom) u.setScale("x", { min: s.zoom[0], max: s.zoom[1] });
          live = true;
        }],
        setScale: [function (u, key) {
          if (!live || key !== "x") return;
          const full = fullRange(u.data), min = u.scales.x.min, max = u.scales.x.max;
          s.zoom = min > full[0] || max < full[1] ? [min, max] : null;
        }],
        setSeries: [function (u, i, o) {
          if (!live || !i || !o || o.show == null) return;
          const name = u.series[i].run;
          if (o.show) delete s.hidden[name]; else s.hidden[name] = true;
          u.series.forEach(function (other, j) { // a run's raw line follows its smoothed one
            if (j !== i && other.run === name && other.show !== o.show) u.setSeries(j, { show: o.show });
          });
        }],
        draw: [function (u) { drawResumes(u, charts[id] ? charts[id].data : data); }],
      },
    };
    const plot = new uPlot(opts, columns, holder);
    plot.over.addEventListener("dblclick", function () { s.zoom = null; });
    charts[id] = { plot: plot, shape: shapeOf(data, s), height: height, data: data };
    return plot;
  }

  function shapeOf(data, s) {
    return JSON.stringify([data.series.map(function (r) { return [r.name, r.colour, r.dash]; }), s.smoothing > 0,
                           s.log && data.log]);
  }

  // draw (or redraw) one figure's chart; an existing chart of the same id and shape only takes the new points
  function draw(fig, rebuild) {
    const id = fig.dataset.chart;
    const holder = fig.querySelector("[data-role=chart]");
    const data = readData(fig);
    if (!holder || !data || typeof uPlot === "undefined") return;
    const s = settings(id);
    const height = fig.closest(".small-charts") ? 170 : 230;
    const known = charts[id];
    fig.classList.add("charted"); // before measuring: the chart's box is drawn around it
    if (known && !rebuild && known.shape === shapeOf(data, s)) {
      if (known.plot.root.parentNode !== holder) holder.replaceChildren(known.plot.root);
      known.data = data;
      known.plot.setData(columnsOf(data, s), !s.zoom);
      if (s.zoom) known.plot.setScale("x", { min: s.zoom[0], max: s.zoom[1] });
    } else {
      if (known) known.plot.destroy();
      delete charts[id];
      holder.replaceChildren();
      create(fig, holder, data, s, height);
    }
  }

  function wire(fig) {
    if (fig.dataset.wired) return;
    fig.dataset.wired = "1";
    const id = fig.dataset.chart;
    const s = settings(id);
    const tools = fig.querySelector(".chart-tools");
    if (!tools) return;
    tools.hidden = false;
    const slider = tools.querySelector("[data-role=smoothing]");
    const shown = tools.querySelector("[data-role=smoothing-value]");
    const log = tools.querySelector("[data-role=log]");
    const reset = tools.querySelector("[data-role=reset]");
    let pending = 0;
    slider.value = String(s.smoothing);
    shown.textContent = s.smoothing.toFixed(2);
    slider.addEventListener("input", function () {
      s.smoothing = Number(slider.value);
      shown.textContent = s.smoothing.toFixed(2);
      cancelAnimationFrame(pending);
      pending = requestAnimationFrame(function () { draw(fig, true); });
    });
    if (log) {
      log.checked = s.log;
      log.addEventListener("change", function () { s.log = log.checked; draw(fig, true); });
    }
    reset.addEventListener("click", function () {
      s.zoom = null;
      const known = charts[id];
      if (known) known.plot.setScale("x", { min: known.plot.data[0][0], max: known.plot.data[0][known.plot.data[0].length - 1] });
      s.zoom = null;
    });
  }

  function scan(root) {
    (root || document).querySelectorAll("figure[data-chart]").forEach(function (fig) {
      try {
        wire(fig);
        draw(fig, false);
      } catch (err) { // the SVG stays: a chart that cannot be drawn leaves the page as without script
        fig.classList.remove("charted");
        if (window.console) console.error("chart " + fig.dataset.chart + ":", err);
      }
    });
  }

  let resizing = 0;
  window.addEventListener("resize", function () {
    cancelAnimationFrame(resizing);
    resizing = requestAnimationFrame(function () {
      Object.keys(charts).forEach(function (id) {
        const c = charts[id], holder = c.plot.root.parentNode;
        if (holder && holder.isConnected) c.plot.setSize({ width: Math.max(holder.clientWidth, 240), height: c.height });
      });
    });
  });
  document.addEventListener("DOMContentLoaded", function () { scan(document); });
  document.addEventListener("htmx:load", function (event) { scan(event.target); });
})();
