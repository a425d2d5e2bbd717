// symcost explorer: builds the form from /api/meta, keeps every input in the address bar's
// query string, and shows what the JSON endpoints (the Python API) return. No model here.
"use strict";
const $ = (s) => document.querySelector(s);
const GIB = 2 ** 30;
let META = null;
let VIEW = "predict";
let pendingHw = {};      // hw.* values from the URL, applied once the numbers are loaded
let seq = 0;             // request generation: stale answers are dropped
let lastCli = null;

const fmt = {
  s: (v) => v.toPrecision(4) + " s",
  pct: (v) => (100 * v).toFixed(2) + " %",
  gib: (v) => (v / GIB).toFixed(2) + " GiB",
  int: (v) => Math.round(v).toLocaleString("en-US"),
};

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  return e;
}

function setOut(id, value, text) {
  const e = document.getElementById(id);
  e.dataset.value = String(value);
  e.textContent = text;
}

// ---------------------------------------------------------------- form from the field table
function fieldInput(f, prefix = "") {
  const id = prefix + f.name;
  const row = el("div", { class: "row" });
  const lab = el("label", { for: id, title: f.doc }, f.name);
  row.append(lab);
  let inp;
  const dflt = f.default === null ? "derived" : String(f.default);
  if (f.kind === "bool" || f.choices) {
    inp = el("select", { id, "data-q": f.name, title: f.doc });
    inp.append(el("option", { value: "" }, `(default: ${dflt})`));
    const choices = f.kind === "bool" ? ["true", "false"] : f.choices;
    for (const c of choices) inp.append(el("option", { value: c }, c));
  } else {
    inp = el("input", { id, "data-q": f.name, title: `${f.doc} [${f.unit}]`,
                        placeholder: dflt, inputmode: "numeric" });
  }
  row.append(inp);
  return row;
}

function buildForm() {
  const model = $("#model");
  for (const m of META.models) model.append(el("option", { value: m }, m));
  model.append(el("option", { value: "__json__" }, "config.json (paste or upload)"));
  const hw = $("#hardware");
  for (const h of META.hardware) hw.append(el("option", { value: h }, h));
  for (const f of META.fields) $("#fields").append(fieldInput(f, "field-"));
  for (const f of META.roofline_fields) $("#roofline-fields").append(fieldInput(f, "field-"));
  const fsel = $("#formula");
  for (const [group, names] of Object.entries(META.formulas)) {
    const og = el("optgroup", { label: group });
    for (const n of names) og.append(el("option", { value: n }, n));
    fsel.append(og);
  }
  for (const o of META.objectives) $("#objective").append(el("option", { value: o }, o));
  for (const o of META.sensitivity_outputs) $("#output").append(el("option", { value: o }, o));
  // selects with a default value: the value is left out of the URL while it is the default
  for (const [id, d] of [["formula", "step_time"], ["objective", "step_time"],
                         ["output", "step_time"]]) {
    $("#" + id).value = d;
    $("#" + id).dataset.default = d;
  }
  for (const v of META.views) {
    const b = el("button", { type: "button", "data-view": v, id: "tab-" + v }, v);
    b.onclick = () => { VIEW = v; showView(); refresh(); };
    $("#tabs").append(b);
  }
}

async function loadHardwareNumbers() {
  const box = $("#hw-numbers");
  box.textContent = "";
  const r = await fetch("/api/hardware?hardware=" + encodeURIComponent($("#hardware").value));
  const d = await r.json();
  if (!r.ok) return;
  for (const [k, v] of Object.entries(d.numbers)) {
    const row = el("div", { class: "row" });
    row.append(el("label", { for: "hw." + k }, k));
    const inp = el("input", { id: "hw." + k, "data-q": "hw." + k, placeholder: String(v) });
    if (pendingHw["hw." + k] !== undefined) inp.value = pendingHw["hw." + k];
    inp.addEventListener("change", changed);
    row.append(inp);
    box.append(row);
  }
  if (Object.keys(pendingHw).length) $("#hw-edit").open = true;
  pendingHw = {};
}

// ---------------------------------------------------------------- URL <-> form
function query() {
  const q = new URLSearchParams();
  for (const e of document.querySelectorAll("[data-q]")) {
    const v = e.value.trim();
    if (e.id === "model" && v === "__json__") continue;
    if (e.id === "model_json" && $("#model").value !== "__json__") continue;
    if (e.dataset.default !== undefined && v === e.dataset.default) continue;
    if (v !== "") q.set(e.dataset.q, v);
  }
  if (VIEW !== "predict") q.set("view", VIEW);
  return q;
}

