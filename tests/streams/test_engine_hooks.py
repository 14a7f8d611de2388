"""Each hook kind, pass and fail (pure functions, no endpoint)."""

from __future__ import annotations

import time

import pytest

from harness_editor.schemas import (
    BannedPhrasesHook,
    FactualRiskHook,
    InteractionConstraints,
    ReplyFormatHook,
    ReplySkillLoadedHook,
    RetryControlHook,
    ToolArgsHook,
    ViewerInputHook,
)
from streams.bindings import product_info, stock
from streams.engine import hooks as H

MSG = "fix it"


def state(reply, loaded=(), results=()):
    return H.ReplyState(reply, list(loaded), list(results))


# --- viewer_input ----------------------------------------------------------------------------------------


def test_viewer_input_pass_and_fail():
    hook = ViewerInputHook(id="vi", kind="viewer_input", message=MSG, max_chars=50,
                           blocked_patterns=[r"(?i)\btelegram\b"])
    ok = H.check_viewer_input(hook, [{"text": "how much is 101?"}])
    assert ok.passed and ok.message == "" and ok.point == "viewer_input"
    long = H.check_viewer_input(hook, [{"text": "x" * 51}])
    assert not long.passed and "51 characters" in long.detail and long.message == MSG
    pat = H.check_viewer_input(hook, [{"text": "ok"}, {"text": "find me on Telegram"}])
    assert not pat.passed and "comment 1" in pat.detail


def test_pathological_pattern_cannot_stall_a_turn():
    hook = ViewerInputHook(id="vi", kind="viewer_input", message=MSG, max_chars=2000,
                           blocked_patterns=[r"^(a|aa)+$"])
    start = time.perf_counter()
    v = H.check_viewer_input(hook, [{"text": "a" * 60 + "!"}])
    assert time.perf_counter() - start < 2.0
    assert not v.passed and "timed out" in v.detail  # fail closed


# --- tool_args ------------------------------------------------------------------------------------------


def test_tool_args_pass_and_fail(engine_manifest):
    tool = engine_manifest.tool("lookup_product")
    hook = ToolArgsHook(id="ta", kind="tool_args", message=MSG)
    assert H.check_tool_args(hook, "lookup_product", H.validate_arguments(tool, {"link_id": 101})).passed
    errors = H.validate_arguments(tool, {"link_id": "101"})
    v = H.check_tool_args(hook, "lookup_product", errors)
    assert not v.passed and "link_id" in v.detail and v.point == "tool_args"
    assert H.validate_arguments(tool, {})  # required missing
    extra = {"link_id": 101, "colour": "red"}
    assert H.validate_arguments(tool, extra, strict=True)
    assert H.validate_arguments(tool, extra, strict=False) == []


# --- before the reply ------------------------------------------------------------------------------------


def test_reply_skill_loaded(engine_manifest):
    hook = ReplySkillLoadedHook(id="rs", kind="reply_skill_loaded", message=MSG)
    assert H.check_reply_skill_loaded(hook, engine_manifest, state("hi", ["price_stock_qa"])).passed
    v = H.check_reply_skill_loaded(hook, engine_manifest, state("hi", ["coupon_strategy"]))  # a strategy skill
    assert not v.passed and "coupon_strategy" in v.detail
    assert not H.check_reply_skill_loaded(hook, engine_manifest, state("hi")).passed


C = InteractionConstraints(reply_min_chars=10, reply_max_chars=120)


@pytest.mark.parametrize("reply, problem", [
    ("**Big** sale on the serum today!", "markdown"),
    ("- serum\n- cleanser on sale now", "markdown"),
    ("1. Go to the cart and tap buy", "markdown"),
    ("See [the card](http://x.y) for more", "markdown"),
    ("Go to https://shop.example.com for more", "link"),
    ("Visit glowgadget.com to learn more", "link"),
    ("The serum is great for you today 😍", "emoji"),
    ("Too short", "fewer than"),
    ("A" * 121, "more than 120"),
    ("One. Two is here. Three is here. Four is here.", "sentences"),
])
def test_reply_format_fails(reply, problem):
    hook = ReplyFormatHook(id="rf", kind="reply_format", message=MSG, max_sentences=3)
    v = H.check_reply_format(hook, C, state(reply))
    assert not v.passed and problem in v.detail


def test_reply_format_passes_prices_and_decimals():
    hook = ReplyFormatHook(id="rf", kind="reply_format", message=MSG, max_sentences=2)
    v = H.check_reply_format(hook, C, state("The serum is $24.9 today. Grab it before 8 pm!"))
    assert v.passed, v.detail


def test_constraints_check_without_format_hook(engine_manifest):
    m = engine_manifest.model_copy(update={"hooks": [h for h in engine_manifest.hooks if h.kind != "reply_format"]})
    verdicts = H.run_before_reply(m, state("# Heading\nshort", ["price_stock_qa"]))
    c = [v for v in verdicts if v.hook_id == H.CONSTRAINTS_HOOK_ID][0]
    assert not c.passed and "markdown" in c.detail and "characters" in c.message
    ok = H.run_before_reply(m, state("A plain spoken reply here.", ["price_stock_qa"]))
    assert [v for v in ok if v.hook_id == H.CONSTRAINTS_HOOK_ID][0].passed


