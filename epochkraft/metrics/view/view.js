// The live view: a snapshot when the stream opens, then deltas and timeline events (see live_view.py).
"use strict";
const MAX_ROWS = 500;   // partition rows drawn at once; the filter narrows the rest
const MAX_EVENTS = 400; // timeline entries drawn
const view = { brokers: new Map(), partitions: new Map(), quorum: null, timeline: [] };

const $ = (id) => document.getElementById(id);
const list = (xs) => (xs && xs.length ? xs.join(",") : "–");

function brokerState(b) {
  if (b.in_controlled_shutdown) return "controlled-shutdown";
  return b.fenced ? "fenced" : "unfenced";
}

function drawBrokers() {
  const rows = [...view.brokers.values()].sort((a, b) => a.id - b.id).map((b) => {
    const state = brokerState(b);
    const age = b.heartbeat_age_s == null ? "–" : `${b.heartbeat_age_s} s`;
    const positions = b.positions_stale ? "stale: last read failed" : "";
    return `<tr class="${state}" data-broker="${b.id}" data-state="${state}" data-epoch="${b.epoch}" data-positions-stale="${!!b.positions_stale}">` +
      `<td>${b.id}</td><td>${state}</td><td>${b.epoch}</td><td>${b.incarnation.slice(0, 8)}</td>` +
      `<td>${age}</td><td>${list(b.endpoints)}</td><td>${positions}</td></tr>`;
  });
  $("brokers").tBodies[0].innerHTML = rows.join("");
}

function drawQuorum() {
  const q = view.quorum;
  $("quorum").innerHTML = q
    ? `<table><tr><th>this controller</th><td>${q.node_id} (${q.role})</td></tr>` +
      `<tr><th>leader</th><td data-leader="${q.leader}">${q.leader ?? "–"}</td></tr>` +
      `<tr><th>epoch</th><td>${q.epoch}</td></tr><tr><th>high watermark</th><td>${q.high_watermark}</td></tr>` +
      `<tr><th>log end</th><td>${q.log_end_offset}</td></tr><tr><th>voters</th><td>${list(q.voters)}</td></tr></table>`
    : "a single controller";
}

// each replica's log end; a "?" after those of a broker whose last read failed (its earlier answer kept)
const ends = (byBroker, stale) => (byBroker
  ? Object.entries(byBroker).map(([b, end]) => `${b}:${end}${stale.has(b) ? "?" : ""}`).join(" ") : "–");

function partitionMatches(p, words) {
  return words.every((w) =>
    `${p.topic}-${p.partition}`.startsWith(w) || p.topic === w ||
    (w === "leaderless" && p.leaderless) || (w === "under-min-isr" && p.under_min_isr) ||
    p.replicas.map(String).includes(w));
}

function drawPartitions() {
  const words = $("partition-filter").value.trim().split(/\s+/).filter(Boolean);
  const all = [...view.partitions.values()];
  const shown = all.filter((p) => partitionMatches(p, words))
    .sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const stale = new Set([...view.brokers.values()].filter((b) => b.positions_stale).map((b) => String(b.id)));
  const rows = shown.slice(0, MAX_ROWS).map((p) => {
    const key = `${p.topic}-${p.partition}`;
    const cls = p.leaderless ? "leaderless" : p.under_min_isr ? "under-min-isr" : "";
    return `<tr class="${cls}" data-partition="${key}" data-leader="${p.leader}" data-isr="${p.isr.join(",")}" data-elr="${(p.elr || []).join(",")}" data-hw="${p.high_watermark ?? ""}">` +
      `<td>${key}</td><td>${p.leader < 0 ? "none" : p.leader}</td><td>${p.leader_epoch}</td>` +
      `<td>${p.partition_epoch}</td><td>${list(p.replicas)}</td><td>${list(p.isr)}</td>` +
      `<td>${list(p.elr)}</td><td>${list(p.last_known_elr)}</td>` +
      `<td>${p.high_watermark ?? "–"}</td><td>${ends(p.log_end, stale)}</td><td>${p.lag ?? "–"}</td>` +
      `<td>${p.leader_recovery_state}</td></tr>`;
  });
  $("partitions").tBodies[0].innerHTML = rows.join("");
  const leaderless = all.filter((p) => p.leaderless).length;
  const under = all.filter((p) => p.under_min_isr).length;
  $("partition-counts").textContent = `(${all.length}; ${leaderless} leaderless, ${under} under min ISR)`;
  $("partitions-shown").textContent = shown.length > MAX_ROWS ? `showing ${MAX_ROWS} of ${shown.length}` : "";
}

