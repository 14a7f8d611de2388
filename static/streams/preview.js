// The preview room: one WebSocket (ws/preview/<room>/?after=<last seq>) that delivers the room's stored
// events and then live ones, a run of them per frame; this script renders them by type and sends the user's
// actions. It reconnects with the last seq it rendered, so nothing is lost or shown twice. Turns are drawn by
// turns.js (loaded before this script).
(function () {
  "use strict";
  const root = document.getElementById("preview");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const feed = $("feed"), log = $("room-log"), conn = root.querySelector("[data-testid=conn-status]");
  const errorBox = $("preview-error");
  let lastSeq = 0, socket = null, retry = 0, closedForGood = false;

  const { el } = window.hatTurns;  // turns.js: one turn's events drawn as a card (the live page draws them too)
  window.hatTurns.feedBox(feed); // its own scroll box: filters, follows the latest turn
  const turns = window.hatTurns.create(feed, {
    onReply: (card, ev) => root.dataset.saveCase  // "save as eval case": the page that turns this turn into a case
      ? [el("a", { class: "button small", "data-testid": "save-as-case", text: "Save as eval case",
          href: root.dataset.saveCase.replace("TURN_ID", encodeURIComponent(ev.turn_id)) })]
      : [],
  });
  function roomLog(text, cls) { log.append(el("li", { class: cls || "" }, text)); log.scrollTop = log.scrollHeight; }
  function showError(text) { errorBox.textContent = text; errorBox.hidden = !text; }

  function render(ev) {
    if (!ev.turn_id) return renderRoom(ev, ev.payload || {});
    turns.render(ev); // comment_received, prompt_built and unknown types: shown through the events above
  }

  function setMinute(m) { const n = root.querySelector("[data-testid=room-minute]"); if (n && m != null) n.textContent = String(+(+m).toFixed(2)); }
  function setPaused(paused) {
    root.querySelector("[data-testid=room-paused]").hidden = !paused;
    if ($("pause")) { $("pause").hidden = paused; $("resume").hidden = !paused; } // no controls: a read-only run
  }
  function setPlaying(on, speed) {
    const b = root.querySelector("[data-testid=room-playing]");
    if (!b) return;
    if (speed !== undefined) b.textContent = speed ? `playing ×${speed}` : "playing as fast as turns finish";
    b.hidden = !on;
  }
  function renderRoom(ev, p) {
    switch (ev.type) {
      case "playing": setPaused(false); setPlaying(true, p.speed); roomLog(`${p.by} pressed play (${p.speed ? "×" + p.speed : "as fast as turns finish"})`); break;
      case "scenario_finished": setPlaying(false); roomLog(`scenario over at minute ${p.minute}`); break;
      case "play_failed": setPlaying(false); roomLog(`the clock stopped: ${p.message}`); break;
      case "cancel_requested": roomLog(`${p.by} cancelled the run at minute ${p.minute}: it stops at the clock's next tick`); break;
      case "run_cancelled": setPlaying(false); roomLog(`run cancelled at minute ${p.minute}`); break;
      case "member_added": roomLog(`${p.by} invited ${p.user}`); break;
      case "member_removed": roomLog(`${p.by} removed ${p.user}`); break;
      case "room_closed": roomLog(`closed by ${p.by}`); break;
      case "room_opened": roomLog(`opened by ${p.by}: ${p.version.harness} v${p.version.number}, minute ${p.minute}`); break;
      case "clock": setMinute(p.minute); roomLog(`clock ${p.from} → ${p.minute}: ${p.events} event(s), ${p.comments} comment(s)${p.finished ? " (scenario over)" : ""}`); break;
      case "timeline_event": roomLog(`minute ${p.minute}: ${p.summary}`, "timeline"); break;
      case "paused": setPaused(true); setPlaying(false); roomLog(`paused by ${p.by}`); break;
      case "resumed": setPaused(false); setPlaying(!!p.playing); roomLog(`resumed by ${p.by}`); break;
      case "version_switched": {
        root.querySelector("[data-testid=room-version]").textContent = `${p.to.harness} v${p.to.number}`;
        const sel = $("version-select"); if (sel) sel.value = String(p.to.id);
        roomLog(`${p.by} switched v${p.from.number} → v${p.to.number} (from the next turn)`);
        break;
      }
      default: roomLog(ev.type);
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(`${scheme}${location.host}${root.dataset.wsPath}?after=${lastSeq}`);
    conn.textContent = "connecting…";
    socket.onopen = () => { retry = 0; conn.textContent = "live"; conn.className = "badge approved"; };
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.type === "events") { // stored events with consecutive seqs, oldest first
        for (const ev of data.events) {
          if (ev.seq <= lastSeq) continue; // never render twice
          lastSeq = ev.seq;
          render(ev);
        }
        root.dataset.lastSeq = String(lastSeq);
      } else if (data.type === "error") {
        showError(data.message);
      } else if (data.type === "ack") {
        showError("");
      }
    };
    socket.onclose = (e) => {
      conn.className = "badge rejected";
      if (e.code >= 4400 && e.code < 4500) {
        closedForGood = true;
        conn.textContent = { 4401: "signed out", 4403: "not allowed", 4404: "no such room" }[e.code] || "refused";
        return;
      }
      conn.textContent = "reconnecting…";
      retry = Math.min(retry + 1, 6);
      setTimeout(connect, 250 * 2 ** retry);
    };
  }

  function send(obj) {
    if (!socket || socket.readyState !== WebSocket.OPEN) { showError("not connected; try again in a moment"); return false; }
    socket.send(JSON.stringify(obj));
    return true;
  }
  if ($("comment-form")) $("comment-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("comment-text"), text = input.value.trim();
    if (text && send({ type: "comment", text: text, viewer: $("comment-viewer").value })) input.value = "";
  });
  if ($("step")) $("step").addEventListener("click", () => send({ type: "step", minutes: +$("step-minutes").value || 1 }));
  // pause/resume are also plain forms: over the socket when it is up (no reload), else the form posts.
  // Someone only reading the room (another's scenario run) has none of these controls.
  if ($("pause")) $("pause").addEventListener("click", (e) => { if (send({ type: "pause" })) e.preventDefault(); });
  if ($("resume")) $("resume").addEventListener("click", (e) => { if (send({ type: "resume" })) e.preventDefault(); });
  if ($("switch-version")) $("switch-version").addEventListener("click", () => send({ type: "switch_version", version_id: +$("version-select").value }));
  // test hook: drop the socket (the client reconnects with ?after=<last seq>)
  window.hatPreview = { drop: () => socket && socket.close(), lastSeq: () => lastSeq, closedForGood: () => closedForGood };
  connect();
})();
