// tenure's dashboard: live counts, the event feed and chart, live job pages, and
// the pages' actions sent to the JSON API. Values are put in the page as text
// (textContent), never as markup.
"use strict";

const root = document.body.dataset.root || "";

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.message || response.statusText);
  return data;
}

function notify(text, failed) {
  const notice = document.getElementById("notice");
  notice.textContent = text;
  notice.className = failed ? "error" : "ok";
  notice.hidden = false;
}

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

// -- the overview: counts, feed, chart ----------------------------------------

const BUCKET_MS = 5000;
const BUCKETS = 36;
const FEED_ROWS = 200;
const STALLS_KEPT = 1000;  // stalled jobs whose next start the latency chart waits for

function link(text, href) {
  const anchor = element("a", text);
  anchor.href = href;
  return anchor;
}

// A new queue's row, in name order (not a reload: the feed and charts would
// lose what they saw).
function addQueueRow(body, queue) {
  const path = root + "/queues/" + encodeURIComponent(queue.name);
  const row = element("tr");
  row.dataset.queue = queue.name;
  row.append(element("td"));
  row.lastChild.append(link(queue.name, path + "/policy"));
  for (const state of Object.keys(queue.counts)) {
    row.append(element("td", undefined, "num"));
    row.lastChild.dataset.state = state;
  }
  row.append(element("td", undefined, "num"));
  row.lastChild.dataset.lag = "";
  row.append(element("td"));
  row.lastChild.append(link("dead-letter queue", path + "/dead"));
  const next = [...body.rows].find((r) => r.dataset.queue > queue.name);
  body.insertBefore(row, next || null);
  return row;
}

function refreshCounts() {
  api("GET", root + "/api/queues").then((data) => {
    const body = document.querySelector("#queues tbody");
    if (!body && data.queues.length) {
      location.reload();  // the first queue: the page has no table yet
      return;
    }
    for (const queue of data.queues) {
      const row = body.querySelector(`tr[data-queue="${CSS.escape(queue.name)}"]`)
        || addQueueRow(body, queue);
      for (const [state, n] of Object.entries(queue.counts)) {
        const cell = row.querySelector(`td[data-state="${state}"]`);
        if (cell) cell.textContent = String(n);
      }
      row.querySelector("td[data-lag]").textContent = queue.lag.toFixed(2) + " s";
    }
  }, () => {});
}

function feedRow(event) {
  const row = element("li", undefined, "event " + event.kind);
  row.append(element("time", new Date(event.at * 1000).toLocaleTimeString()));
  row.append(element("span", event.kind, "state " + event.kind));
  row.append(element("span", event.queue, "queue"));
  row.append(link(event.job_id.slice(-12), root + "/jobs/" + encodeURIComponent(event.job_id)));
  const detail = event.data.detector || event.data.dead_reason || event.data.outcome || "";
  if (detail) row.append(element("span", String(detail), "detail"));
  return row;
}

// Bars of one chart, one a slot, oldest first: parts are [className, value of a slot].
function drawBars(chart, slots, parts, describe) {
  const total = (slot) => parts.reduce((sum, [, value]) => sum + value(slot), 0);
  const most = Math.max(1e-9, ...slots.map(total));
  chart.replaceChildren(...slots.map((slot) => {
    const bar = element("div", undefined, "bar");
    bar.title = describe(slot);
    for (const [name, value] of parts) {
      const part = element("span", undefined, name);
      part.style.height = (100 * value(slot) / most) + "%";
      bar.append(part);
    }
    return bar;
  }));
}

