"""Build the labelled judging sets: ``data/judging/bad_replies.jsonl`` (replies a named rule must catch),
``data/judging/good_replies.jsonl`` (replies every rule must pass) and ``data/judging/rooms.json`` (the rooms
their ``room`` references name).

    python -m training_jobs.judging_sets               # build from the recording (record it first if missing)
    python -m training_jobs.judging_sets --record      # re-record the demo model's turns, then build
    python -m training_jobs.judging_sets --check       # exit 1 if the committed files differ from a rebuild

Bad replies come from (``source``):

- ``demo-model`` — the committed demo model's own replies in the turn engine (:mod:`.record`), labelled by the
  gold-based labeller (:mod:`.oracle`);
- ``issue-11`` — the four replies issue 11 found passing the old rules;
- ``mutation:<kind>`` — gold replies changed one way each (another product's figure, the list price or the
  free-shipping threshold said as the price, a repeated phrase, a cut start or end, an invented product, ...),
  labelled by construction.

Good replies are the reference policy's gold answers (under the tiny harness and the skincare harnesses) and
the demo model's replies that are exactly the gold answer. Every record carries the comments, the room
reference, the tool results and bound calls of the turn before the reply, the skills loaded, the harness, the
reply and its label: ``rules`` (each must be among the judge's problems) and ``expect`` (``accuracy`` 0,
``effectiveness`` 0, or ``effectiveness_below`` 1; good replies: accuracy 1 and effectiveness 1, no problem).
Plain Python.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from streams.bindings import campaign_state, product_info, shipping_policy, stock
from streams.engine.rules import effect_of
from streams.reference_policy import GoldComment, GoldTrajectory, gold_trajectory, num, short_title
from training_jobs.judging_sets.oracle import label
from training_jobs.judging_sets.record import Context, contexts, read_recording, record
from training_jobs.tiny_model.gold import PRODUCT_POOL, REPO, load_demo_room, load_tiny_manifest

DATA_DIR = REPO / "data" / "judging"
RECORDING = REPO / "var" / "judging" / "recorded.jsonl"
SEED = 11
MAX_PER_RULE_FROM_MODEL = 25  # keep the model's most common defect from swamping the set
MAX_MUTATIONS_PER_KIND = 14
MAX_GOOD_PER_KIND = 12  # good replies per (source, intent)


# --- records --------------------------------------------------------------------------------------------------------


def _expect(rules: Sequence[str]) -> dict[str, float]:
    effects = {effect_of(r) for r in rules}
    if "accuracy" in effects:
        return {"accuracy": 0}
    if "effectiveness" in effects:
        return {"effectiveness": 0}
    return {"effectiveness_below": 1}


def _record(source: str, ctx_ref: str, comments: Sequence[Mapping[str, str]], results: Sequence[Any],
            calls: Sequence[Mapping[str, Any]], skills: Sequence[str], reply: str, rules: Sequence[str] | None,
            note: str, harness: str = "tiny_room") -> dict[str, Any]:
    out = {"source": source, "room": ctx_ref, "harness": harness, "comments": [dict(c) for c in comments],
           "tool_results": list(results), "calls": [dict(c) for c in calls], "loaded_skills": list(skills),
           "reply": reply}
    if rules is None:
        out["label"] = {"rules": [], "expect": {"accuracy": 1, "effectiveness": 1}, "note": note}
    else:
        out["label"] = {"rules": list(rules), "expect": _expect(rules), "note": note}
    return out


def _gold_turn(traj: GoldTrajectory, manifest: Any) -> tuple[list[Any], list[dict[str, Any]], list[str]]:
    """(results, bound calls, skills) of a gold trajectory."""
    results = [traj.tool_result] if traj.tool_result is not None else []
    calls = []
    if traj.tool_name is not None:
        from training_jobs.hsa.judging import bound_call

        b = bound_call(manifest, traj.tool_name, traj.tool_arguments)
        if b is not None:
            calls.append({"binding": b.binding, "arguments": dict(b.arguments),
                          "ok": "error" not in (traj.tool_result or {})})
    return results, calls, [traj.skill_id]


# --- the demo model's replies ------------------------------------------------------------------------------------


def model_records(ctxs: Sequence[Context], recording: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    by_key = {c.key: c for c in ctxs}
    bad: list[dict[str, Any]] = []
    good: list[dict[str, Any]] = []
    per_rule: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for rec in read_recording(recording):
        ctx = by_key.get(rec["context"])
        if ctx is None or not rec["reply"].strip():
            continue
        key = (ctx.key, rec["reply"])
        if key in seen:
            continue
        seen.add(key)
        lab = label(reply=rec["reply"], room=ctx.room, comments=ctx.comments, gold=ctx.gold, condition=ctx.condition,
                    results=rec["tool_results"], calls=rec["calls"])
        if lab is None:
            continue
        if lab.rule is None:
            good.append(_record("demo-model", ctx.ref, ctx.comments, rec["tool_results"], rec["calls"],
                                rec["loaded_skills"], rec["reply"], None,
                                f"the gold {getattr(ctx.gold, 'intent', '')} answer, from the model"))
            continue
        if per_rule.get(lab.rule, 0) >= MAX_PER_RULE_FROM_MODEL:
            continue
        per_rule[lab.rule] = per_rule.get(lab.rule, 0) + 1
        bad.append(_record("demo-model", ctx.ref, ctx.comments, rec["tool_results"], rec["calls"],
                           rec["loaded_skills"], rec["reply"], [lab.rule], lab.note))
    return bad, good


# --- the issue's examples -------------------------------------------------------------------------------------------


def issue_records(rooms: dict[str, Any]) -> list[dict[str, Any]]:
    room = load_demo_room()
    rooms["demo"] = room
    stocked = copy.deepcopy(room)
    stocked["products"][3]["stock"] = 15  # the issue's stock call: another product with 15 left
    rooms["issue-11:cleanser-15-left"] = stocked
    deals = [campaign_state(copy.deepcopy(room)), shipping_policy(copy.deepcopy(room))]
    deal_calls = [{"binding": "campaign.state", "arguments": {}, "ok": True},
                  {"binding": "policy.shipping", "arguments": {}, "ok": True}]
    out = [
        _record("issue-11", "demo", [{"viewer": "ann", "text": "what's the coupon code today?"}], deals, deal_calls,
                ["price_stock"], "AirSilk Hair Dryer is $35 in the flash sale until minute 55 in the flash sale until "
                "minute 55.", ["facts.wrong_field", "intent.unaddressed", "quality.repeated"],
                "$35 is the free-shipping threshold, not the dryer's price; a coupon question; a phrase twice"),
        _record("issue-11", "demo", [{"viewer": "bo", "text": "hi!"}], [], [], ["chit_chat"],
                ".55 in the flash sale until minute 29.", ["quality.truncated", "intent.unaddressed"],
                "a cut-off fragment as a greeting"),
        _record("issue-11", "issue-11:cleanser-15-left", [{"viewer": "kim", "text": "does link 103 heal scars?"}],
                [stock(copy.deepcopy(stocked), 104)],
                [{"binding": "catalog.stock", "arguments": {"link_id": 104}, "ok": True}], ["price_stock"],
                "We have 15 of HydraGlow Serum left.",
                ["facts.wrong_entity", "intent.unaddressed", "intent.wrong_product"],
                "15 is the cleanser's stock; an efficacy question about #103 answered with another product's stock"),
        _record("issue-11", "demo", [{"viewer": "max", "text": "how much is the night cream?"}], [], [],
                ["price_stock"], "Retinol Night Cream is $49 right now, down from $65.", ["products.unknown"],
                "not a product of this room (it passed on retry)"),
    ]
    return out


# --- mutations of gold replies ---------------------------------------------------------------------------------


def _replace_figure(reply: str, old: Any, new: Any) -> str | None:
    a, b = f"${num(old)}", f"${num(new)}"
    return reply.replace(a, b, 1) if a in reply and a != b else None


def _other_product(room: Mapping[str, Any], link_id: int, rng: random.Random, *, field: str, avoid: set[float]
                   ) -> Mapping[str, Any] | None:
    others = [p for p in room["products"] if p["link_id"] != link_id and float(p.get(field) or -1) not in avoid
              and p.get(field) is not None]
    return rng.choice(others) if others else None


def mutations(ctx: Context, rng: random.Random, manifest: Any) -> list[tuple[str, dict[str, Any]]]:
    """(kind, record) for each way this gold reply can be broken."""
    g = ctx.gold
    if g is None or (g.tool_result is not None and "error" in g.tool_result):
        return []
    results, calls, skills = _gold_turn(g, manifest)
    room = ctx.room
    out: list[tuple[str, dict[str, Any]]] = []

    def add(kind: str, reply: str | None, rules: list[str], note: str, extra_results: Sequence[Any] = (),
            extra_calls: Sequence[Mapping[str, Any]] = ()) -> None:
        if reply and reply != g.reply:
            out.append((kind, _record(f"mutation:{kind}", ctx.ref, ctx.comments, [*results, *extra_results],
                                      [*calls, *extra_calls], skills, reply, rules, note)))

    words = g.reply.rstrip(".!").split()
    if g.intent in ("price", "stock") and g.tool_result is not None:
        lid = g.tool_result["link_id"]
        mine = next(p for p in room["products"] if p["link_id"] == lid)
        field = "price" if g.intent == "price" else "stock"
        said = float(g.facts[0])
        avoid = {said, float(mine.get("list_price") or -1), float(mine.get("price") or -1), float(mine["stock"])}
        other = _other_product(room, lid, rng, field=field, avoid=avoid)
        if other is not None:
            info = (product_info if field == "price" else stock)(copy.deepcopy(room), other["link_id"])
            value = info["price"] if field == "price" else info["stock"]
            if field == "price":
                bad = _replace_figure(g.reply, said, value)
            else:
                bad = g.reply.replace(f" {num(said)} ", f" {num(value)} ", 1) if f" {num(said)} " in g.reply else None
            add("wrong_product_figure", bad, ["facts.wrong_entity"],
                f"{num(value)} is {short_title(other['title'])}'s {field}, not {short_title(mine['title'])}'s",
                [info], [{"binding": "catalog.product_info" if field == "price" else "catalog.stock",
                          "arguments": {"link_id": other["link_id"]}, "ok": True}])
        if field == "price" and mine.get("list_price") not in (None, mine.get("price")) and "right now" in g.reply:
            title = short_title(mine["title"])
            add("swapped_field", f"{title} is ${num(mine['list_price'])} right now.", ["facts.wrong_field"],
                "the list price said as the price")
        if field == "price":
            ship = shipping_policy(copy.deepcopy(room))
            free = ship.get("free_over")
            title = short_title(mine["title"])
            prices = {float(mine.get("price") or -1), float(mine.get("list_price") or -1)}
            sale = (room.get("campaign") or {}).get("flash_sale") or {}
            if free is not None and float(free) not in prices and float(free) != float(sale.get("price") or -1):
                add("threshold_as_price", f"{title} is ${num(free)} right now.", ["facts.wrong_field"],
                    "the free-shipping threshold said as the price", [ship],
                    [{"binding": "policy.shipping", "arguments": {}, "ok": True}])
        # the question's product, another product's true answer
        other = _other_product(room, lid, rng, field="price", avoid=set())
        if other is not None:
            alt = gold_trajectory(manifest, copy.deepcopy(room), GoldComment(
                ctx.comments[0]["text"], g.intent, ctx.comments[0]["viewer"], link_id=other["link_id"]))
            alt_results, alt_calls, _ = _gold_turn(alt, manifest)
            add("wrong_product", alt.reply, ["intent.wrong_product"],
                f"answers about {short_title(other['title'])}", alt_results, alt_calls)
    if len(words) >= 6:
        k = rng.randint(3, min(6, len(words) // 2))
        tail = " ".join(words[-k:])
        add("repeated_phrase", g.reply.rstrip(".!") + " " + tail + g.reply[len(g.reply.rstrip(".!")):],
            ["quality.repeated"], f"repeats {tail!r}")
    first = words[0]
    if len(first) >= 4 and first.isalpha():
        cut = rng.randint(1, min(3, len(first) - 2))
        add("truncated_start", g.reply[cut:], ["quality.truncated"], f"starts inside {first!r}")
    last = None
    for w in reversed(words):
        if w.isalpha() and len(w) >= 5:
            last = w
            break
    if last is not None:
        i = g.reply.rfind(last)
        add("truncated_end", g.reply[:i + rng.randint(2, len(last) - 2)], ["quality.truncated"],
            f"ends inside {last!r}")
    if g.intent in ("price", "stock", "compliance") and g.tool_result is not None:
        title = short_title(g.tool_result["title"])
        in_room = {short_title(p["title"]) for p in room["products"]}
        pool = sorted(t for t, _ in PRODUCT_POOL
                      if short_title(t) not in in_room and not (set(t.split()) & {w for s in in_room for w in s.split()}))
        invented = rng.choice(pool + ["GlowMax Pro Serum", "SilkWave Curling Iron"])
        if title in g.reply:
            add("invented_product", g.reply.replace(title, invented), ["products.unknown"],
                f"{invented!r} is not sold in this room")
    if g.intent == "compliance" and "cannot promise it fixes" in g.reply:
        add("forbidden_claim", g.reply.replace("so I cannot promise it fixes", "and it fixes").replace(
            "please ask a dermatologist", "results guaranteed"), ["claims.forbidden"], "an efficacy promise")
    if g.intent == "coupon" and g.reply.startswith("Use code"):
        code = g.tool_result["coupons"][0]["code"] if g.tool_result and g.tool_result.get("coupons") else None
        if code:
            add("coupon_not_issued", f"I just sent you code {code}, enjoy!", ["coupon.not_issued"],
                "says the coupon was sent, nothing issued")
            add("unknown_code", g.reply.replace(code, "VIP50" if code != "VIP50" else "MEGA60"),
                ["coupon.unknown_code"], "a code no tool returned")
    if g.intent in ("coupon", "chit_chat", "shipping", "compliance"):
        # another intent's true answer for the same room: it does not address the question
        other_intent = {"coupon": "stock", "chit_chat": "price", "shipping": "stock", "compliance": "price"}[g.intent]
        lid = (g.tool_result or {}).get("link_id") or room["products"][0]["link_id"]
        alt = gold_trajectory(manifest, copy.deepcopy(room), GoldComment(
            ctx.comments[0]["text"], other_intent, ctx.comments[0]["viewer"], link_id=lid))  # type: ignore[arg-type]
        alt_results, alt_calls, _ = _gold_turn(alt, manifest)
        add("unaddressed", alt.reply, ["intent.unaddressed"], f"a {other_intent} answer to a {g.intent} question",
            alt_results, alt_calls)
    if g.intent == "chit_chat" and ctx.comments[0]["viewer"] in g.reply:
        stranger = next(v for v in ("dev", "eli", "fay", "gus") if v != ctx.comments[0]["viewer"])
        add("wrong_viewer", g.reply.replace(ctx.comments[0]["viewer"], stranger), ["intent.wrong_viewer"],
            f"greets {stranger}, who did not write")
    if g.intent in ("price", "stock", "shipping") and len(words) >= 5:
        token = rng.choice(("<|im_end|>", "{title}", "<|endoftext|>"))
        at = rng.randint(2, len(words) - 2)
        add("garbled", " ".join(words[:at] + [token] + words[at:]) + ".", ["quality.garbled"],
            f"a stray {token!r}")
    if g.intent == "price" and g.tool_result is not None:
        ids = {p["link_id"] for p in room["products"]}
        ghost = next(i for i in range(990, 100, -1) if i not in ids)
        add("unknown_link", f"Link #{ghost} is ${num(g.facts[0])} right now.", ["products.unknown"],
            f"link {ghost} is not in this room")
    return out


# --- good replies -----------------------------------------------------------------------------------------------


def gold_records(ctxs: Sequence[Context], manifest: Any) -> list[dict[str, Any]]:
    out = []
    for ctx in ctxs:
        g = ctx.gold
        if g is None:
            continue
        results, calls, skills = _gold_turn(g, manifest)
        out.append(_record("gold:tiny_room", ctx.ref, ctx.comments, results, calls, skills, g.reply, None,
                           f"the reference policy's {g.intent} answer"))
    return out


def skincare_records(rooms: dict[str, Any]) -> list[dict[str, Any]]:
    """Gold turns of the demo scenarios under the full skincare harnesses (their own hooks and constraints)."""
    from training_jobs.hsa.samples import scenario_samples

    out = []
    for s in scenario_samples(("skincare_v1", "skincare_v3")):
        ref = f"scenario:{s.meta['scenario']}@{s.meta['minute']:g}"
        rooms.setdefault(ref, dict(s.room))
        results = [dict(t.result) for t in s.tool_calls()]
        from training_jobs.hsa.judging import bound_call

        calls = []
        for t in s.tool_calls():
            b = bound_call(s.manifest, t.name, t.arguments)
            if b is not None:
                calls.append({"binding": b.binding, "arguments": dict(b.arguments), "ok": "error" not in t.result})
        out.append(_record(f"gold:{s.meta['manifest']}", ref, s.comments, results, calls, s.loaded_skills(), s.reply,
                           None, f"the reference policy's {s.meta.get('intent')} answer", harness=s.meta["manifest"]))
    return out


# --- the build ------------------------------------------------------------------------------------------------------


def _dedupe(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen = set()
    out = []
    for r in records:
        key = (r["room"], r["harness"], json.dumps(r["comments"]), r["reply"], json.dumps(r["tool_results"], sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def build(recording: Path = RECORDING) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    manifest = load_tiny_manifest()
    ctxs = contexts(manifest)
    rooms: dict[str, Any] = {}
    model_bad, model_good = model_records(ctxs, recording)
    bad = issue_records(rooms) + model_bad
    rng = random.Random(SEED)
    per_kind: dict[str, int] = {}
    for ctx in ctxs:
        for kind, rec in mutations(ctx, rng, manifest):
            if per_kind.get(kind, 0) < MAX_MUTATIONS_PER_KIND:
                per_kind[kind] = per_kind.get(kind, 0) + 1
                bad.append(rec)
    good = _dedupe(gold_records(ctxs, manifest) + model_good + skincare_records(rooms))
    per_good: dict[tuple[str, str], int] = {}
    kept = []
    for r in good:
        k = (r["source"], r["label"]["note"])
        if per_good.get(k, 0) < MAX_GOOD_PER_KIND:
            per_good[k] = per_good.get(k, 0) + 1
            kept.append(r)
    bad, good = _dedupe(bad), kept
    for ctx in ctxs:
        rooms.setdefault(ctx.ref, ctx.room)
    used = {r["room"] for r in bad + good}
    rooms = {k: rooms[k] for k in sorted(used)}
    for i, r in enumerate(bad):
        r["id"] = f"bad-{i:04d}"
    for i, r in enumerate(good):
        r["id"] = f"good-{i:04d}"
    return bad, good, rooms


def _jsonl(records: Sequence[Mapping[str, Any]]) -> str:
    keys = ("id", "source", "room", "harness", "comments", "tool_results", "calls", "loaded_skills", "reply", "label")
    return "".join(json.dumps({k: r[k] for k in keys}, ensure_ascii=False, sort_keys=False) + "\n" for r in records)


def outputs(bad: Sequence[Mapping[str, Any]], good: Sequence[Mapping[str, Any]], rooms: Mapping[str, Any]
            ) -> dict[str, str]:
    return {"bad_replies.jsonl": _jsonl(bad), "good_replies.jsonl": _jsonl(good),
            "rooms.json": "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False, sort_keys=True)}"
                                              for k, v in sorted(rooms.items())) + "\n}\n"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help="re-record the demo model's turns first")
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    parser.add_argument("--recording", type=Path, default=RECORDING)
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    if args.record or not args.recording.exists():
        n = record(contexts(), args.recording)
        print(f"recorded {n} candidate replies to {args.recording}")
    bad, good, rooms = build(args.recording)
    files = outputs(bad, good, rooms)
    stale = 0
    for name, text in files.items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path}: differs from a rebuild", file=sys.stderr)
                stale += 1
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    sources: dict[str, int] = {}
    for r in bad:
        sources[r["source"].split(":")[0]] = sources.get(r["source"].split(":")[0], 0) + 1
    print(f"{len(bad)} bad replies ({', '.join(f'{k} {v}' for k, v in sorted(sources.items()))}), "
          f"{len(good)} good replies, {len(rooms)} rooms")
    return 1 if stale else 0
