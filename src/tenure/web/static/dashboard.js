// tenure's dashboard: live counts, the event feed and chart, live job pages, and
// the pages' actions sent to the JSON API. Values are put in the page as text
// (textContent), never as markup, and through visible().
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
  notice.textContent = visible(text);
  notice.className = failed ? "error" : "ok";
  notice.hidden = false;
}

// Invisible characters (bidirectional overrides, zero-width and other format
// characters, controls but tab and newline, line separators) as escapes, as the
// pages' Jinja filter writes them: a worker "\u202eevil" must not read "live".
const HIDDEN = /[\p{Cf}\p{Cc}\p{Zl}\p{Zp}]/gu;

function visible(text) {
  return String(text).replace(HIDDEN, (char) => {
    if (char === "\n" || char === "\t") return char;
    const code = char.codePointAt(0);
    return code <= 0xffff ? "\\u" + code.toString(16).padStart(4, "0")
      : "\\U" + code.toString(16).padStart(8, "0");
  });
}

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = visible(text);
  if (className) node.className = className;
  return node;
}

// -- the overview: counts, feed, chart ----------------------------------------

const BUCKET_MS = 10000;
const FEED_ROWS = 200;
const KEPT = 2000;  // recent events the feed is drawn from, at least (progress ones too)
const LOOKUPS = 4;  // requests at once for the task of a job the page saw no enqueue of
const STALLS_KEPT = 1000;  // stalled jobs whose next start the latency chart waits for

// A time as the pages show it: local ISO time with seconds ("2026-12-04 17:03:09").
function isoTime(ms) {
  const d = new Date(ms);
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} `
    + `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

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
    row.lastChild.append(link("", path + "/jobs?state=" + state));
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
        const cell = row.querySelector(`td[data-state="${state}"] a`);
        if (cell) cell.textContent = String(n);
      }
      row.querySelector("td[data-lag]").textContent = queue.lag.toFixed(2) + " s";
    }
  }, () => {});
}

// Task names of the jobs the feed shows: from their enqueued events, else
// asked of the API, a few at a time, once each.
function taskNames(changed) {
  const names = new Map();
  const wanted = [];
  let asking = 0;
  const ask = () => {
    while (asking < LOOKUPS && wanted.length) {
      const id = wanted.shift();
      asking += 1;
      api("GET", root + "/api/jobs/" + encodeURIComponent(id)).then(
        (job) => names.set(id, job.task), () => names.set(id, "?"),
      ).finally(() => { asking -= 1; changed(); ask(); });
    }
  };
  return {
    learn(event) {
      if (event.kind === "enqueued" && event.data.task) names.set(event.job_id, event.data.task);
    },
    // Only the jobs of these ids are remembered from now on: a page left open
    // on a busy queue sees millions of jobs.
    keepOnly(ids) {
      for (const id of names.keys()) if (!ids.has(id)) names.delete(id);
    },
    size: () => names.size,
    of(id) {
      if (!names.has(id)) {
        names.set(id, "");
        wanted.push(id);
        ask();
      }
      return names.get(id);
    },
  };
}

function feedRow(event, task) {
  const row = element("li", undefined, "event " + event.kind);
  const time = element("time", isoTime(event.at * 1000));
  time.dateTime = new Date(event.at * 1000).toISOString();
  row.append(time);
  row.append(element("span", event.kind, "state " + event.kind));
  row.append(element("span", event.queue, "queue"));
  row.append(element("span", task, "task"));
  // The whole id: any part of it shorter would not name the job where ids are
  // taken (a prefix does, but a UUIDv7 id is its time for its first 12 digits).
  row.append(link(event.job_id, root + "/jobs/" + encodeURIComponent(event.job_id)));
  if (event.data.workflow) {
    const wf = link("workflow", root + "/workflows/" + encodeURIComponent(event.data.workflow));
    wf.className = "detail";
    row.append(wf);
  }
  const detail = event.data.detector || event.data.dead_reason || event.data.outcome
    || (event.kind === "progress" ? JSON.stringify(event.data.progress) : "");
  if (detail) row.append(element("span", String(detail), "detail"));
  return row;
}

// The feed, newest first, drawn again from the events kept: progress events
// only when asked for.
function eventFeed(feed) {
  const kept = [];
  const toggle = document.getElementById("show-progress");
  let due = null;
  const draw = () => {
    due = null;
    const rows = [];
    for (let i = kept.length - 1; i >= 0 && rows.length < FEED_ROWS; i--) {
      if (kept[i].kind !== "progress" || toggle.checked) rows.push(kept[i]);
    }
    feed.replaceChildren(...rows.map((e) => feedRow(e, tasks.of(e.job_id))));
  };
  const later = () => { if (due === null) due = setTimeout(draw, 100); };
  const tasks = taskNames(later);
  toggle.addEventListener("change", draw);
  return {
    add(event) {
      tasks.learn(event);
      kept.push(event);
      if (kept.length >= 2 * KEPT) {  // now and then, not at every event of a replay
        kept.splice(0, kept.length - KEPT);
        if (tasks.size() > 2 * KEPT) tasks.keepOnly(new Set(kept.map((e) => e.job_id)));
      }
      later();
    },
  };
}

