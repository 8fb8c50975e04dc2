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

  // Output events carry the attempt's text from ``offset`` on, both counted in code points of
  // the text the server holds (the page's <pre> says how many it shows: data-chars). A piece
  // that overlaps what is shown adds only its new end; one from offset 0 is the whole text (shown
  // unless what is shown already begins with it); one past the end means pieces were missed, so
  // the page is taken again.
  function appendOutput(data) {
    const pre = document.getElementById("output-live");
    if (!pre || pre.dataset.executionId !== data.execution_id) { soon(); return; }
    const held = Number(pre.dataset.chars || 0);
    const piece = Array.from(data.text);
    const end = data.offset + piece.length;
    if (data.offset > held) {
      soon();
    } else if (data.offset === 0) {
      if (!(end <= held && pre.textContent.startsWith(data.text))) {
        pre.textContent = data.text;
        pre.dataset.chars = String(end);
        showCount(data);
      }
    } else if (end > held) {
      pre.append(piece.slice(held - data.offset).join(""));
      pre.dataset.chars = String(end);
      showCount(data);
    }
    if (data.final) soon();
  }

  function showCount(data) {
    const count = document.getElementById("output-live-count");
    if (count && typeof data.bytes === "number") {
      count.textContent = data.bytes + " bytes" + (data.truncated ? ", truncated" : "");
    }
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
