// One turn's events drawn as a card, as they stream: the preview room (preview.js) and a live session's operator
// page (live.js) both render turns with this. window.hatTurns.create(feed, options) returns a renderer whose
// render(ev) draws an event of a turn (ev.turn_id set) into its card and returns true, or returns false for a type
// it does not know (the page draws those itself). options.onReply(card, ev) may return extra nodes after a reply.
// A turn stays short: tool arguments and results sit in <details> (one line of the result shown), an attempt that
// a hook sent back folds into its retry, and the model's streamed output folds once the reply is there.
// window.hatTurns.feedBox(feed) gives a feed its own scroll box with filters and "Jump to latest".
(function () {
  "use strict";

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
  const pretty = (v) => { // arguments and results in full, indented when they are JSON
    if (typeof v !== "string") return JSON.stringify(v, null, 2);
    try { return JSON.stringify(JSON.parse(v), null, 2); } catch (e) { return v; }
  };

  function create(feed, options) {
    const opts = options || {};

    function card(turnId) {
      let c = feed.querySelector(`[data-turn="${turnId}"]`);
      if (!c) {
        c = el("article", { class: "card turn", "data-turn": turnId, "data-testid": "turn" },
          el("div", { class: "head" }, el("span", { text: "turn " + turnId.slice(0, 8) }), el("span", { class: "meta" })),
          el("div", { class: "comments" }),
          el("details", { class: "calls-box", open: "", "data-testid": "model-output" },
            el("summary", { class: "small muted" }, "model output ", el("span", { class: "calls-count" })), el("div", { class: "calls" })),
          el("div", { class: "skills" }), el("ul", { class: "tools" }), el("div", { class: "hooks" }),
          el("div", { class: "final" }), el("div", { class: "timings small muted", "data-testid": "timings" }));
        feed.append(c);
      }
      return c;
    }
    function addCall(c, head) {
      const calls = c.querySelector(".calls");
      const call = calls.appendChild(el("div", { class: "call" }, el("div", { class: "call-head", text: head }), el("div", { class: "stream", "data-testid": "stream" })));
      const n = calls.querySelectorAll(".call").length;
      c.querySelector(".calls-count").textContent = `(${n} call${n === 1 ? "" : "s"})`;
      return call;
    }
    function currentStream(c) {
      const last = c.querySelector(".calls").lastElementChild; // a folded retry is not the current call
      return (last && last.classList.contains("call") ? last : addCall(c, "model")).querySelector(".stream");
    }
    function toolItem(c, callId) {
      let li = callId ? c.querySelector(`[data-call="${callId}"]`) : null;
      if (!li) {
        li = c.querySelector(".tools").appendChild(el("li", { "data-testid": "tool-call", "data-call": callId || "" },
          el("details", { class: "payload" }, el("summary"))));
      }
      return li;
    }
    function comment(c, p) {
      // who typed it is always shown: a viewer name is what the model sees, the sender is who is accountable
      c.querySelector(".comments").append(el("div", { class: "comment", "data-testid": "comment" },
        el("b", { text: p.viewer }), ": " + p.text, p.source === "scenario" ? el("span", { class: "small muted", text: `  (min ${p.minute})` }) : null,
        p.sent_by ? el("span", { class: "small muted", "data-testid": "sent-by", text: `  sent by ${p.sent_by}` }) : null));
    }

    function render(ev) {
      const p = ev.payload || {};
      const c = card(ev.turn_id);
      switch (ev.type) {
        case "viewer_comment": comment(c, p); break;
        case "comment_received": // the engine's copy: shown where the page has no comment events of its own in the turn
          if (opts.showReceived) comment(c, p);
          break;
        case "turn_queued": // until turn_started: the turn waits for a free interactive runner
          c.querySelector(".meta").replaceChildren(el("span", { class: "badge draft", "data-testid": "turn-queued",
            text: "queued — waiting for the interactive runner" + (p.queued_behind ? ` (${p.queued_behind} turn(s) ahead)` : "") }));
          break;
        case "turn_started": {
          const v = p.version || {}, faults = Object.entries(p.faults || {}).map(([k, x]) => `${k}:${x}`).join(", ");
          // the endpoint's name, never its model (often a directory's absolute path)
          const endpoint = typeof p.endpoint === "string" ? p.endpoint : (p.endpoint || {}).name || (p.endpoint || {}).model;
          c.querySelector(".meta").textContent = `${v.harness || v.slug} v${v.number}` + (p.revision != null ? ` · revision ${typeof p.revision === "object" ? p.revision.number : p.revision}` : "") +
            (endpoint ? ` · ${endpoint}` : "") + (p.minute != null ? ` · minute ${p.minute}` : "") + (faults ? ` · faults ${faults}` : "");
          break;
        }
        case "model_request":
          addCall(c, `model call ${p.call_index + 1} (round ${p.round}${p.attempt > 1 ? ", retry " + p.attempt : ""})`);
          break;
        case "token": {
          const s = currentStream(c);
          if (p.channel === "reasoning") {
            if (s.textContent.trim() || p.delta.trim()) s.append(el("span", { class: "reasoning", text: p.delta }));
          } else {
            // the call's text as streamed, shown without the empty <think></think> block the demo model opens with
            // (and without leading whitespace): one text node per call, rewritten as tokens arrive
            s._raw = (s._raw || "") + p.delta;
            if (!s._text) s._text = s.appendChild(document.createTextNode(""));
            s._text.data = s._raw.replace(/<think>\s*<\/think>\s*/g, "").replace(/^\s+/, "");
          }
          c.dataset.tokens = String((+c.dataset.tokens || 0) + 1);
          // a draft until the reply is judged: the hooks may still refuse it (a live overlay never shows it)
          if (!c.dataset.judged && !c.querySelector("[data-testid=unjudged]")) {
            c.querySelector(".calls-box summary").append(" ", badge("draft", "unjudged draft: the hooks have not passed it", { "data-testid": "unjudged" }));
          }
          break;
        }
        case "tool_call": { // the call on one line; its arguments in full when opened
          const args = p.arguments ?? p.arguments_raw, li = toolItem(c, p.call_id);
          li.querySelector("summary").append(el("code", { text: `${p.name}(${short(args ?? "", 80)})` }), " ",
            badge(p.valid ? "approved" : "rejected", p.valid ? "valid" : "invalid"),
            ...(p.error ? [el("span", { class: "small", text: " " + p.error })] : []));
          li.querySelector("details").append(el("div", { class: "payload-head", text: "arguments" }),
            el("pre", { "data-testid": "tool-arguments", text: pretty(args ?? "") }));
          break;
        }
        case "tool_result": { // a glance at the result beside the call; the whole result when opened
          const li = toolItem(c, p.call_id), head = p.fault ? `[fault ${p.fault}] ` : "";
          if (p.fault) li.dataset.fault = p.fault;
          li.querySelector("summary").append(" ", el("span", { class: "glance", "data-testid": "tool-result",
            text: "→ " + head + (p.error ? "error: " + short(p.error, 100) : short(p.result ?? "", 100)) + `  (${ms(p.duration_ms)})` }));
          li.querySelector("details").append(el("div", { class: "payload-head", text: "result" }),
            el("pre", { "data-testid": "tool-result-full", text: head + (p.error ? "error: " + p.error : pretty(p.result ?? "")) }));
          break;
        }
        case "skill_loaded":
          c.querySelector(".skills").append(badge(p.ok ? "label" : "rejected", `skill ${p.skill_id}${p.kind ? " · " + p.kind : ""}${p.ok ? "" : " (failed)"}`, { "data-testid": "skill" }));
          break;
        case "hook_result":
          if (!p.passed) c.dataset.hookFailed = "1";
          c.querySelector(".hooks").append(badge(p.passed ? "approved" : "rejected", `${p.hook_id} ${p.passed ? "pass" : "fail"}`,
            { title: `${p.kind} at ${p.point}${p.detail ? ": " + p.detail : ""}`, "data-testid": "hook" }), " ");
          break;
        case "retry": { // the output the hook sent back folds into its retry: open it to see what was rejected
          const calls = c.querySelector(".calls"), rejected = calls.lastElementChild;
          const box = el("details", { class: "retry", "data-testid": "retry" },
            el("summary", { class: "small" }, badge("submitted", `retry ${p.attempt}`), ` after ${p.hook_id}: ${short(p.message || "", 160)}`));
          if (rejected && rejected.classList.contains("call")) box.append(rejected);
          calls.append(box);
          c.dataset.retries = String((+c.dataset.retries || 0) + 1);
          break;
        }
        case "reply": {
          const parts = [el("div", { class: "reply", "data-testid": "reply" }, p.text, p.fallback ? badge("rejected", "fallback: " + p.reason) : null)];
          if (opts.onReply) parts.push(...(opts.onReply(c, ev) || []));
          c.querySelector(".final").replaceChildren(...parts);
          if (p.fallback) c.dataset.fallback = "1";
          c.dataset.judged = "1";
          for (const n of c.querySelectorAll("[data-testid=unjudged]")) n.remove();
          c.querySelector(".calls-box").open = false; // the reply says it: the streamed output folds
          break;
        }
        case "timings":
          c.querySelector(".timings").textContent = `TTFT ${ms(p.ttft_ms)} · model ${ms(p.model_ms)} · tools ${ms(p.tool_ms)} · engine ${ms(p.engine_ms)} · total ${ms(p.total_ms)} · ${p.model_calls} model call(s), ${p.retries} retries`;
          break;
        case "deadline_exceeded":
          c.querySelector(".final").append(el("div", { class: "alert error small", "data-testid": "turn-error", text: `deadline exceeded (${p.stage}) after ${ms(p.elapsed_ms)}` }));
          break;
        case "error":
        case "turn_failed":
          c.querySelector(".final").append(el("div", { class: "alert error small", "data-testid": "turn-error", text: `${p.stage || "turn"}: ${p.message}` }));
          break;
        case "prompt_built": break; // shown through the events above
        default: return false;
      }
      return true;
    }
    return { render: render, card: card };
  }

  // --- the feed: its own scroll box, filters, following the latest turn --------------------------------------
  const FILTERS = [["all", "All turns"], ["fallbacks", "Fallbacks only"], ["hook-failures", "Hook failures only"]];
  const EMPTY = { fallbacks: "No turn fell back.", "hook-failures": "No turn failed a hook." };
  const MATCH = { fallbacks: "[data-fallback]", "hook-failures": "[data-hook-failed]" };

  // The feed scrolls in its own box (the page, and the comment box under the feed, stay put). It follows new turns
  // while the reader is at its bottom; scrolled up, it stays where they are and offers "Jump to latest".
  function feedBox(feed) {
    const bar = el("div", { class: "feed-bar row small", role: "toolbar", "aria-label": "Show", "data-testid": "feed-filters" });
    for (const [value, text] of FILTERS) {
      bar.append(el("button", { type: "button", class: "small", "data-filter": value, "data-testid": "filter-" + value,
        "aria-pressed": String(value === "all"), text: text }));
    }
    const count = bar.appendChild(el("span", { class: "muted right", "data-testid": "feed-count" }));
    const empty = el("p", { class: "feed-empty muted small", "data-testid": "feed-empty", hidden: "" });
    const jump = el("button", { type: "button", class: "jump-latest primary small", "data-testid": "jump-latest", hidden: "" });
    const box = el("div", { class: "feed-box", "data-testid": "feed-box" });
    feed.before(box);
    box.append(bar, feed, empty, jump);
    feed.classList.add("feed-scroll");
    feed.dataset.filter = "all";
    feed.dataset.following = "1";

    let following = true, unseen = 0, lastTop = 0;
    const atBottom = () => feed.scrollHeight - feed.scrollTop - feed.clientHeight <= 24;
    const toBottom = () => { feed.scrollTop = feed.scrollHeight; lastTop = feed.scrollTop; };
    function follow(on) {
      following = on;
      feed.dataset.following = on ? "1" : "0";
      if (on) { unseen = 0; jump.hidden = true; }
    }
    function counts() {
      const all = feed.querySelectorAll(":scope > .turn").length, f = feed.dataset.filter;
      const shown = f === "all" ? all : feed.querySelectorAll(`:scope > .turn${MATCH[f]}`).length;
      count.textContent = f === "all" ? `${all} turn${all === 1 ? "" : "s"}` : `${shown} of ${all} turns`;
      empty.textContent = EMPTY[f] || "";
      empty.hidden = f === "all" || shown > 0;
    }
    feed.addEventListener("scroll", () => {
      const up = feed.scrollTop < lastTop - 2; // the reader scrolled up (a box that shrank also moves up: still at the bottom)
      lastTop = feed.scrollTop;
      if (atBottom()) follow(true);
      else if (up) follow(false);
    });
    new MutationObserver((records) => {
      for (const r of records) for (const n of r.addedNodes) if (n.parentNode === feed && n.classList && n.classList.contains("turn")) unseen += 1;
      counts();
      if (following) { toBottom(); unseen = 0; return; }
      jump.textContent = unseen ? `Jump to latest (${unseen} new) ↓` : "Jump to latest ↓";
      jump.hidden = false;
    }).observe(feed, { childList: true, subtree: true, characterData: true });
    jump.addEventListener("click", () => { follow(true); toBottom(); });
    bar.addEventListener("click", (e) => {
      const b = e.target.closest("button[data-filter]");
      if (!b) return;
      feed.dataset.filter = b.dataset.filter;
      for (const other of bar.querySelectorAll("button[data-filter]")) other.setAttribute("aria-pressed", String(other === b));
      counts();
      if (following) toBottom();
    });
    counts();
    return { box: box, follow: () => { follow(true); toBottom(); }, following: () => following };
  }

  window.hatTurns = { create: create, feedBox: feedBox, el: el, badge: badge, ms: ms };
})();