function readUrl() {
  const q = new URLSearchParams(location.search);
  $("#model").value = META.default_model;
  $("#hardware").value = META.default_hardware;
  for (const [k, v] of q) {
    if (k === "view") { if (META.views.includes(v)) VIEW = v; continue; }
    if (k.startsWith("hw.")) { pendingHw[k] = v; continue; }
    const e = document.querySelector(`[data-q="${CSS.escape(k)}"]`);
    if (e) e.value = v;
  }
  if (q.has("model_json")) $("#model").value = "__json__";
  $("#model-json-box").style.display = $("#model").value === "__json__" ? "" : "none";
}

function showView() {
  for (const b of document.querySelectorAll("#tabs button"))
    b.classList.toggle("active", b.dataset.view === VIEW);
  for (const v of document.querySelectorAll(".view"))
    v.classList.toggle("active", v.id === "view-" + VIEW);
}

// ---------------------------------------------------------------- fetching and rendering
function showError(msg) {
  const e = $("#error");
  e.textContent = msg ? "error: " + msg : "";
  e.style.display = msg ? "block" : "none";
}

async function getJson(path, q) {
  const r = await fetch(path + "?" + q.toString());
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

async function refresh() {
  const my = ++seq;
  const q = query();
  history.replaceState(null, "", "?" + q.toString());
  document.body.dataset.state = "busy";
  try {
    const pred = await getJson("/api/predict", q);
    if (my !== seq) return;
    renderPredict(pred);
    let cli = pred.cli;
    if (VIEW !== "predict") {
      const body = await getJson("/api/" + VIEW, q);
      if (my !== seq) return;
      RENDER[VIEW](body, q);
      cli = body.cli;
    }
    renderCli(cli);
    showError("");
  } catch (err) {
    if (my !== seq) return;
    showError(err.message);
  }
  if (my === seq) {
    document.body.dataset.state = "ready";
    document.body.dataset.version = String(Number(document.body.dataset.version) + 1);
  }
}

function renderPredict(d) {
  const r = d.result;
  setOut("out-step_time_s", r.step_time_s, fmt.s(r.step_time_s));
  setOut("out-tokens_per_s", r.tokens_per_s, fmt.int(r.tokens_per_s));
  setOut("out-mfu", r.mfu, fmt.pct(r.mfu));
  setOut("out-hfu", r.hfu, fmt.pct(r.hfu));
  setOut("out-memory_per_gpu_bytes", r.memory_per_gpu_bytes, fmt.gib(r.memory_per_gpu_bytes));
  const fits = $("#out-fits");
  fits.dataset.value = String(d.fits);
  fits.textContent = d.fits ? "yes" : "no";
  fits.className = "v " + (d.fits ? "good" : "bad");
  const c = r.config;
  $("#config-line").textContent = `${r.model} on ${c.num_gpus} x ${r.hardware}: tp=${c.tp} ` +
    `pp=${c.pp} dp=${c.dp} vpp=${c.vpp} micro-batch ${c.micro_batch}, global batch ` +
    `${c.global_batch}, seq ${c.seq_len}, recompute ${c.recompute}, ZeRO-${c.zero}, ${c.dtype}`;
  // memory bar with the usable-HBM line
  const usable = d.memory_usable_bytes, total = d.memory_per_gpu_bytes;
  const scale = Math.max(usable, total) * 1.05;
  const bar = $("#memory-bar");
  bar.textContent = "";
  const colours = ["#4a7ab5", "#6aa84f", "#e69138", "#8e7cc3", "#999", "#c27ba0"];
  d.memory.forEach((m, i) => {
    const seg = el("div", { class: "seg", title: `${m.part}: ${fmt.gib(m.bytes)}` }, m.part);
    seg.style.width = (100 * m.bytes / scale) + "%";
    seg.style.background = colours[i % colours.length];
    bar.append(seg);
  });
  const line = el("div", { class: "fitline", id: "fit-line" });
  line.style.left = (100 * usable / scale) + "%";
  const lab = el("div", { class: "fitlabel" }, "usable " + fmt.gib(usable));
  lab.style.left = `calc(${100 * usable / scale}% - 60px)`;
  bar.append(line, lab);
  const mt = el("table");
  mt.append(row(["part", "size", "share"], "th"));
  for (const m of d.memory) {
    const tr = row([m.part, fmt.gib(m.bytes), total ? (100 * m.bytes / total).toFixed(1) + " %" : "-"]);
    tr.firstChild.replaceChildren(formulaLink("mem_" + m.part, m.part));
    mt.append(tr);
  }
  mt.append(row(["total", fmt.gib(total), ""]));
  $("#memory-table").replaceChildren(mt);
  // breakdown
  const box = $("#breakdown");
  box.textContent = "";
  const step = r.step_time_s;
  for (const b of d.breakdown) {
    const h = el("div", { class: "hbar" });
    h.append(formulaLink("time_" + b.term, b.term));
    const track = el("div", { class: "track" });
    const fill = el("div", { class: "fill" });
    fill.style.width = (step ? 100 * b.s / step : 0) + "%";
    track.append(fill);
    const val = el("span", { id: "brk-" + b.term, "data-value": String(b.s) },
                   `${b.s.toPrecision(3)} s (${step ? (100 * b.s / step).toFixed(1) : 0} %)`);
    h.append(track, val);
    box.append(h);
  }
}

function row(cells, tag = "td") {
  const tr = el("tr");
  cells.forEach((c, i) => tr.append(el(tag, { class: i === 0 ? "l" : "" }, String(c))));
  return tr;
}

function formulaLink(name, text) {
  const a = el("a", { class: "f", "data-formula": name, title: "show the formula" }, text);
  a.onclick = () => openFormula(name);
  return a;
}

function openFormula(name) {
  $("#formula").value = name;
  VIEW = "formula";
  showView();
  refresh();
}

const RENDER = {
  formula(d) {
    $("#formula-text").textContent = d.text;
    $("#formula-latex").textContent = d.latex;
    $("#formula-value").textContent = d.value === null ? "" :
      `${d.name} = ${d.value.toPrecision(6)} ${d.unit} at this configuration` +
      (d.keep.length ? `; free: ${d.keep.join(", ")}` : "");
    $("#formula-value").dataset.value = String(d.value);
  },
  search(d) {
    $("#search-summary").textContent = `${d.candidates.toLocaleString("en-US")} valid ` +
      `candidates, ${d.fitting.toLocaleString("en-US")} fit; ${d.explanation}`;
    const cols = ["rank", "num_gpus", "tp", "pp", "dp", "micro_batch", "vpp", "recompute", "sp",
                  "zero", "dp_overlap"];
    const t = el("table", { id: "search-top" });
    t.append(row([...cols, "step time", "MFU", "mem/GPU", ""], "th"));
    for (const r of d.top) {
      const tr = row([...cols.map((c) => r[c]), fmt.s(r.step_time_s), fmt.pct(r.mfu),
                      fmt.gib(r.memory_per_gpu_bytes), ""]);
      const use = el("button", { type: "button" }, "use");
      use.onclick = () => {
        for (const c of cols.slice(1)) {
          const e = document.getElementById("field-" + c);
          if (e) e.value = String(r[c]);
        }
        VIEW = "predict"; showView(); refresh();
      };
      tr.lastChild.append(use);
      t.append(tr);
    }
    $("#search-table").replaceChildren(t);
    $("#pareto").replaceChildren(paretoSvg(d.pareto));
  },
  roofline(d, q) {
    $("#roofline-img").src = "/api/roofline.png?" + q.toString();
    const t = el("table", { id: "roofline-rows" });
    t.append(row(["phase", "op", "dtype", "FLOP", "bytes", "FLOP/byte", "ridge", "bound",
                  "time"], "th"));
    for (const r of d.rows)
      t.append(row([r.phase, r.op, r.dtype, r.flops.toExponential(3), r.bytes.toExponential(3),
                    r.intensity.toPrecision(4), r.ridge.toPrecision(4), r.bound,
                    r.time_s.toExponential(3) + " s"]));
    $("#roofline-table").replaceChildren(t);
  },
  sensitivity(d, q) {
    $("#tornado-note").textContent = `relative change of ${d.output} (` +
      `${d.value.toPrecision(4)} here): continuous parameters at x*(1 -/+ ${d.step}), ` +
      `discrete ones at their next valid values below and above`;
    $("#tornado-img").src = "/api/tornado.png?" + q.toString();
    const t = el("table", { id: "tornado-rows" });
    t.append(row(["parameter", "kind", "method", "low side", "high side"], "th"));
    for (const b of d.bars)
      t.append(row([b.name, b.kind, b.method, (100 * b.low).toFixed(2) + " %",
                    (100 * b.high).toFixed(2) + " %"]));
    $("#tornado").replaceChildren(t);
  },
};

function paretoSvg(p) {
  const NS = "http://www.w3.org/2000/svg";
  const W = 640, H = 320, L = 70, B = 40, T = 10, R = 10;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.id = "pareto-svg";
  const pts = p.cloud.concat(p.front.map((f) => [f.score, f.memory_per_gpu_bytes]));
  if (!pts.length) return svg;
  const xs = pts.map((q) => q[0]), ys = pts.map((q) => q[1] / GIB);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = 0;
  const y1 = Math.max(...ys, p.memory_usable_bytes / GIB) * 1.05;
  // log x: scores of a search span orders of magnitude
  const lx0 = Math.log(x0), lx1 = Math.log(x1);
  const sx = (x) => L + (W - L - R) * (lx1 > lx0 ? (Math.log(x) - lx0) / (lx1 - lx0) : 0.5);
  const sy = (y) => H - B - (H - B - T) * (y - y0) / (y1 - y0);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  add("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#444" });
  add("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#444" });
  for (const c of p.cloud)
    add("circle", { cx: sx(c[0]), cy: sy(c[1] / GIB), r: 2, fill: "#bbb" });
  add("line", { x1: L, y1: sy(p.memory_usable_bytes / GIB), x2: W - R,
                y2: sy(p.memory_usable_bytes / GIB), stroke: "#c00", "stroke-dasharray": "4" });
  add("polyline", { points: p.front.map((f) => `${sx(f.score)},${sy(f.memory_per_gpu_bytes / GIB)}`).join(" "),
                    fill: "none", stroke: "#24569b", "stroke-width": 2 });
  for (const f of p.front) {
    const c = add("circle", { cx: sx(f.score), cy: sy(f.memory_per_gpu_bytes / GIB), r: 4,
                              fill: "#24569b", class: "front" });
    c.append(Object.assign(document.createElementNS(NS, "title"), {
      textContent: `tp=${f.tp} pp=${f.pp} dp=${f.dp} mb=${f.micro_batch} vpp=${f.vpp}: ` +
        `${f.score.toPrecision(4)}, ${fmt.gib(f.memory_per_gpu_bytes)}` }));
  }
  add("text", { x: (L + W) / 2, y: H - 8, "text-anchor": "middle", "font-size": 12 },
      `score (${p.objective}, log scale; lower is better): ${x0.toPrecision(3)} .. ${x1.toPrecision(3)}`);
  add("text", { x: 12, y: H / 2, "font-size": 12, transform: `rotate(-90 12 ${H / 2})`,
                "text-anchor": "middle" }, "memory per GPU (GiB)");
  add("text", { x: L - 4, y: sy(y1 / 1.05) + 4, "text-anchor": "end", "font-size": 10 },
      (y1 / 1.05).toFixed(0));
  add("text", { x: L - 4, y: H - B, "text-anchor": "end", "font-size": 10 }, "0");
  return svg;
}

