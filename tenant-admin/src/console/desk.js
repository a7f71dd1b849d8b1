// The desk's one script: when this node's replica of the ledger moves (server-sent events),
// the "Now" section is fetched again and swapped in. No polling; nothing is decided here.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const now = document.getElementById("now");
  if (!now || typeof EventSource === "undefined") return;
  let fetching = false;
  let again = false;
  const refresh = async () => {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      const answer = await fetch("/console/now", { credentials: "same-origin", cache: "no-store" });
      if (answer.ok) {
        now.innerHTML = await answer.text();
        now.dataset.revision = String((Number(now.dataset.revision) || 0) + 1);
      }
    } finally {
      fetching = false;
      if (again) { again = false; refresh(); }
    }
  };
  const events = new EventSource("/console/events");
  events.addEventListener("change", refresh);
});
