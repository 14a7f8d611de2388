// The Try page: each column is one preview room (the version tried, production) answering the same comment. Like
// preview.js, one WebSocket per room (ws/preview/<room>/?after=<last seq>) delivers its stored events, then live
// ones; its turn is drawn by turns.js (loaded before this script). Room events (opened, …) are not drawn here. A
// column's summary says, once its turn ends, whether it fell back and how long it took.
(function () {
  "use strict";
  const root = document.getElementById("try-draft");
  if (!root) return;
  const { el, badge, ms } = window.hatTurns;

  function column(node) {
    const conn = node.querySelector("[data-testid=conn-status]"), summary = node.querySelector("[data-testid=try-summary]");
    const turns = window.hatTurns.create(node.querySelector("[data-testid=feed]"), {});
    let lastSeq = 0, retry = 0, socket = null, reply = null;

    function summarise(ev) {
      const p = ev.payload || {};
      if (ev.type === "reply") reply = p;
      if (ev.type === "turn_failed") {
        summary.replaceChildren(badge("rejected", "turn failed", { "data-testid": "try-outcome" }));
        node.dataset.done = "failed";
      }
      if (ev.type === "timings") {
        const fell = reply && reply.fallback;
        summary.replaceChildren(
          badge(fell ? "rejected" : "approved", fell ? `fell back (${reply.reason})` : "replied", { "data-testid": "try-outcome" }),
          el("span", { text: ` in ${ms(p.total_ms)} · ${p.model_calls} model call(s), ${p.retries} retries` }));
        node.dataset.done = fell ? "fallback" : "ok";
      }
    }

    function connect() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(`${scheme}${location.host}${node.dataset.wsPath}?after=${lastSeq}`);
      conn.textContent = "connecting…";
      socket.onopen = () => { retry = 0; conn.textContent = "live"; conn.className = "badge approved"; };
      socket.onmessage = (msg) => {
        const data = JSON.parse(msg.data);
        if (data.type !== "events") return;
        for (const ev of data.events) { // consecutive seqs, oldest first
          if (ev.seq <= lastSeq) continue; // never render twice
          lastSeq = ev.seq;
          if (!ev.turn_id) continue; // room events: the preview room page shows them
          turns.render(ev);
          summarise(ev);
        }
        node.dataset.lastSeq = String(lastSeq);
      };
      socket.onclose = (e) => {
        conn.className = "badge rejected";
        if (e.code >= 4400 && e.code < 4500) {
          conn.textContent = { 4401: "signed out", 4403: "not allowed", 4404: "no such room" }[e.code] || "refused";
          return;
        }
        conn.textContent = "reconnecting…";
        retry = Math.min(retry + 1, 6);
        setTimeout(connect, 250 * 2 ** retry);
      };
    }
    connect();
    return { drop: () => socket && socket.close(), lastSeq: () => lastSeq };
  }

  const columns = {};
  for (const node of root.querySelectorAll("[data-try-column]")) columns[node.dataset.side] = column(node);
  window.hatTryDraft = columns; // test hook: drop a column's socket (it reconnects with ?after=<last seq>)
})();
