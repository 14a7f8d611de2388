// The subtitle overlay: what the avatar says, in large type, as it streams. Reads the overlay socket
// (ws/live/<session>/overlay/?token=...; the server sends only what this page shows: no comments, no tool results,
// nothing an operator has not approved in approve-before-speak mode). A new model call or a tool call restarts the
// line; the reply as spoken (as the turn wrote it, or as an operator approved, edited or typed it) replaces it; it clears data-clear-s seconds after
// the last words. Reconnects with the last seq it saw. No dependencies.
(function () {
  "use strict";
  const root = document.getElementById("overlay");
  if (!root) return;
  const line = document.getElementById("subtitle");
  const token = new URLSearchParams(location.search).get("token") || "";
  const clearMs = (+root.dataset.clearS || 8) * 1000;
  let lastSeq = null, socket = null, retry = 0, timer = null, closedForGood = false;
  const shown = []; // every line shown ({text, final}), for tests: what streamed, nothing unapproved

  // markup a model may stream before it is parsed out (a tool call written as text, reasoning tags)
  const visible = (text) => text.replace(/<(think|tool_call)>[\s\S]*?<\/\1>/g, "") // closed blocks
    .replace(/<(think|tool_call)>[\s\S]*$/, "") // one still open at the end
    .replace(/<\/?(think|tool_call)>/g, "") // a stray tag (the server dropped its pair as a special token)
    .replace(/^\s*\{[\s\S]*$/, "") // a tool call written as JSON, its tag dropped (no reply opens with "{")
    .replace(/<\/?[a-z_]*$/, "") // a tag cut in half at the end
    .replace(/\s+/g, " ").trim();
  function show(text, final) {
    clearTimeout(timer);
    line.dataset.raw = text;
    line.textContent = visible(text);
    const prev = shown[shown.length - 1];
    if (line.textContent && !(prev && prev.text === line.textContent && prev.final === final)) shown.push({ text: line.textContent, final: final });
    root.dataset.state = line.textContent ? (final ? "final" : "streaming") : "idle";
    if (final || !line.textContent) timer = setTimeout(clear, clearMs);
    else timer = setTimeout(clear, clearMs * 3); // a stream that stalls does not hang on screen forever
  }
  function clear() { clearTimeout(timer); line.dataset.raw = ""; line.textContent = ""; root.dataset.state = "idle"; }

  // what each turn's current model call streamed: a token continues its own turn's words, never a line another
  // turn put up (an operator's takeover said while a turn streams); turns in flight when the avatar is muted stay
  // silent (their reply is withheld)
  const raws = {}, silenced = new Set();
  function render(ev) {
    const p = ev.payload || {}, turn = ev.turn_id || "";
    switch (ev.type) {
      case "turn_started": case "model_request": case "tool_call":
        raws[turn] = ""; clear(); break;
      case "muted":
        for (const t of Object.keys(raws)) silenced.add(t);
        clear(); break;
      case "reply_pending": case "reply_rejected": case "session_ended": case "approval_mode":
        delete raws[turn]; clear(); break;
      case "token":
        if (silenced.has(turn)) break;
        raws[turn] = (raws[turn] || "") + p.delta;
        show(raws[turn], false); break;
      case "reply_spoken": delete raws[turn]; show(p.text || "", true); break;
      default: break;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const after = lastSeq == null ? "" : `&after=${lastSeq}`;
    socket = new WebSocket(`${scheme}${location.host}${root.dataset.wsPath}?token=${encodeURIComponent(token)}${after}`);
    socket.onopen = () => { retry = 0; root.dataset.conn = "live"; };
    socket.onmessage = (msg) => {
      const data = JSON.parse(msg.data);
      if (data.type !== "events") return;
      for (const ev of data.events) {
        if (lastSeq != null && ev.seq <= lastSeq) continue;
        lastSeq = ev.seq;
        render(ev);
      }
      root.dataset.lastSeq = String(lastSeq);
    };
    socket.onclose = (e) => {
      root.dataset.conn = "closed";
      if (e.code >= 4400 && e.code < 4500) { closedForGood = true; clear(); return; } // revoked: go blank
      retry = Math.min(retry + 1, 6);
      setTimeout(connect, 250 * 2 ** retry);
    };
  }
  window.hatOverlay = { drop: () => socket && socket.close(), lastSeq: () => lastSeq, closedForGood: () => closedForGood,
    shown: () => shown.slice(-200) };
  connect();
})();