// Throughput and recovery latency, from the events alone. A recovery's latency
// is its job's next start minus when the stalled attempt went silent (the
// stalled event's time minus its silent_for): the time the job was lost for.
function overviewCharts() {
  const slots = new Map();  // slot start (ms) -> {completed, stalled, recovered, worst}
  const silentSince = new Map();  // job id -> ms its stalled attempt went silent
  const slotAt = (ms) => {
    const at = Math.floor(ms / BUCKET_MS) * BUCKET_MS;
    if (!slots.has(at)) slots.set(at, { completed: 0, stalled: 0, recovered: 0, worst: 0 });
    return slots.get(at);
  };
  const count = (event) => {
    const at = event.at * 1000;
    if (event.kind === "stalled") {
      silentSince.set(event.job_id, at - 1000 * (event.data.silent_for || 0));
      while (silentSince.size > STALLS_KEPT) silentSince.delete(silentSince.keys().next().value);
    } else if (event.kind === "started" && silentSince.has(event.job_id)) {
      const slot = slotAt(at);
      slot.recovered += 1;
      slot.worst = Math.max(slot.worst, (at - silentSince.get(event.job_id)) / 1000);
      silentSince.delete(event.job_id);
    } else if (event.kind === "dead" || event.kind === "cancelled") {
      silentSince.delete(event.job_id);
    }
    if (event.kind === "completed" || event.kind === "stalled") slotAt(at)[event.kind] += 1;
  };
  const draw = () => {
    const last = Math.floor(Date.now() / BUCKET_MS) * BUCKET_MS;
    const shown = [];
    for (let i = BUCKETS - 1; i >= 0; i--) shown.push(slotAt(last - i * BUCKET_MS));
    for (const at of slots.keys()) if (at < last - (BUCKETS - 1) * BUCKET_MS) slots.delete(at);
    drawBars(document.getElementById("chart"), shown,
      [["stalled", (s) => s.stalled], ["completed", (s) => s.completed]],
      (s) => `${s.completed} completed, ${s.stalled} stalled`);
    drawBars(document.getElementById("latency"), shown, [["recovery", (s) => s.worst]],
      (s) => s.recovered ? `${s.recovered} recovered, slowest ${s.worst.toFixed(2)} s` : "none recovered");
    const worst = Math.max(0, ...shown.map((s) => s.worst));
    document.getElementById("latency-worst").textContent =
      worst ? `Slowest shown: ${worst.toFixed(2)} s.` : "";
  };
  return { count, draw };
}

function startOverview(feed) {
  const charts = overviewCharts();
  let countsDue = null;
  // From now on (a fresh page need not replay the retention window); a
  // reconnect resumes after the last id the stream gave, exactly.
  const source = new EventSource(feed.dataset.events);
  source.onopen = () => { feed.dataset.connected = "true"; };
  source.onerror = () => { delete feed.dataset.connected; };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    feed.prepend(feedRow(event));
    while (feed.children.length > FEED_ROWS) feed.lastChild.remove();
    charts.count(event);
    if (countsDue === null) countsDue = setTimeout(() => { countsDue = null; refreshCounts(); charts.draw(); }, 250);
  };
  charts.draw();
  setInterval(charts.draw, BUCKET_MS);
}

// -- a job's page: reloaded when its state changes ----------------------------

function startJob(job) {
  const poll = setInterval(() => {
    api("GET", root + "/api/jobs/" + encodeURIComponent(job.dataset.job)).then((data) => {
      if (data.state !== job.dataset.state) {
        clearInterval(poll);
        location.reload();
      }
    }, () => {});
  }, 1000);
}

// -- actions ------------------------------------------------------------------

function policyChanges(form) {
  const changes = {};
  for (const input of form.querySelectorAll("input[name]")) {
    if (input.value === input.dataset.initial) continue;
    try {
      changes[input.name] = JSON.parse(input.value);
    } catch {
      changes[input.name] = input.value;  // a bare word: the string itself, as the CLI reads it
    }
  }
  return changes;
}

const ACTIONS = {
  cancel: () => ["POST", undefined, "cancelled"],
  retry: (form, submitter) => {
    const ids = [...form.querySelectorAll("input[name=ids]:checked")].map((box) => box.value);
    const body = submitter && submitter.value === "all" ? { all: true } : { ids };
    return ["POST", { ...body, by: "dashboard" }, "retried"];
  },
  purge: (form) => ["POST", { all: true, confirm: form.elements.confirm.value }, "purged"],
  policy: (form) => ["PUT", policyChanges(form), "saved"],
};

function onSubmit(event) {
  const form = event.target;
  const action = ACTIONS[form.dataset.action];
  if (!action) return;
  event.preventDefault();
  const [method, body, done] = action(form, event.submitter);
  api(method, form.dataset.api, body).then((data) => {
    const n = typeof data[done] === "number" ? ` ${data[done]}` : "";
    notify(done + n);
    setTimeout(() => location.reload(), 600);
  }, (error) => notify(error.message, true));
}

document.addEventListener("submit", onSubmit);
const feed = document.getElementById("feed");
if (feed) startOverview(feed);
const job = document.getElementById("job");
if (job && job.hasAttribute("data-live")) startJob(job);
