// A live session's operator page: one WebSocket (ws/live/<session>/?after=<last seq>) streams the session's stored
// events, then live ones, a run per frame; turns are drawn by turns.js as in the preview room, with what live
// turns add (a reply waiting for approval, the reply as spoken, a human takeover, the harness version changing,
// faults). The panels above and beside the transcript (state, pending replies, comment queue, session log, overlay
// links) are drawn by the server: an event that changes one asks htmx to redraw it (coalesced). Controls are
// htmx forms; their answer (or error, with its hook verdicts) shows in #result. The socket reconnects with the
// last seq it rendered, so nothing is lost or shown twice.
(function () {
  "use strict";
  const root = document.getElementById("live");
  if (!root || !root.dataset.wsPath) return;
  const feed = document.getElementById("feed"), conn = root.querySelector("[data-testid=conn-status]");
  const { el, badge } = window.hatTurns;
  const turns = window.hatTurns.create(feed, { showReceived: true }); // live turns carry the engine's comment copy
  window.hatTurns.feedBox(feed); // its own scroll box: filters, follows the latest turn
  let lastSeq = +root.dataset.after || 0, socket = null, retry = 0, closedForGood = false;

  // --- panels drawn by the server, redrawn when events say they changed -----------------------------------------
  const timers = {}, stale = {};
  function refresh(name) {
    if (timers[name]) return;
    timers[name] = setTimeout(() => {
      timers[name] = null;
      const panel = document.getElementById(name);
      const typing = document.activeElement && document.activeElement.tagName === "TEXTAREA";
      if (panel && typing && panel.contains(document.activeElement)) {
        stale[name] = true; // the operator is typing in it (editing a pending reply): redraw when they leave
        return;
      }
      document.body.dispatchEvent(new CustomEvent("live-" + name));
    }, 150);
  }
  document.addEventListener("focusout", (e) => {
    for (const name of Object.keys(stale)) {
      const panel = document.getElementById(name);
      if (stale[name] && panel && panel.contains(e.target)) { stale[name] = false; setTimeout(() => refresh(name), 0); }
    }
  });
  const PANELS_OF = {
    comment_in: ["queue"], comment_status: ["queue"], turn_started: ["queue"],
    muted: ["state", "log"], approval_mode: ["state", "pending", "log"], product_pinned: ["state", "log"],
    version_changed: ["state", "log", "deployment"], fault: ["log"], failover: ["log"], breaker: ["log"], runner_resumed: ["log"],
    reply_pending: ["pending"], reply_spoken: ["pending", "log"], reply_rejected: ["pending", "log"],
    tool_approval_pending: ["tool_calls"], tool_approval_decided: ["tool_calls"],
    session_started: ["log"], session_ended: ["state", "log"],
  };

  // --- the transcript ----------------------------------------------------------------------------------------
  function marker(ev, text, cls) {
    const node = el("div", { class: "marker " + (cls || ""), "data-testid": "marker-" + ev.type, "data-seq": String(ev.seq) }, text);
    if (ev.turn_id) {
      const card = turns.card(ev.turn_id);
      if (ev.type === "version_changed") card.before(node); else card.querySelector(".final").before(node);
    } else {
      feed.append(node);
      // a version change is stored before the turn that first runs on it starts, when that turn's card may already
      // be drawn (its comments were claimed): the marker goes before it on turn_started
      if (ev.type === "version_changed") versionMarker = node;
    }
  }
  let versionMarker = null;
  const vname = (v) => (v ? `${v.slug || v.harness || ""} v${v.number}` : "?");
  function final(card) { return card.querySelector(".final"); }

  function render(ev) {
    const p = ev.payload || {};
    for (const name of PANELS_OF[ev.type] || []) refresh(name);
    switch (ev.type) {
      case "version_changed":
        marker(ev, `harness version changed${p.label ? " (label " + p.label + ")" : ""}: ${vname(p.from)} → ${vname(p.to)}` +
          (p.revision && p.revision.from !== p.revision.to ? ` · deployment revision ${p.revision.from} → ${p.revision.to}` : "") + "; the next turn uses it", "version-changed");
        return;
      case "fault":
        marker(ev, `fault ${p.kind}${p.endpoint ? " · " + p.endpoint : ""}${p.message ? ": " + p.message : ""}`, "fault"); return;
      case "failover": marker(ev, `failover ${p.from} → ${p.to}`, "fault"); return;
      case "breaker": marker(ev, `circuit breaker ${p.endpoint}: ${p.state}`, p.state === "closed" ? "" : "fault"); return;
      case "runner_resumed": marker(ev, `runner ${p.runner} resumed after event #${p.after_seq}`); return;
      case "muted": marker(ev, p.muted ? `muted by ${p.by}: no turns run, comments keep queueing` : `unmuted by ${p.by}`); return;
      case "approval_mode": marker(ev, `approve-before-speak ${p.on ? "on" : "off"} (${p.by})`); return;
      case "session_ended":
        marker(ev, `session ended by ${p.by}${p.reason ? " (" + p.reason + ")" : ""}`);
        closedForGood = true;
        if (socket) socket.close();
        conn.textContent = "ended"; conn.className = "badge kind";
        setTimeout(() => location.reload(), 1500); // the page becomes the recording
        return;
      default: break;
    }
    if (!ev.turn_id) return; // comment_in, comment_status, product_pinned, session_started: in the panels
    switch (ev.type) {
      case "reply_pending": {
        const card = turns.card(ev.turn_id);
        card.dataset.state = "pending";
        final(card).append(el("div", { class: "reply pending", "data-testid": "reply-pending" },
          badge("submitted", "waiting for approval"), " ", p.text || ""));
        return;
      }
      case "reply_rejected": {
        const card = turns.card(ev.turn_id);
        card.dataset.state = "rejected";
        final(card).append(el("div", { "data-testid": "reply-rejected" }, badge("rejected", `rejected by ${p.by}: nothing said`)));
        return;
      }
      case "reply_spoken": {
        const card = turns.card(ev.turn_id);
        card.dataset.state = "spoken";
        for (const n of final(card).querySelectorAll("[data-testid=reply-pending]")) n.remove();
        if (p.by === "human") {
          card.classList.add("human");
          card.querySelector(".meta").replaceChildren(badge("submitted", `human: ${p.operator || "operator"} took over`, { "data-testid": "human-turn" }));
        }
        final(card).append(el("div", { class: "reply spoken", "data-testid": "reply-spoken" }, p.text || "",
          el("span", { class: "small muted", text: p.by === "human" ? `  (said by ${p.operator || "an operator"})` : "  (spoken)" })));
        return;
      }
      default:
        if (ev.type === "turn_started" && versionMarker) { turns.card(ev.turn_id).before(versionMarker); versionMarker = null; }
        turns.render(ev); // turn_queued, turn_started, the engine's events; unknown types: nothing
    }
  }

  // --- the socket --------------------------------------------------------------------------------------------
  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(`${scheme}${location.host}${root.dataset.wsPath}?after=${lastSeq}`);
    conn.textContent = "connecting…";
    socket.onopen = () => { retry = 0; conn.textContent = "connected"; conn.className = "badge approved"; };
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.type !== "events") return;
      for (const ev of data.events) { // stored events with consecutive seqs, oldest first
        if (ev.seq <= lastSeq) continue; // never render twice
        lastSeq = ev.seq;
        render(ev);
      }
      root.dataset.lastSeq = String(lastSeq);
    };
    socket.onclose = (e) => {
      if (closedForGood) return;
      conn.className = "badge rejected";
      if (e.code >= 4400 && e.code < 4500) {
        closedForGood = true;
        conn.textContent = { 4401: "signed out", 4403: "not allowed", 4404: "no such session" }[e.code] || "refused";
        return;
      }
      conn.textContent = "reconnecting…";
      retry = Math.min(retry + 1, 6);
      setTimeout(connect, 250 * 2 ** retry);
    };
  }

  // --- controls (htmx forms) ---------------------------------------------------------------------------------
  document.body.addEventListener("htmx:beforeSwap", (e) => {
    // a refused control (400/403/409) answers with its message and verdicts: show it rather than drop it
    const status = e.detail.xhr.status;
    if (status >= 400 && status < 500 && e.detail.target && e.detail.target.id === "result") {
      e.detail.shouldSwap = true;
      e.detail.isError = false;
    }
  });
  document.body.addEventListener("htmx:afterRequest", (e) => {
    const form = e.detail.elt && e.detail.elt.closest ? e.detail.elt.closest("form") : null;
    if (!form || !root.contains(form) || (e.detail.requestConfig || {}).verb !== "post") return;
    if (e.detail.successful) {
      if (form.dataset.resetOnSuccess) form.reset();
      for (const name of ["state", "pending", "queue", "log", "tokens"]) refresh(name); // at once, not only via events
    }
  });

  // test hook: drop the socket (the client reconnects with ?after=<last seq>)
  window.hatLive = { drop: () => socket && socket.close(), lastSeq: () => lastSeq, closedForGood: () => closedForGood };
  connect();
})();