function renderCli(cli) {
  lastCli = cli;
  $("#cli-command").textContent = cli ? cli.command : "";
  const files = $("#cli-files");
  files.textContent = "";
  for (const [name, text] of Object.entries((cli && cli.files) || {})) {
    const det = el("details");
    det.append(el("summary", {}, `save as ${name} (the command reads it)`), el("pre", {}, text));
    files.append(det);
  }
}

// ---------------------------------------------------------------- events
function changed() { refresh(); }

async function init() {
  META = await (await fetch("/api/meta")).json();
  buildForm();
  readUrl();
  showView();
  await loadHardwareNumbers();
  for (const e of document.querySelectorAll("[data-q]")) {
    if (e.id === "hardware" || e.id === "model") continue;
    e.addEventListener("change", changed);
  }
  $("#hardware").addEventListener("change", async () => {
    await loadHardwareNumbers();
    refresh();
  });
  $("#model").addEventListener("change", () => {
    $("#model-json-box").style.display = $("#model").value === "__json__" ? "" : "none";
    if ($("#model").value !== "__json__" || $("#model_json").value.trim()) refresh();
  });
  $("#model-file").addEventListener("change", async (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    $("#model_json").value = await f.text();
    refresh();
  });
  for (const a of document.querySelectorAll("#summary a.f"))
    a.onclick = () => openFormula(a.dataset.formula);
  $("#cli-button").onclick = () => {
    const box = $("#cli");
    box.style.display = box.style.display === "block" ? "none" : "block";
  };
  $("#link-button").onclick = () => navigator.clipboard && navigator.clipboard.writeText(location.href);
  refresh();
}

init();