// Bars of one chart, one a slot, oldest first: parts are [className, value of a slot].
function drawBars(chart, slots, parts, describe) {
  const total = (slot) => parts.reduce((sum, [, value]) => sum + value(slot), 0);
  const most = Math.max(1e-9, ...slots.map(total));
  const axis = document.getElementById(chart.id + "-max");
  const top = Math.max(...slots.map(total));
  axis.textContent = `${Number.isInteger(top) ? top : top.toFixed(2)} ${axis.dataset.unit}`;
  const figure = chart.closest("figure");
  figure.querySelector(".x-axis .from").textContent = isoTime(slots[0].at);
  figure.querySelector(".x-axis .to").textContent = isoTime(slots[slots.length - 1].at + BUCKET_MS);
  chart.replaceChildren(...slots.map((slot) => {
    const bar = element("div", undefined, "bar");
    bar.title = `${isoTime(slot.at)}: ${describe(slot)}`;
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
function overviewCharts(buckets) {
  const slots = new Map();  // slot start (ms) -> {completed, stalled, recovered, worst}
  const silentSince = new Map();  // job id -> ms its stalled attempt went silent
  const slotAt = (ms) => {
    const at = Math.floor(ms / BUCKET_MS) * BUCKET_MS;
    if (!slots.has(at)) slots.set(at, { at, completed: 0, stalled: 0, recovered: 0, worst: 0 });
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
    for (let i = buckets - 1; i >= 0; i--) shown.push(slotAt(last - i * BUCKET_MS));
    for (const at of slots.keys()) if (at < last - (buckets - 1) * BUCKET_MS) slots.delete(at);
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
  const charts = overviewCharts(Math.ceil(Number(feed.dataset.history) * 1000 / BUCKET_MS));
  const events = eventFeed(feed);
  let countsDue = null;
  // The recent past first (?since=), then live; a reconnect resumes after
  // the last id the stream gave, exactly.
  const source = new EventSource(feed.dataset.events);
  source.onopen = () => { feed.dataset.connected = "true"; };
  source.onerror = () => { delete feed.dataset.connected; };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    events.add(event);
    charts.count(event);
    if (countsDue === null) countsDue = setTimeout(() => { countsDue = null; refreshCounts(); charts.draw(); }, 250);
  };
  charts.draw();
  setInterval(charts.draw, BUCKET_MS);
}

// -- a job's page: its progress live, reloaded when its state changes --------

function startJob(job) {
  const progress = document.getElementById("progress");
  const poll = setInterval(() => {
    api("GET", root + "/api/jobs/" + encodeURIComponent(job.dataset.job)).then((data) => {
      if (data.state !== job.dataset.state) {
        clearInterval(poll);
        location.reload();
      } else if (data.progress !== null) {
        progress.textContent = visible(JSON.stringify(data.progress));
      }
    }, () => {});
  }, 1000);
}

// -- a workflow's page: its graph's edges, its steps' states live ------------

const EDGES_DRAWN = 2000;  // past these, the steps' "waits for" say it alone
const SVG = "http://www.w3.org/2000/svg";

// A line from each step a step waits for (its right edge) to the step (its left).
function drawEdges(graph) {
  const old = graph.querySelector("svg.edges");
  if (old) old.remove();
  if (Number(graph.dataset.edges) > EDGES_DRAWN) return;
  const svg = document.createElementNS(SVG, "svg");
  svg.classList.add("edges");
  svg.setAttribute("width", graph.scrollWidth);
  svg.setAttribute("height", graph.scrollHeight);
  const origin = graph.getBoundingClientRect();
  const at = (box, side) => {
    const r = box.getBoundingClientRect();
    return [r.left - origin.left + graph.scrollLeft + (side ? r.width : 0),
      r.top - origin.top + graph.scrollTop + r.height / 2];
  };
  for (const step of graph.querySelectorAll("li.step[data-waits]")) {
    for (const n of step.dataset.waits.split(" ").filter(Boolean)) {
      const from = document.getElementById("step-" + n);
      if (!from) continue;
      const [x1, y1] = at(from, true), [x2, y2] = at(step, false);
      const line = document.createElementNS(SVG, "line");
      for (const [k, v] of Object.entries({ x1, y1, x2, y2 })) line.setAttribute(k, v);
      svg.append(line);
    }
  }
  graph.prepend(svg);
}

// "1 queued, 2 completed": the steps counted by state, in the states' order.
function drawCounts(counts, jobs) {
  const parts = [];
  for (const state of counts.dataset.states.split(" ")) {
    const n = jobs.filter((j) => j.state === state).length;
    if (n) parts.push(element("span", `${n} ${state}`, "key step-" + state), ", ");
  }
  counts.replaceChildren(...parts.slice(0, -1));
}

// Each step's state from the API, at most every LIVE_PAUSE ms while events
// about its steps come; a new step (a spawn) or the workflow's end: reload.
const LIVE_PAUSE = 300;

function startWorkflow(workflow, graph) {
  const boxes = new Map([...graph.querySelectorAll("li.step")].map((b) => [b.dataset.job, b]));
  let due = null;
  const refresh = () => {
    due = null;
    api("GET", workflow.dataset.api).then((data) => {
      if (data.state !== workflow.dataset.state || data.jobs.some((j) => !boxes.has(j.id))) {
        location.reload();
        return;
      }
      drawCounts(document.getElementById("step-counts"), data.jobs);
      for (const job of data.jobs) {
        const box = boxes.get(job.id);
        box.className = "step step-" + job.state;
        const state = box.querySelector("[data-state]");
        state.className = "state " + job.state;
        state.textContent = job.state;
        box.querySelector("[data-attempts]").textContent =
          `${job.attempts} attempt${job.attempts === 1 ? "" : "s"}`;
      }
    }, () => {});
  };
  const later = () => { if (due === null) due = setTimeout(refresh, LIVE_PAUSE); };
  const source = new EventSource(workflow.dataset.events);
  source.onopen = later;  // what changed before the stream opened
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (boxes.has(event.job_id) || (event.data && event.data.workflow === workflow.dataset.workflow)) later();
  };
}

// -- actions ------------------------------------------------------------------

// A field's value as the API takes it, or an Error naming what is wrong
// (the same bounds the server checks again).
function fieldValue(input) {
  if (input.type === "checkbox") return input.checked;
  if (input.tagName === "SELECT") return input.value;
  const text = input.value.trim();
  if (text === "") {
    if (input.required) throw new Error(`${input.name}: a number is needed`);
    return null;
  }
  const value = Number(text);
  const low = Number(input.min), high = Number(input.max);
  const integer = input.step === "1";
  const above = input.hasAttribute("data-above");
  if (!Number.isFinite(value) || (integer && !Number.isInteger(value))
      || (above ? value <= low : value < low) || value > high) {
    const kind = integer ? "an integer" : "a number";
    throw new Error(`${input.name} must be ${kind} within ${above ? "(" : "["}${input.min}, ${input.max}], got ${text}`);
  }
  return value;
}

function policyChanges(form) {
  const changes = {};
  for (const input of form.querySelectorAll("[name]")) {
    const value = fieldValue(input);
    if (value !== JSON.parse(input.dataset.initial)) changes[input.name] = value;
  }
  return changes;
}

function selected(form) {
  const boxes = form.querySelectorAll("input[name=ids]:checked, input[type=hidden][name=ids]");
  return [...boxes].map((box) => box.value);
}

// One request; its notice: "<done>" and the count the response gives, if any.
function send(path, method, body, done) {
  return api(method, path, body).then((data) =>
    done + (typeof data[done] === "number" ? ` ${data[done]}` : ""));
}

// Each selected job cancelled by its own request (the API's cancel verb), all at once.
function cancelSelected(ids) {
  if (!ids.length) throw new Error("select jobs first");
  const each = ids.map((id) => api("POST", root + "/api/jobs/" + encodeURIComponent(id) + "/cancel"));
  return Promise.allSettled(each).then((results) => {
    const refused = results.filter((r) => r.status === "rejected");
    const text = `cancelled ${results.length - refused.length}`;
    if (refused.length) throw new Error(`${text}; ${refused.length} refused: ${refused[0].reason.message}`);
    return text;
  });
}

// Each action sends its form and gives the promise of its notice; it throws
// (nothing sent) for what the page itself refuses.
const ACTIONS = {
  cancel: (path) => send(path, "POST", undefined, "cancelled"),
  "cancel-selected": (path, form) => cancelSelected(selected(form)),
  retry: (path, form, submitter) => {
    const all = submitter && submitter.value === "all";
    const ids = selected(form);
    if (!all && !ids.length) throw new Error("select jobs first");
    return send(path, "POST", { ...(all ? { all: true } : { ids }), by: "dashboard" }, "retried");
  },
  purge: (path, form) => send(path, "POST", { all: true, confirm: form.elements.confirm.value }, "purged"),
  policy: (path, form) => send(path, "PUT", policyChanges(form), "saved"),
};

function onSubmit(event) {
  const form = event.target;
  const submitter = event.submitter;
  const action = ACTIONS[(submitter && submitter.dataset.action) || form.dataset.action];
  if (!action) return;
  event.preventDefault();
  let done;
  try {
    done = action(form.dataset.api, form, submitter);
  } catch (error) {
    notify(error.message, true);  // refused in the page: nothing sent
    return;
  }
  done.then((text) => {
    notify(text);
    setTimeout(() => location.reload(), 600);
  }, (error) => notify(error.message, true));
}

document.addEventListener("submit", onSubmit);
const feed = document.getElementById("feed");
if (feed) startOverview(feed);
const job = document.getElementById("job");
if (job && job.hasAttribute("data-live")) startJob(job);
const workflow = document.getElementById("workflow");
const graph = document.getElementById("graph");
if (graph) {
  drawEdges(graph);
  window.addEventListener("resize", () => drawEdges(graph));
}
if (workflow && workflow.hasAttribute("data-live")) startWorkflow(workflow, graph);
