// Plots of the pair and comparison pages (Chart.js, served from static/vendor).
window.tpcmesh = (function () {
  "use strict";
  const palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  const color = (i) => palette[i % palette.length];
  const dateTick = (v) => new Date(v).toISOString().slice(0, 10);

  function pairPage(data) {
    const datasets = [];
    let i = 0;
    for (const [label, points] of Object.entries(data.throughput)) {
      datasets.push({ label, data: points.map(([x, y]) => ({ x, y })), borderColor: color(i), backgroundColor: color(i++),
        yAxisID: "y", pointRadius: 1.5, borderWidth: 1, showLine: true });
    }
    for (const [label, points] of Object.entries(data.rtt)) {
      datasets.push({ label, data: points.map(([x, y]) => ({ x, y })), borderColor: color(i), backgroundColor: color(i++),
        yAxisID: "rtt", pointRadius: 1, borderWidth: 1, borderDash: [4, 3], showLine: true });
    }
    new Chart(document.getElementById("history"), {
      type: "scatter", data: { datasets },
      options: { animation: false, maintainAspectRatio: false, parsing: false,
        scales: { x: { type: "linear", ticks: { callback: dateTick, maxTicksLimit: 8 } },
          y: { title: { display: true, text: "throughput (Gbit/s)" }, beginAtZero: true },
          rtt: { position: "right", title: { display: true, text: "RTT (ms)" }, beginAtZero: true, grid: { drawOnChartArea: false } } },
        plugins: { tooltip: { callbacks: { title: (items) => new Date(items[0].parsed.x).toISOString().slice(0, 16).replace("T", " ") } } } },
    });
    const filesEl = document.getElementById("files");
    if (filesEl && data.files.length) {
      const longest = data.files.reduce((a, f) => (f.seconds.length > a.names.length ? f : a), data.files[0]);
      new Chart(filesEl, {
        type: "bar",
        data: { labels: longest.names, datasets: data.files.map((f, k) => ({ label: f.label, data: f.seconds, backgroundColor: color(k) })) },
        options: { animation: false, maintainAspectRatio: false, scales: { y: { title: { display: true, text: "seconds" }, beginAtZero: true } } },
      });
    }
  }

  function comparePage(data) {
    let i = 0;
    const rttSets = Object.entries(data.rtt).map(([protocol, points]) => ({
      label: protocol, data: points.map((p) => ({ x: p.rtt_ms, y: p.throughput_gbps })), backgroundColor: color(i++), pointRadius: 2 }));
    new Chart(document.getElementById("rtt"), {
      type: "scatter", data: { datasets: rttSets },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: "RTT (ms)" } }, y: { title: { display: true, text: "throughput (Gbit/s)" }, beginAtZero: true } } },
    });
    const byProto = {};
    for (const p of data.streams) (byProto[p.protocol] = byProto[p.protocol] || []).push({ x: p.low_gbps, y: p.high_gbps });
    const max = Math.max(1, ...data.streams.flatMap((p) => [p.low_gbps, p.high_gbps]));
    const sets = Object.entries(byProto).map(([protocol, pts], k) => ({ label: protocol, data: pts, backgroundColor: color(k), pointRadius: 2 }));
    sets.push({ label: "equal", data: [{ x: 0, y: 0 }, { x: max, y: max }], showLine: true, borderColor: "#999", borderDash: [4, 4], pointRadius: 0 });
    new Chart(document.getElementById("streams"), {
      type: "scatter", data: { datasets: sets },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: data.low + " stream(s) (Gbit/s)" }, beginAtZero: true },
          y: { title: { display: true, text: data.high + " streams (Gbit/s)" }, beginAtZero: true } } },
    });
  }
  return { pairPage, comparePage };
})();
