// Plots of the pair and comparison pages (Chart.js, served from static/vendor).
window.tpcmesh = (function () {
  "use strict";
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  const color = (i) => palette[i % palette.length];
  const shapes = ["circle", "triangle", "rect", "rectRot", "star", "crossRot"];
  const dateTick = (v) => new Date(v).toISOString().slice(0, 10);

  const timeTick = (v) => new Date(v).toISOString().slice(5, 16).replace("T", " ");
  const TIMES_UNDER_MS = 3 * 24 * 3600 * 1000; // a shorter span shows times on the axis, a longer one dates

  // The time axis' tick: times when the drawn points span less than TIMES_UNDER_MS, else dates.
  function tickFor(datasets) {
    const xs = datasets.flatMap((d) => d.data.map((p) => p.x)).filter((x) => x !== null);
    return xs.length && Math.max(...xs) - Math.min(...xs) < TIMES_UNDER_MS ? timeTick : dateTick;
  }

  const pointTime = (items) => new Date(items[0].parsed.x).toISOString().slice(0, 16).replace("T", " ");
  const RTT_AXIS = { position: "right", title: { display: true, text: "RTT (ms)" }, beginAtZero: true, grid: { drawOnChartArea: false } };

  // The pair page's plots over time: x the time in ms (tickFor's ticks), y titled yTitle, with rtt: a right RTT axis.
  function timeChart(el, datasets, yTitle, { rtt = false, plugins = [] } = {}) {
    const scales = { x: { type: "linear", ticks: { callback: tickFor(datasets), maxTicksLimit: 8 } },
      y: { title: { display: true, text: yTitle }, beginAtZero: true } };
    if (rtt) scales.rtt = RTT_AXIS;
    return new Chart(el, {
      type: "scatter", data: { datasets }, plugins,
      options: { animation: false, maintainAspectRatio: false, parsing: false, scales,
        plugins: { tooltip: { callbacks: { title: pointTime } } } },
    });
  }

  // Other series in a time chart (another protocol): their own time ticks.
  function redraw(chart, datasets) {
    chart.data.datasets = datasets;
    chart.options.scales.x.ticks.callback = tickFor(datasets);
    chart.update();
  }

  function pairPage(data) {
    // One protocol at a time (the select above the plot): its series in both directions, their levels, the RTT.
    const select = document.getElementById("protocol");
    const historySets = (protocol) => {
      const datasets = [];
      const labels = Object.keys(data.throughput).filter((label) => data.series[label] === protocol);
      labels.forEach((label, i) => {
        datasets.push({ label, data: data.throughput[label].map(([x, y]) => ({ x, y })), borderColor: color(i),
          backgroundColor: color(i), yAxisID: "y", pointRadius: 1.5, borderWidth: 1, showLine: true });
      });
      // the level between step changes (stats.changes): a dashed line per series, in its colour
      labels.forEach((label, i) => {
        const line = data.levels[label];
        if (line) datasets.push({ label: label + " level", data: line.map((p) => (p ? { x: p[0], y: p[1] } : { x: null, y: null })),
          borderColor: color(i), backgroundColor: color(i), yAxisID: "y", pointRadius: 0, borderWidth: 2, borderDash: [6, 4],
          showLine: true, spanGaps: false });
      });
      Object.entries(data.rtt).forEach(([label, points], j) => {
        const c = labels.length + j;
        datasets.push({ label, data: points.map(([x, y]) => ({ x, y })), borderColor: color(c), backgroundColor: color(c),
          yAxisID: "rtt", pointRadius: 1, borderWidth: 1, borderDash: [4, 3], showLine: true });
      });
      return datasets;
    };
    const retransSets = (protocol) => {
      const names = Object.keys(data.throughput).filter((label) => data.series[label] === protocol);
      return Object.entries(data.retransmits).filter(([label]) => data.series[label] === protocol).map(([label, points], j) => {
        const c = names.indexOf(label) >= 0 ? names.indexOf(label) : names.length + j;
        return { label, data: points.map(([x, y]) => ({ x, y })), borderColor: color(c), backgroundColor: color(c),
          pointRadius: 1.5, borderWidth: 1, showLine: true };
      });
    };
    const datasets = historySets(data.protocol);
    // path changes (results.paths): a dashed vertical line on the time axis at each
    const pathMarks = { id: "pathMarks", afterDatasetsDraw(chart) {
      const { ctx, chartArea, scales } = chart;
      ctx.save(); ctx.strokeStyle = "#8a2be2"; ctx.fillStyle = "#8a2be2"; ctx.setLineDash([3, 3]); ctx.font = "10px sans-serif";
      for (const [t, label] of data.paths || []) {
        const x = scales.x.getPixelForValue(t);
        if (x < chartArea.left || x > chartArea.right) continue;
        ctx.beginPath(); ctx.moveTo(x, chartArea.top); ctx.lineTo(x, chartArea.bottom); ctx.stroke();
        ctx.fillText(label, x + 3, chartArea.top + 10);
      }
      ctx.restore();
    } };
    const history = timeChart(document.getElementById("history"), datasets, "throughput (Gbit/s)",
      { rtt: true, plugins: [pathMarks] });
    // Under the throughput: the senders' TCP retransmits of each test, same series, same colours, same time axis.
    const retransEl = document.getElementById("retransmits");
    let retrans = null;
    if (retransEl && Object.keys(data.retransmits).length) {
      retrans = timeChart(retransEl, retransSets(data.protocol), "retransmitted segments");
    }
    if (select) select.addEventListener("change", () => {
      redraw(history, historySets(select.value));
      if (retrans) redraw(retrans, retransSets(select.value));
    });
    // The loss probes' periods: loss % per direction, their RTT medians on the right axis, the same time ticks.
    const lossEl = document.getElementById("loss");
    if (lossEl && Object.keys(data.loss).length) {
      const sets = Object.entries(data.loss).map(([label, points], i) => ({ label, data: points.map(([x, y]) => ({ x, y })),
        borderColor: color(i), backgroundColor: color(i), yAxisID: "y", pointRadius: 1.5, borderWidth: 1, showLine: true }));
      Object.entries(data.loss_rtt).forEach(([label, points], j) => {
        const c = sets.length + j;
        sets.push({ label, data: points.map(([x, y]) => ({ x, y })), borderColor: color(c), backgroundColor: color(c),
          yAxisID: "rtt", pointRadius: 0, borderWidth: 1, borderDash: [4, 3], showLine: true });
      });
      timeChart(lossEl, sets, "loss (%)", { rtt: true });
    }
    const filesEl = document.getElementById("files");
    if (filesEl && data.files.length) {
      // A strip plot: one column per direction and setting, every file a point (spread sideways so equal times
      // stay visible), the median a bar across the column.
      const sets = data.files.map((g, k) => ({
        label: g.label.join(" "), backgroundColor: color(k), borderColor: color(k), pointRadius: 3,
        data: g.points.map(([y, name], j) => ({ x: k + ((j % 9) - 4) * 0.035, y, name })) }));
      sets.push({ label: "median", data: data.files.map((g, k) => ({ x: k, y: g.median })).filter((p) => p.y !== null),
        pointStyle: "line", pointRadius: 18, pointHoverRadius: 18, borderWidth: 3, borderColor: "#222", backgroundColor: "#222" });
      new Chart(filesEl, {
        type: "scatter", data: { datasets: sets },
        options: { animation: false, maintainAspectRatio: false,
          scales: { x: { type: "linear", min: -0.5, max: data.files.length - 0.5, grid: { display: false },
              afterBuildTicks: (axis) => { axis.ticks = data.files.map((_, k) => ({ value: k })); },
              ticks: { callback: (v) => (data.files[v] ? data.files[v].label : "") } },
            y: { title: { display: true, text: "seconds per file" }, beginAtZero: true } },
          plugins: { tooltip: { callbacks: {
            label: (ctx) => (ctx.raw.name ? ctx.raw.name : "median") + ": " + ctx.parsed.y.toFixed(2) + " s" } } } },
      });
    }
  }

  // What else makes a point's cell its own (IPv6, a congestion control, an auth mode): in its dataset's label.
  const variant = (p) => [p.address_family === "ipv6" ? "IPv6" : "", p.congestion_control || "", p.auth || "",
    p.storage && p.storage !== "memory" ? p.storage : ""]
    .filter(Boolean).map((v) => " · " + v).join("");

  function comparePage(data) {
    // One dataset per protocol and setting: its own colour, and a point shape per stream setting.
    const settings = {};
    for (const [protocol, points] of Object.entries(data.rtt))
      for (const p of points) {
        const label = protocol + " ×" + (p.streams || 1) + variant(p);
        (settings[label] = settings[label] || []).push(p);
      }
    const streamCounts = [...new Set(Object.values(data.rtt).flat().map((p) => p.streams || 1))].sort((a, b) => a - b);
    const rttSets = Object.entries(settings).map(([label, points], k) => ({
      label, backgroundColor: color(k), borderColor: color(k), pointRadius: 4,
      pointStyle: shapes[streamCounts.indexOf(points[0].streams || 1) % shapes.length],
      data: points.map((p) => ({ x: p.rtt_ms, y: p.throughput_gbps, pair: p.source + " → " + p.destination })) }));
    new Chart(document.getElementById("rtt"), {
      type: "scatter", data: { datasets: rttSets },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "RTT (ms)" } }, y: { title: { display: true, text: "throughput (Gbit/s)" }, beginAtZero: true } },
        plugins: { legend: { labels: { usePointStyle: true } }, tooltip: { callbacks: {
          label: (ctx) => ctx.dataset.label + " " + ctx.raw.pair + ": " + ctx.parsed.y.toFixed(2) + " Gbit/s at " + ctx.parsed.x.toFixed(1) + " ms" } } } },
    });
    const byProto = {};
    for (const p of data.streams) {
      const label = p.protocol + variant(p);
      (byProto[label] = byProto[label] || []).push({ x: p.low_gbps, y: p.high_gbps });
    }
    const max = Math.max(1, ...data.streams.flatMap((p) => [p.low_gbps, p.high_gbps]));
    const sets = Object.entries(byProto).map(([protocol, pts], k) => ({ label: protocol, data: pts, backgroundColor: color(k), pointRadius: 2 }));
    sets.push({ label: "equal", data: [{ x: 0, y: 0 }, { x: max, y: max }], showLine: true, borderColor: "#999", borderDash: [4, 4], pointRadius: 0 });
    new Chart(document.getElementById("streams"), {
      type: "scatter", data: { datasets: sets },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: data.low + " stream(s) (Gbit/s)" }, beginAtZero: true },
          y: { title: { display: true, text: data.high + " streams (Gbit/s)" }, beginAtZero: true } } },
    });
    // Token and none against x509 on the same pair: one dataset per protocol and mode; above the line is faster.
    const authCanvas = document.getElementById("auth");
    if (!authCanvas) return;
    const authSets = {};
    for (const p of data.auth) {
      if (p.gbps.x509 === undefined) continue;
      for (const [mode, gbps] of Object.entries(p.gbps)) {
        if (mode === "x509") continue;
        const label = mode + " · " + p.protocol + " ×" + (p.streams || 1) + variant({ ...p, auth: "" });
        (authSets[label] = authSets[label] || []).push({ x: p.gbps.x509, y: gbps, pair: p.source + " → " + p.destination });
      }
    }
    const authMax = Math.max(1, ...data.auth.flatMap((p) => Object.values(p.gbps)));
    const authData = Object.entries(authSets).map(([label, pts], k) => ({ label, data: pts, backgroundColor: color(k), pointRadius: 3 }));
    authData.push({ label: "equal", data: [{ x: 0, y: 0 }, { x: authMax, y: authMax }], showLine: true, borderColor: "#999", borderDash: [4, 4], pointRadius: 0 });
    new Chart(authCanvas, {
      type: "scatter", data: { datasets: authData },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "x509 (Gbit/s)" }, beginAtZero: true },
          y: { title: { display: true, text: "token / none (Gbit/s)" }, beginAtZero: true } },
        plugins: { tooltip: { callbacks: {
          label: (ctx) => ctx.dataset.label + " " + (ctx.raw.pair || "") + ": " + ctx.parsed.y.toFixed(2) + " vs " + ctx.parsed.x.toFixed(2) + " Gbit/s" } } } },
    });
  }
  return { pairPage, comparePage };
})();
