// The appliance console's only script: local and relative times, and the live view over
// server-sent events. No build step, no library, nothing from the network; it never inserts
// text as HTML (the server has escaped every value; live text is set with textContent).
"use strict";
(function () {
  const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const UNITS = [["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];

  function ago(deltaMs) {
    const seconds = Math.round(deltaMs / 1000);
    for (const [unit, size] of UNITS) {
      if (Math.abs(seconds) >= size || unit === "second") {
        return relative.format(Math.round(seconds / size), unit);
      }
    }
    return "";
  }

  function renderTimes(root) {
    for (const el of root.querySelectorAll("time[datetime]")) {
      const when = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(when.getTime())) continue;
      el.title = el.getAttribute("datetime");
      el.textContent = when.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }) +
        " (" + ago(when.getTime() - Date.now()) + ")";
    }
  }

  const body = document.body;
  const page = body.dataset.page;
  let refreshing = null;
  let again = false;

  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = (async () => {
      try {
        const response = await fetch(location.href, { credentials: "same-origin", headers: { "X-Console-Refresh": "1" } });
        if (!response.ok) return;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        const next = fresh.getElementById("live");
        const here = document.getElementById("live");
        if (!next || !here) return;
        here.replaceChildren(...Array.from(next.childNodes, (n) => document.importNode(n, true)));
        renderTimes(here);
      } finally {
        refreshing = null;
        if (again) { again = false; setTimeout(refresh, 200); }
      }
    })();
  }

  function concerns(change) {
    if (change.kind === "bulk" || change.kind === "cluster") return true;
    if (page === "overview" || page === "schedules") return true;
    if (page === "schedule") {
      const id = Number(body.dataset.scheduleId);
      return (change.kind === "schedule" && change.id === id) ||
        (change.kind === "occurrence" && change.schedule_id === id);
    }
    if (page === "occurrence") {
      return change.kind === "occurrence" && change.id === Number(body.dataset.occurrenceId);
    }
    return false;
  }

  let timer = null;
  function soon() {
    if (timer) return;
    timer = setTimeout(() => { timer = null; refresh(); }, 150);
  }

  function appendOutput(data) {
    const pre = document.getElementById("output-live");
    if (!pre || pre.dataset.executionId !== data.execution_id) { soon(); return; }
    const shown = pre.textContent;
    if (data.offset === 0) {
      pre.textContent = data.text;
    } else if (data.offset === shown.length) {
      pre.append(data.text);
    } else if (data.offset > shown.length) {
      soon(); // lines were missed: take the page again
    }
    if (data.final) soon();
  }

  renderTimes(document);
  setInterval(() => renderTimes(document), 30000);

  const url = body.dataset.events;
  if (url && window.EventSource) {
    const status = document.getElementById("live-status");
    const source = new EventSource(url);
    source.addEventListener("open", () => { if (status) { status.textContent = "live"; status.classList.add("on"); } });
    source.addEventListener("error", () => { if (status) { status.textContent = "reconnecting"; status.classList.remove("on"); } });
    source.addEventListener("change", (event) => { if (concerns(JSON.parse(event.data))) soon(); });
    source.addEventListener("output", (event) => appendOutput(JSON.parse(event.data)));
    source.addEventListener("reset", () => soon());
    window.addEventListener("pagehide", () => source.close());
  }
})();
