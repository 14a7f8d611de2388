// The subtitle overlay: what the avatar says, in large type. Reads the overlay socket (ws/live/<session>/overlay/
// ?token=...; the server sends only what this page shows: no comments, no tool results, and of a reply only the
// words said, after they passed the before-reply hooks and any approval: never the model's draft tokens, which a
// hook may still refuse). The reply as spoken (as the turn wrote it, or as an operator approved, edited or typed
// it) is typed out a word every WORD_MS from the moment it is said; it clears data-clear-s seconds after the last
// words, or when the avatar is muted. Reconnects with the last seq it saw. No dependencies.
(function () {
  "use strict";
  const root = document.getElementById("overlay");
  if (!root) return;
  const line = document.getElementById("subtitle");
  const token = new URLSearchParams(location.search).get("token") || "";
  const clearMs = (+root.dataset.clearS || 8) * 1000;
  let lastSeq = null, socket = null, retry = 0, timer = null, typing = null, closedForGood = false;
  const shown = []; // every line shown ({text, final}), for tests: what was typed out, nothing unjudged
  // a 30-word reply is all up in about a second: ahead of the voice, yet it reads as streaming
  const WORD_MS = 40;

  // markup a reply may still hold (a tool call written as text, reasoning tags): never on the broadcast
  const visible = (text) => text.replace(/<(think|tool_call)>[\s\S]*?<\/\1>/g, "") // closed blocks
    .replace(/<(think|tool_call)>[\s\S]*$/, "") // one still open at the end
    .replace(/<\/?(think|tool_call)>/g, "") // a stray tag (the server dropped its pair as a special token)
    .replace(/^\s*\{[\s\S]*$/, "") // a tool call written as JSON, its tag dropped (no reply opens with "{")
    .replace(/<\/?[a-z_]*$/, "") // a tag cut in half at the end
    .replace(/\s+/g, " ").trim();
  function show(text, final) {
    clearTimeout(timer);
    line.textContent = text;
    const prev = shown[shown.length - 1];
    if (text && !(prev && prev.text === text && prev.final === final)) shown.push({ text: text, final: final });
    root.dataset.state = text ? (final ? "final" : "streaming") : "idle";
    if (final || !text) timer = setTimeout(clear, clearMs);
    else timer = setTimeout(clear, clearMs * 3); // a line that stops mid-way does not hang on screen forever
  }
  function clear() {
    clearTimeout(timer); clearTimeout(typing); line.dataset.raw = ""; line.textContent = ""; root.dataset.state = "idle";
  }
  // the words said, a word at a time; a line said after it (an operator's takeover) replaces it at once
  function say(text) {
    clearTimeout(typing);
    line.dataset.raw = text;
    const words = visible(text).match(/\S+\s*/g) || [];
    let n = 0;
    (function step() {
      n += 1;
      const done = n >= words.length;
      show(words.slice(0, n).join("").trim(), done);
      if (!done) typing = setTimeout(step, WORD_MS);
    })();
  }

  function render(ev) {
    const p = ev.payload || {};
    switch (ev.type) {
      case "reply_spoken": say(p.text || ""); break;
      case "muted": case "session_ended": clear(); break;
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
