// One turn's events drawn as a card, as they stream: the preview room (preview.js) and a live session's operator
// page (live.js) both render turns with this. window.hatTurns.create(feed, options) returns a renderer whose
// render(ev) draws an event of a turn (ev.turn_id set) into its card and returns true, or returns false for a type
// it does not know (the page draws those itself). options.onReply(card, ev) may return extra nodes after a reply.
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

  function create(feed, options) {
    const opts = options || {};

    function card(turnId) {
      let c = feed.querySelector(`[data-turn="${turnId}"]`);
      if (!c) {
        c = el("article", { class: "card turn", "data-turn": turnId, "data-testid": "turn" },
          el("div", { class: "head" }, el("span", { text: "turn " + turnId.slice(0, 8) }), el("span", { class: "meta" })),
          el("div", { class: "comments" }), el("div", { class: "calls" }),
          el("div", { class: "skills" }), el("ul", { class: "tools" }), el("div", { class: "hooks" }),
          el("div", { class: "final" }), el("div", { class: "timings small muted", "data-testid": "timings" }));
        feed.append(c);
      }
      return c;
    }
    function currentStream(c) {
      let calls = c.querySelector(".calls"), last = calls.lastElementChild;
      if (!last || !last.querySelector(".stream")) {
        last = el("div", { class: "call" }, el("div", { class: "call-head", text: "model" }), el("div", { class: "stream", "data-testid": "stream" }));
        calls.append(last);
      }
      return last.querySelector(".stream");
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
          const endpoint = typeof p.endpoint === "string" ? p.endpoint : (p.endpoint || {}).model || (p.endpoint || {}).name;
          c.querySelector(".meta").textContent = `${v.harness || v.slug} v${v.number}` + (p.revision != null ? ` · revision ${typeof p.revision === "object" ? p.revision.number : p.revision}` : "") +
            (endpoint ? ` · ${endpoint}` : "") + (p.minute != null ? ` · minute ${p.minute}` : "") + (faults ? ` · faults ${faults}` : "");
          break;
        }
        case "model_request":
          c.querySelector(".calls").append(el("div", { class: "call" },
            el("div", { class: "call-head", text: `model call ${p.call_index + 1} (round ${p.round}${p.attempt > 1 ? ", retry " + p.attempt : ""})` }),
            el("div", { class: "stream", "data-testid": "stream" })));
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
          break;
        }
        case "tool_call":
          c.querySelector(".tools").append(el("li", { "data-testid": "tool-call", "data-call": p.call_id },
            el("code", { text: `${p.name}(${short(p.arguments ?? p.arguments_raw, 200)})` }), " ",
            badge(p.valid ? "approved" : "rejected", p.valid ? "valid" : "invalid"),
            p.error ? el("span", { class: "small", text: " " + p.error }) : null));
          break;
        case "tool_result": {
          const li = c.querySelector(`[data-call="${p.call_id}"]`) || c.querySelector(".tools").appendChild(el("li"));
          li.append(el("pre", { "data-testid": "tool-result", text: (p.fault ? `[fault ${p.fault}] ` : "") + (p.error ? "error: " + p.error : short(p.result, 600)) + `  (${ms(p.duration_ms)})` }));
          break;
        }
        case "skill_loaded":
          c.querySelector(".skills").append(badge(p.ok ? "label" : "rejected", `skill ${p.skill_id}${p.kind ? " · " + p.kind : ""}${p.ok ? "" : " (failed)"}`, { "data-testid": "skill" }));
          break;
        case "hook_result":
          c.querySelector(".hooks").append(badge(p.passed ? "approved" : "rejected", `${p.hook_id} ${p.passed ? "pass" : "fail"}`,
            { title: `${p.kind} at ${p.point}${p.detail ? ": " + p.detail : ""}`, "data-testid": "hook" }), " ");
          break;
        case "retry":
          c.querySelector(".calls").append(el("div", { class: "small muted", text: `retry ${p.attempt} after ${p.hook_id}: ${p.message}` }));
          break;
        case "reply": {
          const parts = [el("div", { class: "reply", "data-testid": "reply" }, p.text, p.fallback ? badge("rejected", "fallback: " + p.reason) : null)];
          if (opts.onReply) parts.push(...(opts.onReply(c, ev) || []));
          c.querySelector(".final").replaceChildren(...parts);
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

  window.hatTurns = { create: create, el: el, badge: badge, ms: ms };
})();