def test_banned_phrases():
    hook = BannedPhrasesHook(id="bp", kind="banned_phrases", message=MSG, phrases=["cures acne", "Clinically Proven"])
    assert H.check_banned_phrases(hook, state("It helps skin feel hydrated.")).passed
    v = H.check_banned_phrases(hook, state("This CURES ACNE and is clinically proven."))
    assert not v.passed and "cures acne" in v.detail and "Clinically Proven" in v.detail
    strict = hook.model_copy(update={"case_sensitive": True})
    assert H.check_banned_phrases(strict, state("This CURES ACNE.")).passed


# --- factual risk -----------------------------------------------------------------------------------------

RISK = FactualRiskHook(id="fr", kind="factual_risk", message=MSG, check=["price", "stock", "discount"])


@pytest.fixture
def results(engine_room):
    return [product_info(engine_room, 102), stock(engine_room, 102)]  # 29.0 / list 39.0 / stock 8


@pytest.mark.parametrize("reply", [
    "The moisturizer is $29 today.",
    "The moisturizer is $29.00, list price $39.",
    "Only 29.0 dollars!",
    "Hurry, only 8 left!",
    "Stock is 8 right now.",
    "You save $10 on it today.",
    "That is 26% off the list price.",
    "No numbers here at all, friends!",
    "Link 102 comes in 3 sizes.",  # link ids and other numbers are not claims
])
def test_factual_risk_backed(reply, results):
    v = H.check_factual_risk(RISK, state(reply, results=results))
    assert v.passed, v.detail


@pytest.mark.parametrize("reply, category", [
    ("The moisturizer is $24.5 today.", "price"),
    ("It's just ¥99 now.", "price"),
    ("Only 25.90 dollars!", "price"),
    ("Only 3 left, hurry!", "stock"),
    ("Stock 180, plenty for everyone.", "stock"),
    ("Take 30% off right now!", "discount"),
    ("Save $9.1 when you buy today.", "discount"),
])
def test_factual_risk_unbacked(reply, category, results):
    v = H.check_factual_risk(RISK, state(reply, results=results))
    assert not v.passed and category in v.detail and v.message == MSG


def test_factual_risk_needs_tool_results_of_this_turn():
    assert not H.check_factual_risk(RISK, state("The serum is $24.9.")).passed
    assert H.check_factual_risk(RISK, state("The serum is $24.90.", results=[{"price": 24.9}])).passed
    price_only = RISK.model_copy(update={"check": ["price"]})
    assert H.check_factual_risk(price_only, state("Only 3 left!")).passed  # stock not checked by this hook


def test_factual_risk_flash_sale_saving(engine_room):
    info = product_info(engine_room, 101)  # flash 19.9, list 34.0
    assert H.check_factual_risk(RISK, state("Flash price $19.9, you save $14.1!", results=[info])).passed


# --- retry control ----------------------------------------------------------------------------------------


def test_retry_control(engine_manifest):
    hook = RetryControlHook(id="rc", kind="retry_control", message=MSG, max_retries=2, fallback_reply="One moment!")
    assert H.check_retry_control(hook, 0).passed and H.check_retry_control(hook, 1).passed
    v = H.check_retry_control(hook, 2)
    assert not v.passed and "2 retries" in v.detail
    assert H.retry_policy(engine_manifest)[0] == 2
    bare = engine_manifest.model_copy(update={"hooks": []})
    assert H.retry_policy(bare) == (H.DEFAULT_MAX_RETRIES, H.DEFAULT_FALLBACK_REPLY, None)


def test_disabled_hooks_do_not_run(engine_manifest):
    hooks = [h.model_copy(update={"enabled": False}) for h in engine_manifest.hooks]
    m = engine_manifest.model_copy(update={"hooks": hooks})
    verdicts = H.run_before_reply(m, state("A perfectly fine reply for $1234."))
    # the built-in constraint checks still run: format (no reply_format hook), quality, relevance, language, tone
    assert [v.hook_id for v in verdicts] == [H.CONSTRAINTS_HOOK_ID, H.QUALITY_HOOK_ID, H.RELEVANCE_HOOK_ID,
                                             H.LANGUAGE_HOOK_ID, H.TONE_HOOK_ID]
    assert all(v.passed for v in verdicts)


def test_many_slow_blocked_patterns_cannot_stall_the_turn():
    """Each catastrophic pattern times out at 50 ms; 100 of them on one comment took 5 s of the interactive worker.
    The whole check now has a budget and fails closed when it is spent."""
    hook = ViewerInputHook(id="vi", kind="viewer_input", message=MSG,
                           blocked_patterns=[f"^(a|aa)+{i}?$" for i in range(100)])
    start = time.monotonic()
    v = H.check_viewer_input(hook, [{"text": "a" * 40 + "!"}])
    assert time.monotonic() - start < H.VIEWER_INPUT_BUDGET_S + 0.2
    assert not v.passed and "ran out of time" in v.detail
