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

function refreshCounts() {
  api("GET", root + "/api/queues").then((data) => {
    for (const queue of data.queues) {
      const row = document.querySelector(`tr[data-queue="${CSS.escape(queue.name)}"]`);
      if (!row) {
        location.reload();  // a new queue: the page has no row for it yet
        return;
      }
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
  const link = element("a", event.job_id.slice(-12));
  link.href = root + "/jobs/" + encodeURIComponent(event.job_id);
  row.append(link);
  const detail = event.data.detector || event.data.dead_reason || event.data.outcome || "";
  if (detail) row.append(element("span", String(detail), "detail"));
  return row;
}

function startOverview(feed) {
  const chart = document.getElementById("chart");
  const buckets = [];  // [{at, completed, stalled}], oldest first
  let countsDue = null;
  const drawChart = () => {
    const now = Date.now();
    while (buckets.length && buckets[0].at < now - BUCKETS * BUCKET_MS) buckets.shift();
    const most = Math.max(1, ...buckets.map((b) => b.completed + b.stalled));
    chart.replaceChildren(...buckets.map((b) => {
      const bar = element("div", undefined, "bar");
      bar.title = `${b.completed} completed, ${b.stalled} stalled`;
      const done = element("span", undefined, "completed");
      done.style.height = (100 * b.completed / most) + "%";
      const stalled = element("span", undefined, "stalled");
      stalled.style.height = (100 * b.stalled / most) + "%";
      bar.append(stalled, done);
      return bar;
    }));
  };
  const count = (event) => {
    if (event.kind !== "completed" && event.kind !== "stalled") return;
    const at = Math.floor(event.at * 1000 / BUCKET_MS) * BUCKET_MS;
    if (at < Date.now() - BUCKETS * BUCKET_MS) return;  // replayed history
    let last = buckets[buckets.length - 1];
    if (!last || last.at !== at) buckets.push(last = { at, completed: 0, stalled: 0 });
    last[event.kind] += 1;
  };
  const source = new EventSource(feed.dataset.events);
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    feed.prepend(feedRow(event));
    while (feed.children.length > FEED_ROWS) feed.lastChild.remove();
    count(event);
    if (countsDue === null) countsDue = setTimeout(() => { countsDue = null; refreshCounts(); drawChart(); }, 250);
  };
  setInterval(drawChart, BUCKET_MS);
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
    return ["POST", body, "retried"];
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
