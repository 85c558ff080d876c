// The ratelimitd console. Plain JavaScript, no libraries and no network
// fetches beyond this daemon's own /console/api. Request data (descriptor
// values) is only ever inserted as text, never as HTML.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
};

async function getJSON(url) {
  const r = await fetch(url, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// postJSON sends body as JSON: a request another origin's page cannot make
// without a CORS preflight, which the daemon never answers.
async function postJSON(url, body) {
  const r = await fetch(url, { method: "POST", cache: "no-store", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const out = await r.json();
  if (!r.ok) throw new Error(out.error || r.statusText);
  return out;
}

// ---- tabs ----
let active = "policies";
const refreshers = {};
function show(tab) {
  active = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll("section.tab")) s.classList.toggle("active", s.id === tab);
  if (refreshers[tab]) refreshers[tab]();
  history.replaceState(null, "", "#" + tab);
}

// ---- names and durations, the same on every tab ----
// ruleName is a rule's name for people: the names its limits have
// (rate_limit.name), else its descriptor path (the stat key without the
// domain, as the metrics' rule label). statKey may carry the domain.
let ruleNames = new Map();
function indexRuleNames() {
  ruleNames = new Map();
  const walk = (domain, ds) => {
    for (const d of ds || []) {
      const names = (d.rate_limits || []).map(l => l.name).filter(Boolean);
      if (d.stat_key && names.length) ruleNames.set(`${domain}\n${rulePath(domain, d.stat_key)}`, names.join(", "));
      walk(domain, d.descriptors);
    }
  };
  for (const dom of policy.domains) walk(dom.domain, dom.descriptors);
}
function rulePath(domain, statKey) {
  return statKey.startsWith(domain + ".") ? statKey.slice(domain.length + 1) : statKey;
}
function ruleName(domain, statKey) {
  const path = rulePath(domain, statKey);
  return ruleNames.get(`${domain}\n${path}`) || path;
}
// ruleCell shows a rule's name, its descriptor path on hover.
function ruleCell(domain, statKey) {
  return el("span", { title: rulePath(domain, statKey) }, ruleName(domain, statKey));
}
// human is a duration in nanoseconds for people: three significant digits
// in the largest unit it fills ("1.01 s", "250 ms", "1 min").
function human(ns) {
  const units = [[86400e9, "d"], [3600e9, "h"], [60e9, "min"], [1e9, "s"], [1e6, "ms"], [1e3, "µs"]];
  if (ns === 0) return "0 s";
  for (const [u, name] of units) if (ns >= u) return `${+(ns / u).toPrecision(3)} ${name}`;
  return `${ns} ns`;
}

// ---- policies ----
let policy = null;
function limitBadges(l) {
  const out = [];
  if (l.unlimited) out.push(el("span", { class: "badge unlimited" }, "unlimited"));
  else if (l.deny_all) out.push(el("span", { class: "badge deny" }, "deny all"));
  else {
    let text = l.algorithm === "concurrency"
      ? `concurrency · ${l.requests_per_unit} in flight · lease ${l.period}`
      : `${l.algorithm} · ${l.requests_per_unit} per ${l.period}`;
    if (l.burst && l.burst !== l.requests_per_unit) text += ` · burst ${l.burst}`;
    if (l.overdraft) text += " · overdraft";
    out.push(el("span", { class: "badge" }, text));
  }
  if (l.name) out.push(el("span", { class: "badge" }, l.name));
  return out;
}
function renderNode(d, filter) {
  const label = d.value ? `${d.key}=${d.value}` : `${d.key} (any value)`;
  const kids = (d.descriptors || []).map(c => renderNode(c, filter)).filter(Boolean);
  const own = [label, d.stat_key || "", ...(d.rate_limits || []).flatMap(l => [l.name || "", l.algorithm || ""])].join(" ").toLowerCase();
  if (filter && !own.includes(filter) && kids.length === 0) return null;
  const summary = el("summary", { class: "node" }, el("code", {}, label));
  for (const l of d.rate_limits || []) summary.append(...limitBadges(l));
  if (d.shadow_mode) summary.append(el("span", { class: "badge shadow" }, "shadow"));
  if (d.detailed_metric) summary.append(el("span", { class: "badge" }, "detailed metric"));
  const node = el("details", {}, summary, ...kids);
  node.open = kids.length > 0 && kids.length <= 50;
  return node;
}
function countRules(ds) {
  return ds.reduce((n, d) => n + (d.rate_limits ? 1 : 0) + countRules(d.descriptors || []), 0);
}
function renderPolicy() {
  const tree = $("#policy-tree");
  tree.replaceChildren();
  if (!policy) return;
  const filter = $("#policy-filter").value.trim().toLowerCase();
  let rules = 0;
  for (const dom of policy.domains) {
    rules += countRules(dom.descriptors || []);
    const kids = (dom.descriptors || []).map(d => renderNode(d, filter)).filter(Boolean);
    if (filter && kids.length === 0 && !dom.domain.toLowerCase().includes(filter)) continue;
    const sum = el("summary", {}, el("strong", {}, "domain " + dom.domain), el("span", { class: "muted" }, `  ${dom.source}`));
    const det = el("details", { class: "card domain" }, sum, ...kids);
    det.open = true;
    tree.append(det);
  }
  $("#policy-count").textContent = `${policy.domains.length} domains, ${rules} rules`;
}
let policyStamp = "";
async function loadPolicy() {
  try {
    const v = await getJSON("/console/api/policy?since=" + encodeURIComponent(policyStamp));
    if (v.unchanged) policy.reload = v.reload; else policy = v;
  } catch (e) {
    $("#reload").textContent = "could not load the policy: " + e.message;
    return;
  }
  const r = $("#reload");
  r.replaceChildren(
    el("div", {}, "Policy from ", el("code", {}, policy.config), ...(policy.version ? [" version ", el("code", {}, policy.version)] : []), " loaded ", new Date(policy.loaded_at).toLocaleString()));
  if (policy.reload.last_error) {
    r.append(el("div", { class: "error" }, `Last reload failed ${new Date(policy.reload.last_error_at).toLocaleString()} — the policy above goes on serving:`),
      el("pre", { class: "mono error" }, policy.reload.last_error));
  } else {
    r.append(el("div", { class: "ok" }, "No failed reload since."));
  }
  $("#status").textContent = `${policy.domains.length} domains · ${policy.config}`;
  // Redraw the tree (closing what was opened) only for a new policy.
  if (policy.loaded_at !== policyStamp) {
    policyStamp = policy.loaded_at;
    indexRuleNames();
    renderPolicy();
    fillRuleChoices();
  }
}
refreshers.policies = loadPolicy;

// ---- charts ----
const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
const colors = { admitted: "#2e7d32", denied: "#c62828", shadow_denied: "#ef6c00" };
// lineChart draws series of {t, admitted, denied, shadow_denied} as three
// lines, scaled to their peak.
function lineChart(series, w, h, axes) {
  const s = svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "line-chart", "data-points": series.length });
  const pad = axes ? 34 : 2;
  let peak = 1;
  for (const p of series) peak = Math.max(peak, p.admitted, p.denied, p.shadow_denied);
  s.append(svg("rect", { x: pad, y: 2, width: w - pad - 2, height: h - 4, fill: "#fafafa", stroke: "#e0e0e0" }));
  if (axes) {
    const top = svg("text", { x: pad - 4, y: 12, "text-anchor": "end", "font-size": 11 }); top.textContent = peak.toFixed(peak < 10 ? 1 : 0);
    const bot = svg("text", { x: pad - 4, y: h - 4, "text-anchor": "end", "font-size": 11 }); bot.textContent = "0";
    s.append(top, bot);
  }
  // The newest sample at the right edge (inset by the markers' radius),
  // one step a sample back from it.
  const step = (w - pad - 10) / (60 - 1);
  const x = i => w - 6 - (series.length - 1 - i) * step;
  const y = v => h - 5 - (h - 10) * (v / peak);
  for (const key of ["admitted", "denied", "shadow_denied"]) {
    if (!series.some(p => p[key] > 0)) continue; // nothing to draw: the legend says what is absent
    const pts = series.map((p, i) => `${x(i).toFixed(1)},${y(p[key]).toFixed(1)}`);
    s.append(svg("polyline", { points: pts.join(" "), fill: "none", stroke: colors[key], "stroke-width": 1.6, class: "series-" + key }));
    if (series.length > 0) {
      const last = series[series.length - 1];
      s.append(svg("circle", { cx: x(series.length - 1), cy: y(last[key]), r: 2.5, fill: colors[key] }));
    }
  }
  return s;
}

// ---- live ----
const fmt = v => v >= 100 ? v.toFixed(0) : v.toFixed(1);
async function loadLive() {
  let v;
  try { v = await getJSON("/console/api/live"); } catch (e) { $("#live-note").textContent = e.message; return; }
  $("#live-total").replaceChildren(lineChart(v.total, 900, 180, true));
  const last = v.total[v.total.length - 1];
  $("#live-note").textContent = last
    ? `Now: ${fmt(last.admitted)} admitted/s, ${fmt(last.denied)} denied/s, ${fmt(last.shadow_denied)} shadow-denied/s · ${v.rules_seen} rules have counted hits since start.`
    : "Waiting for the second sample…";
  const body = $("#live-rules tbody");
  body.replaceChildren(...v.rules.map(r => el("tr", {},
    el("td", {}, r.domain), el("td", {}, ruleCell(r.domain, r.rule)),
    el("td", { class: "num" }, fmt(r.now.admitted)), el("td", { class: "num" }, fmt(r.now.denied)),
    el("td", { class: "num" }, fmt(r.now.shadow_denied)), el("td", {}, lineChart(r.series, 180, 28, false)))));
}
refreshers.live = loadLive;

// ---- top denied ----
async function loadTop() {
  let v;
  try { v = await getJSON("/console/api/top?n=50"); } catch (e) { return; }
  const body = $("#top-table tbody");
  if (v.top.length === 0) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 3, class: "muted" }, "Nothing denied lately.")));
    return;
  }
  body.replaceChildren(...v.top.map(e => el("tr", {},
    el("td", { class: "num" }, e.denials), el("td", { class: "num muted" }, e.error),
    el("td", {}, el("code", {}, e.descriptor), e.shadow ? el("span", { class: "badge shadow" }, "shadow") : ""))));
}
refreshers.top = loadTop;

