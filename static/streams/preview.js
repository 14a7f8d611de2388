// The preview room: one WebSocket (ws/preview/<room>/?after=<last seq>) that delivers the room's stored
// events and then live ones, a run of them per frame; this script renders them by type and sends the user's
// actions. It reconnects with the last seq it rendered, so nothing is lost or shown twice. No dependencies.
(function () {
  "use strict";
  const root = document.getElementById("preview");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const feed = $("feed"), log = $("room-log"), conn = root.querySelector("[data-testid=conn-status]");
  const errorBox = $("preview-error");
  let lastSeq = 0, socket = null, retry = 0, closedForGood = false;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) if (c != null) node.append(c);
    return node;
  }
  const badge = (cls, text, attrs) => el("span", Object.assign({ class: "badge " + cls, text: text }, attrs || {}));
  const ms = (v) => (v == null ? "—" : Math.round(v) + " ms");
  const short = (v, n) => { const s = typeof v === "string" ? v : JSON.stringify(v); return s.length > n ? s.slice(0, n) + "…" : s; };

  function turnCard(turnId) {
    let card = feed.querySelector(`[data-turn="${turnId}"]`);
    if (!card) {
      card = el("article", { class: "card turn", "data-turn": turnId, "data-testid": "turn" },
        el("div", { class: "head" }, el("span", { text: "turn " + turnId.slice(0, 8) }), el("span", { class: "meta" })),
        el("div", { class: "comments" }), el("div", { class: "calls" }),
        el("div", { class: "skills" }), el("ul", { class: "tools" }), el("div", { class: "hooks" }),
        el("div", { class: "final" }), el("div", { class: "timings small muted", "data-testid": "timings" }));
      feed.append(card);
    }
    return card;
  }
  function currentStream(card) {
    let calls = card.querySelector(".calls"), last = calls.lastElementChild;
    if (!last) { last = el("div", { class: "call" }, el("div", { class: "call-head", text: "model" }), el("div", { class: "stream", "data-testid": "stream" })); calls.append(last); }
    return last.querySelector(".stream");
  }
  function roomLog(text, cls) { log.append(el("li", { class: cls || "" }, text)); log.scrollTop = log.scrollHeight; }
  function showError(text) { errorBox.textContent = text; errorBox.hidden = !text; }

  function render(ev) {
    const p = ev.payload || {};
    if (!ev.turn_id) return renderRoom(ev, p);
    const card = turnCard(ev.turn_id);
    switch (ev.type) {
      case "viewer_comment":
        // who typed it is always shown: a viewer name is what the model sees, the sender is who is accountable
        card.querySelector(".comments").append(el("div", { class: "comment", "data-testid": "comment" },
          el("b", { text: p.viewer }), ": " + p.text, p.source === "scenario" ? el("span", { class: "small muted", text: `  (min ${p.minute})` }) : null,
          p.sent_by ? el("span", { class: "small muted", "data-testid": "sent-by", text: `  sent by ${p.sent_by}` }) : null));
        break;
      case "turn_queued": // until turn_started: the turn waits for a free interactive runner
        card.querySelector(".meta").replaceChildren(el("span", { class: "badge draft", "data-testid": "turn-queued",
          text: "queued — waiting for the interactive runner" + (p.queued_behind ? ` (${p.queued_behind} turn(s) ahead)` : "") }));
        break;
      case "turn_started": {
        const faults = Object.entries(p.faults || {}).map(([k, v]) => `${k}:${v}`).join(", ");
        card.querySelector(".meta").textContent = `${p.version.harness} v${p.version.number} · ${p.endpoint.model} · minute ${p.minute}` + (faults ? ` · faults ${faults}` : "");
        break;
      }
      case "model_request":
        card.querySelector(".calls").append(el("div", { class: "call" },
          el("div", { class: "call-head", text: `model call ${p.call_index + 1} (round ${p.round}${p.attempt > 1 ? ", retry " + p.attempt : ""})` }),
          el("div", { class: "stream", "data-testid": "stream" })));
        break;
      case "token": {
        const s = currentStream(card);
        if (!s.textContent.trim() && !p.delta.trim()) { /* leading whitespace: nothing to show yet */ }
        else if (p.channel === "reasoning") s.append(el("span", { class: "reasoning", text: p.delta }));
        else s.append(document.createTextNode(p.delta));
        card.dataset.tokens = String((+card.dataset.tokens || 0) + 1);
        break;
      }
      case "tool_call":
        card.querySelector(".tools").append(el("li", { "data-testid": "tool-call", "data-call": p.call_id },
          el("code", { text: `${p.name}(${short(p.arguments ?? p.arguments_raw, 200)})` }), " ",
          badge(p.valid ? "approved" : "rejected", p.valid ? "valid" : "invalid"),
          p.error ? el("span", { class: "small", text: " " + p.error }) : null));
        break;
      case "tool_result": {
        const li = card.querySelector(`[data-call="${p.call_id}"]`) || card.querySelector(".tools").appendChild(el("li"));
        li.append(el("pre", { "data-testid": "tool-result", text: (p.fault ? `[fault ${p.fault}] ` : "") + (p.error ? "error: " + p.error : short(p.result, 600)) + `  (${ms(p.duration_ms)})` }));
        break;
      }
      case "skill_loaded":
        card.querySelector(".skills").append(badge(p.ok ? "label" : "rejected", `skill ${p.skill_id}${p.kind ? " · " + p.kind : ""}${p.ok ? "" : " (failed)"}`, { "data-testid": "skill" }));
        break;
      case "hook_result":
        card.querySelector(".hooks").append(badge(p.passed ? "approved" : "rejected", `${p.hook_id} ${p.passed ? "pass" : "fail"}`,
          { title: `${p.kind} at ${p.point}${p.detail ? ": " + p.detail : ""}`, "data-testid": "hook" }), " ");
        break;
      case "retry":
        card.querySelector(".calls").append(el("div", { class: "small muted", text: `retry ${p.attempt} after ${p.hook_id}: ${p.message}` }));
        break;
      case "reply": {
        const parts = [el("div", { class: "reply", "data-testid": "reply" }, p.text,
          p.fallback ? badge("rejected", "fallback: " + p.reason) : null)];
        if (root.dataset.saveCase) {  // "save as eval case": the page that turns this turn into a case
          parts.push(el("a", { class: "button small", "data-testid": "save-as-case", text: "Save as eval case",
            href: root.dataset.saveCase.replace("TURN_ID", encodeURIComponent(ev.turn_id)) }));
        }
        card.querySelector(".final").replaceChildren(...parts);
        break;
      }
      case "timings":
        card.querySelector(".timings").textContent = `TTFT ${ms(p.ttft_ms)} · model ${ms(p.model_ms)} · tools ${ms(p.tool_ms)} · engine ${ms(p.engine_ms)} · total ${ms(p.total_ms)} · ${p.model_calls} model call(s), ${p.retries} retries`;
        break;
      case "error":
      case "turn_failed":
        card.querySelector(".final").append(el("div", { class: "alert error small", "data-testid": "turn-error", text: `${p.stage || "turn"}: ${p.message}` }));
        break;
      default: break; // comment_received, prompt_built: shown through the events above
    }
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