const EVENT_CLASSES = {
  isr_change_rejected: "refused", broker_fenced: "fenced", leader_elected: "elected", elr_change_committed: "elr", fault_injected: "fault",
};
const eventClass = (e) => EVENT_CLASSES[e.event] || "";

function describe(e) {
  const where = e.topic !== undefined ? `${e.topic}-${e.partition}` : e.topic_id !== undefined ? `${e.topic_id.slice(0, 8)}-${e.partition}` : "";
  const rest = Object.entries(e).filter(([k]) => !["ts_ms", "event", "topic", "partition", "topic_id"].includes(k))
    .map(([k, v]) => `${k}=${Array.isArray(v) ? `[${v}]` : v}`).join(" ");
  return `${new Date(e.ts_ms).toISOString().slice(11, 23)} ${e.event} ${where} ${rest}`;
}

function drawTimeline() {
  const words = $("timeline-filter").value.trim().split(/\s+/).filter(Boolean);
  const shown = view.timeline.filter((e) => words.every((w) => describe(e).split(" ").some((t) => t === w || t.endsWith(`=${w}`) || t.startsWith(w))));
  $("timeline").innerHTML = shown.slice(-MAX_EVENTS).reverse()
    .map((e) => `<li class="${eventClass(e)}" data-event="${e.event}">${describe(e)}</li>`).join("");
}

function drawAll() { drawBrokers(); drawQuorum(); drawPartitions(); drawTimeline(); }

function applyDelta(d) {
  for (const b of d.brokers || []) view.brokers.set(b.id, b);
  for (const id of d.removed_brokers || []) view.brokers.delete(id);
  for (const p of d.partitions || []) view.partitions.set(`${p.topic}-${p.partition}`, p);
  for (const key of d.removed_partitions || []) view.partitions.delete(key);
  if ("quorum" in d) view.quorum = d.quorum;
  if (d.cluster) $("cluster").textContent = `cluster ${d.cluster.cluster_id} · metadata offset ${d.cluster.metadata_offset}`;
}

let pending = false; // one redraw per animation frame, however many messages arrive
function redraw() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; drawAll(); });
}

function connect() {
  const source = new EventSource("events");
  source.addEventListener("open", () => { $("connection").textContent = "live"; $("connection").className = "up"; });
  source.addEventListener("error", () => { $("connection").textContent = "reconnecting"; $("connection").className = "down"; });
  source.addEventListener("snapshot", (m) => {
    const s = JSON.parse(m.data);
    view.brokers.clear(); view.partitions.clear();
    applyDelta({ brokers: s.brokers, partitions: s.partitions, quorum: s.quorum, cluster: s.cluster });
    view.timeline = s.timeline;
    redraw();
  });
  source.addEventListener("delta", (m) => { applyDelta(JSON.parse(m.data)); redraw(); });
  source.addEventListener("timeline", (m) => {
    view.timeline.push(...JSON.parse(m.data));
    if (view.timeline.length > 4 * MAX_EVENTS) view.timeline.splice(0, view.timeline.length - MAX_EVENTS);
    redraw();
  });
}

$("partition-filter").addEventListener("input", drawPartitions);
$("timeline-filter").addEventListener("input", drawTimeline);
connect();