// ---- quota ----
async function loadQuota() {
  let v;
  try { v = await getJSON("/console/api/quota"); } catch (e) { return; }
  const body = $("#quota-table tbody");
  if (v.buckets.length === 0) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No client asks for quota.")));
    return;
  }
  const rows = [];
  for (const b of v.buckets) {
    const id = Object.keys(b.bucket_id).sort().map(k => `${k}=${b.bucket_id[k]}`).join(", ");
    rows.push(el("tr", { class: "quota-bucket" },
      el("td", { colspan: 7 }, el("code", {}, `${b.domain}: ${id}`), " ", ruleCell(b.domain, b.rule), ` · ${b.requests} per ${human(b.period)}`,
        b.shared ? el("span", { class: "muted" }, ` · shared with other daemons: ${b.shared.grant} granted here; ` +
          (b.shared.other_clients === 0 ? "no clients elsewhere" :
            `${b.shared.other_clients} client${b.shared.other_clients === 1 ? "" : "s"} elsewhere ask${b.shared.other_clients === 1 ? "s" : ""} ${b.shared.other_demand}`)) : "")));
    for (const c of b.clients) rows.push(el("tr", {},
      el("td", {}, ""), el("td", {}, `#${c.client} `, el("span", { class: "muted" }, b.peers[c.client] || "gone")),
      el("td", { class: "num" }, c.demand), el("td", { class: "num" }, c.share),
      el("td", { class: "num" }, c.committed), el("td", { class: "num" }, c.burst),
      el("td", { class: "num" }, human(c.interval))));
  }
  body.replaceChildren(...rows);
}
refreshers.quota = loadQuota;

