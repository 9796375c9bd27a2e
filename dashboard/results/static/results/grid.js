// The mesh grid: one delegated handler for hover (value and time of both halves) and click (pair page).
(function () {
  "use strict";
  const table = document.getElementById("grid");
  const dataEl = document.getElementById("grid-data");
  if (!table || !dataEl) return;
  const data = JSON.parse(dataEl.textContent);
  const tip = document.getElementById("tip");
  const names = Array.from(table.tHead.rows[0].cells).slice(1).map((th) => th.dataset.n);

  function when(epoch) {
    const d = new Date(epoch * 1000);
    const ageH = (data.now - epoch) / 3600;
    const age = ageH < 48 ? ageH.toFixed(1) + " h ago" : (ageH / 24).toFixed(1) + " d ago";
    return d.toISOString().slice(0, 16).replace("T", " ") + " UTC (" + age + ")";
  }
  // A half is [value, epoch] or [value, epoch, status, error]; who measured what follows from the split. In the
  // newest pick (streams=newest: each link at the setting it ran last) a half names its own setting:
  // [value, epoch, status or null, error or null, streams, concurrency or null].
  function setting(streams, concurrency) {
    if (streams === "newest") return "";
    const files = concurrency ? " × " + concurrency + (concurrency === 1 ? " file" : " files") : "";
    return streams ? " ×" + streams + (files ? " streams" + files : "") : files;
  }
  // The efficiency and why views: a half is an object {value, t, status, error, limit, efficiency, evidence, fix}
  // (and streams, concurrency in the newest pick): the limit the measurement ran into, with its figures and fix.
  function why(h, src, dst, streams) {
    const own = h.streams !== undefined;
    const v = h.value === null ? "–" : (+h.value).toFixed(2) + " " + data.unit;
    let s = src + " → " + dst + (own ? setting(h.streams, h.concurrency) : setting(streams, null)) + ": " + v +
      "  " + when(h.t);
    if (h.status) s += "\n  " + h.status + (h.error ? ": " + h.error : "");
    const eff = h.efficiency === null ? "" : ", efficiency " + Math.round(h.efficiency * 100) + " % of the path";
    s += "\n  limit: " + (h.limit || "not diagnosed") + eff;
    if (h.evidence) s += "\n  why: " + h.evidence;
    if (h.fix) s += "\n  fix: " + h.fix;
    return s;
  }
  function half(h, src, dst, streams) {
    if (h && !Array.isArray(h)) return why(h, src, dst, streams);
    const own = h && h.length > 4;
    const label = src + " → " + dst + (own ? setting(h[4], h[5]) : setting(streams, null)) + ": ";
    if (!h) return label + "no data";
    const [value, t, status, error] = h;
    const v = value === null ? "–" : (+value).toFixed(2) + " " + data.unit;
    let s = label + v + "  " + when(t);
    if (status) s += "\n  " + status + (error ? ": " + error : "");
    return s;
  }
  function locate(td) {
    const r = td.parentElement.sectionRowIndex;
    const c = td.cellIndex - 1;
    return [r, c];
  }
  table.addEventListener("mouseover", (ev) => {
    const td = ev.target.closest("td");
    if (!td) { tip.hidden = true; return; }
    const [r, c] = locate(td);
    const cell = data.cells[r][c];
    if (cell && cell.ceilings !== undefined)
      tip.textContent = names[r] + " ceilings: " + Object.entries(cell.ceilings).map(([k, v]) => k + " " + v.toFixed(2) + " Gbit/s").join(", ");
    else if (cell && data.split === "direction")
      tip.textContent = half(cell[0], names[r], names[c], data.high) + "\n" + half(cell[1], names[c], names[r], data.high);
    else if (cell)
      tip.textContent = half(cell[0], names[r], names[c], data.high) + "\n" + half(cell[1], names[r], names[c], data.low);
    else tip.textContent = names[r] + " → " + names[c] + ": no data";
    tip.hidden = false;
  });
  table.addEventListener("mousemove", (ev) => {
    tip.style.left = ev.clientX + 14 + "px";
    tip.style.top = ev.clientY + 14 + "px";
  });
  table.addEventListener("mouseleave", () => { tip.hidden = true; });
  table.addEventListener("click", (ev) => {
    const td = ev.target.closest("td");
    if (!td) return;
    const [r, c] = locate(td);
    if (r === c) return;
    window.location.href = data.pair_url.replace("SRC", encodeURIComponent(names[r])).replace("DST", encodeURIComponent(names[c]));
  });
})();