// ---- inspect ----
async function inspect(ev) {
  ev.preventDefault();
  const f = new FormData($("#inspect-form"));
  const q = new URLSearchParams({ domain: f.get("domain") });
  for (const part of String(f.get("descriptor")).split(",")) if (part.trim()) q.append("entry", part.trim());
  $("#inspect-error").textContent = "";
  let v;
  try { v = await getJSON("/console/api/inspect?" + q); } catch (e) { $("#inspect-error").textContent = e.message; return; }
  $("#inspect-table tbody").replaceChildren(...v.buckets.map(b => el("tr", {},
    el("td", {}, el("code", {}, b.descriptor)),
    el("td", {}, b.matched ? (b.rule || "") : el("span", { class: "muted" }, "no rule matches")),
    el("td", {}, b.unlimited ? "unlimited" : (b.limit ? `${b.algorithm ? b.algorithm + " · " : ""}${b.limit}` : "")),
    el("td", { class: "num" }, b.matched && !b.unlimited ? (b.debt ? `0 (in debt: ${b.debt} owed)` : b.remaining) : ""),
    el("td", {}, b.matched && !b.unlimited ? human(b.reset_after_ns) : ""))));
}

// ---- simulate ----
function fillRuleChoices() {
  const sel = $("#sim-form select[name=rule]");
  const keep = sel.value;
  sel.replaceChildren(el("option", { value: "" }, "these algorithms:"));
  const walk = (domain, ds) => {
    for (const d of ds || []) {
      if (d.rate_limits && d.rate_limits.some(l => !l.unlimited && !l.deny_all)) {
        sel.append(el("option", { value: JSON.stringify([domain, d.stat_key]) }, `rule ${ruleName(domain, d.stat_key)}`));
      }
      walk(domain, d.descriptors);
    }
  };
  let n = 0;
  for (const dom of policy.domains) { if (n++ < 200) walk(dom.domain, dom.descriptors); }
  sel.value = keep;
}
async function runSimulation(ev) {
  if (ev) ev.preventDefault();
  const f = new FormData($("#sim-form"));
  const q = new URLSearchParams();
  if (f.get("rule")) {
    const [domain, key] = JSON.parse(f.get("rule"));
    q.set("domain", domain); q.set("stat_key", key);
  } else {
    q.set("alg", f.getAll("alg").join(","));
    for (const k of ["requests", "period", "burst"]) q.set(k, f.get(k));
  }
  if (!f.get("rule") && f.get("overdraft")) q.set("overdraft", "true");
  for (const k of ["pattern", "rate", "size", "every", "seed", "duration", "times", "cost", "hold", "unreleased"]) if (f.get(k)) q.set(k, f.get(k));
  $("#sim-error").textContent = "";
  let v;
  try { v = await postJSON("/console/api/simulate", Object.fromEntries(q)); } catch (e) { $("#sim-error").textContent = e.message; return; }
  // A concurrency lane's requests release their units (hold): the daemon
  // reports how many did for those lanes only.
  const holds = l => l.released !== undefined;
  const released = v.lanes.some(holds);
  $("#sim-totals").replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, el("th", {}, "lane"), el("th", { class: "num" }, "admitted"), el("th", { class: "num" }, "denied"), el("th", { class: "num" }, `most admitted within ${v.period}`),
      ...(released ? [el("th", { class: "num" }, "released")] : []))),
    el("tbody", {}, ...v.lanes.map(l => el("tr", { "data-lane": l.lane }, el("td", {}, l.lane), el("td", { class: "num" }, l.admitted), el("td", { class: "num" }, l.denied), el("td", { class: "num" }, l.max_admitted_in_period),
      ...(released ? [el("td", { class: "num released" }, holds(l) ? l.released : "")] : []))))));
  // The SVG is drawn by the daemon (internal/operator/simulate), which escapes every
  // name in it; it has no scripts.
  const doc = new DOMParser().parseFromString(v.svg, "image/svg+xml");
  $("#sim-chart").replaceChildren(document.importNode(doc.documentElement, true));
}
let simulated = false;
refreshers.simulate = () => { if (!simulated) { simulated = true; runSimulation(); } };

// ---- start ----
document.addEventListener("DOMContentLoaded", () => {
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => show(b.dataset.tab));
  $("#policy-filter").addEventListener("input", renderPolicy);
  $("#inspect-form").addEventListener("submit", inspect);
  $("#sim-form").addEventListener("submit", runSimulation);
  loadPolicy().then(() => show(location.hash.slice(1) || "policies"));
  setInterval(() => { if (active === "live") loadLive(); }, 1000);
  setInterval(() => { if (active === "top") loadTop(); }, 2000);
  setInterval(() => { if (active === "quota") loadQuota(); }, 1000);
  setInterval(() => { if (active === "policies") loadPolicy(); }, 5000);
});
