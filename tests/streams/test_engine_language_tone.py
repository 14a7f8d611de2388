"""The language and tone constraints: offline checks before every reply (constraints.language,
constraints.tone), their verdicts, the retry/fallback path, and no false positives on gold replies."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_editor.schemas import InteractionConstraints, manifest_from_yaml
from streams.engine import hooks as H
from streams.engine.turn import HOOK_FEEDBACK_PREFIX, run_turn
from tests.streams.scripted_endpoint import hermes_calls, reply

DEMO = Path(__file__).resolve().parents[2] / "harness_editor" / "demo"

# The same live-commerce reply in several languages (product names, prices and counts left in).
SAME_REPLY = {
    "en": "The HydraGlow serum is $24.9 right now and we have only 12 left, so grab yours today.",
    "es": "El sérum HydraGlow está a 24,9 dólares ahora y quedan solo 12 unidades, así que aprovecha hoy.",
    "fr": "Le sérum HydraGlow est à 24,9 dollars maintenant et il en reste seulement 12, alors profitez-en.",
    "de": "Das HydraGlow Serum kostet jetzt 24,9 Dollar und wir haben nur noch 12 Stück, also greif heute zu.",
    "pt": "O sérum HydraGlow está por 24,9 dólares agora e só temos 12 unidades, então aproveite hoje.",
    "it": "Il siero HydraGlow costa 24,9 dollari adesso e ne abbiamo solo 12, quindi approfittane oggi.",
    "nl": "Het HydraGlow serum kost nu 24,9 dollar en we hebben er nog maar 12, dus pak het vandaag.",
    "id": "Serum HydraGlow sekarang harganya 24,9 dolar dan stok kami tinggal 12, jadi beli hari ini ya.",
    "zh": "HydraGlow 精华现在只要 24.9 美元，库存只剩 12 件，快下单吧！",
    "ja": "HydraGlow セラムは今だけ24.9ドルで、在庫は残り12個です。お早めにどうぞ！",
    "ko": "HydraGlow 세럼은 지금 24.9달러이고 재고는 12개 남았어요. 서두르세요!",
    "ru": "Сыворотка HydraGlow сейчас стоит 24,9 доллара, осталось всего 12 штук.",
    "ar": "سيروم HydraGlow الآن بسعر 24.9 دولار وتبقى 12 قطعة فقط.",
    "hi": "HydraGlow सीरम अभी 24.9 डॉलर में है और केवल 12 बचे हैं।",
    "th": "เซรั่ม HydraGlow ตอนนี้ราคา 24.9 ดอลลาร์ เหลือเพียง 12 ชิ้นเท่านั้น",
}


def state(text, results=()):
    return H.ReplyState(text, ["price_stock_qa"], list(results))


def lang(text, language):
    return H.check_language(InteractionConstraints(language=language), state(text))


def tone(text, tone_text="warm, upbeat and concise", language="en", results=()):
    return H.check_tone(InteractionConstraints(language=language, tone=tone_text), state(text, results))


# --- language ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("language", sorted(SAME_REPLY))
def test_a_reply_in_the_rooms_language_passes(language):
    assert lang(SAME_REPLY[language], language).passed


@pytest.mark.parametrize(("language", "written_in"), [
    ("en", "es"), ("en", "de"), ("en", "zh"), ("en", "ru"), ("en", "th"),
    ("es", "en"), ("es", "pt"), ("fr", "en"), ("de", "nl"), ("pt", "es"), ("it", "en"), ("nl", "de"),
    ("id", "en"),
    ("zh", "en"), ("zh", "ja"), ("ja", "zh"), ("ja", "ko"), ("ko", "zh"), ("ru", "en"), ("ar", "en"),
    ("hi", "en"), ("th", "en"),
])
def test_a_reply_in_another_language_fails(language, written_in):
    v = lang(SAME_REPLY[written_in], language)
    assert not v.passed and (v.hook_id, v.kind, v.point, v.on_fail) == (H.LANGUAGE_HOOK_ID, "language",
                                                                        "before_reply", "retry")
    assert v.message.startswith("Reply only in") and language in v.message and v.detail


def test_language_message_names_the_language_and_the_problem():
    v = lang(SAME_REPLY["es"], "en")
    assert "English (en)" in v.message and "Spanish" in v.message and "ahora" in v.detail


@pytest.mark.parametrize(("language", "text"), [
    # product names, brands, codes, numbers and link ids are never a language
    ("en", "HydraGlow SPF50 GLOW5 #101 LumiRoll NanoMist AirSilk 24.9 PA++++ 3-5"),
    ("zh", "HydraGlow Hyaluronic Serum 和 Barrier Repair Ceramide Moisturizer 都在 #101 和 #102，用 GLOW5。"),
    ("ja", "Barrier Repair Ceramide Moisturizer は #102 です。コード GLOW5 をどうぞ。"),
    ("ru", "Daily Shield Mineral Sunscreen SPF 50 стоит $19.5, код GLOW5."),
    # a few foreign words (a viewer's name, a greeting) are not a different language
    ("en", "Hi 小红, welcome to the room, glad you are here!"),
    ("en", "Gracias for asking, the serum is $24.9 right now."),
    ("en", "Crème de la Mer is $200 today, down from $250."),
    ("zh", "谢谢 anna 的提问，这款精华现在 24.9 美元。"),
    # too short to judge
    ("en", "¡Hola!"),
    ("es", "OK, thanks!"),
])
def test_names_codes_and_a_few_foreign_words_pass(language, text):
    assert lang(text, language).passed, lang(text, language).detail


@pytest.mark.parametrize(("language", "text", "ok"), [
    ("tlh", SAME_REPLY["zh"], True),  # an unknown tag: nothing to compare with
    ("sv", SAME_REPLY["en"], True),  # Latin-script, no word profile: the script check only
    ("sv", SAME_REPLY["ru"], False),
    ("zh-Hant-TW", SAME_REPLY["zh"], True),
    ("zh-Hant-TW", SAME_REPLY["en"], False),
    ("sr-Latn", "Serum HydraGlow sada košta 24,9 dolara, ostalo je samo 12 komada.", True),
    ("sr-Latn", SAME_REPLY["ru"], False),
    ("sr", SAME_REPLY["ru"], True),  # Serbian is written in both scripts
    ("en-US", SAME_REPLY["en"], True),
    ("en-GB", SAME_REPLY["de"], False),
])
def test_tags_subtags_and_unknown_languages(language, text, ok):
    assert lang(text, language).passed is ok


def test_expected_scripts():
    assert H.expected_scripts("ja") == {"Han", "Kana"}
    assert H.expected_scripts("zh-CN") == {"Han"}
    assert H.expected_scripts("uz-Cyrl") == {"Cyrillic"}
    assert H.expected_scripts("xx") is None and H.expected_scripts("en-Zzzz") is None


def test_stopword_profiles_share_no_word():
    seen: dict[str, str] = {}
    for language, words in H.STOPWORDS.items():
        for w in words:
            assert w not in seen, f"{w!r} is in both {seen.get(w)} and {language}"
            seen[w] = language


# --- tone ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "tone_text", "found"), [
    ("BUY NOW BEFORE IT IS GONE, HURRY!", "warm", "shouting"),
    ("Only 3 left!!!", "warm", "punctuation"),
    ("Really??? It is $24.9.", "formal", "punctuation"),
    ("¡¡¡OFERTA!!! Quedan 12.", "warm", "punctuation"),
    ("That is a stupid question, check the card.", "warm", "hostile"),
    ("You are so annoying, it is $24.9.", "neutral", "hostile"),
    ("Who cares, just buy it.", "", "hostile"),
    ("Shut up and buy it, it is $24.9.", "playful", "hostile"),
    ("Are you blind? The price is on the card.", "warm", "hostile"),
    ("Yeah it's gonna sell out lol, grab it.", "formal", "slang"),
    ("Thank u for asking, it is $24.9.", "professional and polite", "slang"),
    ("Whatever. It is $24.9.", "warm", "dismissive"),
    ("I already told you, it's $24.9.", "friendly", "dismissive"),
    ("Calm down, it is $24.9.", "warm, upbeat and concise", "dismissive"),
    ("Not my problem, ask the courier.", "kind", "dismissive"),
])
def test_tone_failures(text, tone_text, found):
    v = tone(text, tone_text)
    assert not v.passed and (v.hook_id, v.kind, v.on_fail) == (H.TONE_HOOK_ID, "tone", "retry")
    assert found in v.detail
    assert v.message.startswith("Keep the tone") and v.message.endswith("Answer the viewer again.")


@pytest.mark.parametrize(("text", "tone_text"), [
    ("The LED Mirror with SPF 50 and USB charging is $40 right now.", "formal"),
    ("Use code SAVEBIG for $5 off, and VIPDAY works too.", "warm"),
    ("Really?! Only 3 left, so be quick!", "warm, upbeat"),
    ("There are no stupid questions, the serum is $24.9.", "warm"),
    ("This serum helps calm down redness.", "warm"),
    ("Great for anyone who cares about their skin.", "warm"),
    ("The redness won't go away overnight, be patient.", "warm"),
    ("We will deal with it right away, sorry about that.", "warm"),
    ("Pick whatever shade you like, all are $24.9.", "warm"),
    ("It is flame retardant and idiot-proof.", "warm"),
    ("The U-shaped pillow is $20.", "formal"),
    ("It's gonna sell out lol, grab it.", "informal, playful"),  # slang is fine when formality is not asked
    ("It's gonna sell out lol, grab it.", "not formal"),
    ("OMG this is great, welcome!", "warm"),
])
def test_tone_passes(text, tone_text):
    v = tone(text, tone_text)
    assert v.passed, v.detail


def test_words_from_this_turns_tool_results_are_not_shouting():
    text = "Use GLOWUP SUMMER SALE today for $5 off."
    assert not tone(text).passed
    assert tone(text, results=[{"coupons": [{"code": "GLOWUP", "title": "SUMMER SALE"}]}]).passed


def test_english_word_lists_apply_only_to_english_rooms():
    assert not tone("Whatever. It is $24.9.", "warm", language="en-US").passed
    assert tone("Whatever. It is $24.9.", "warm", language="es").passed
    assert not tone("¡¡¡OFERTA!!!", "warm", language="es").passed  # punctuation is universal


def test_declared_tones():
    assert H.declared_tones("Warm, upbeat and concise") == {"warm"}
    assert H.declared_tones("formal and friendly") == {"formal", "warm"}
    assert H.declared_tones("informal") == set() and H.declared_tones("not formal, semi formal") == set()


# --- wiring: verdicts, retry, fallback -----------------------------------------------------------------------


def test_before_reply_runs_language_and_tone(engine_manifest):
    verdicts = H.run_before_reply(engine_manifest, state(SAME_REPLY["en"]))
    ids = [v.hook_id for v in verdicts]
    assert ids[-2:] == [H.LANGUAGE_HOOK_ID, H.TONE_HOOK_ID] and all(v.passed for v in verdicts[-2:])
    failed = H.run_before_reply(engine_manifest, state("¡¡¡" + SAME_REPLY["es"]))
    assert [v.hook_id for v in failed if not v.passed][-2:] == [H.LANGUAGE_HOOK_ID, H.TONE_HOOK_ID]


GOOD = "The HydraGlow serum is $24.9 right now, list price $34, and we have 180 in stock."
SPANISH = "El sérum HydraGlow está a 24,9 dólares ahora y quedan 180 en stock, así que aprovecha hoy."
LOAD_PRICE_SKILL = ("load_skill", {"skill_id": "price_stock_qa"})
LOOKUP_101 = ("lookup_product", {"link_id": 101})


def test_wrong_language_is_retried_with_a_clear_message(scripted_endpoint, engine_client, engine_manifest,
                                                       engine_room):
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), reply(SPANISH), reply(GOOD))
    r = run_turn(manifest=engine_manifest, room=engine_room, comments=[{"viewer": "amy", "text": "#101?"}],
                 backend=engine_client())
    assert (r.reply, r.reason) == (GOOD, "ok")
    [retry] = [e for e in r.events if e.type == "retry"]
    assert retry.hook_id == H.LANGUAGE_HOOK_ID and "English (en)" in retry.message
    feedback = scripted_endpoint.requests[-1]["messages"][-1]
    assert feedback["content"].startswith(HOOK_FEEDBACK_PREFIX) and "Reply only in English" in feedback["content"]


def test_hostile_reply_every_time_ends_in_the_fallback(scripted_endpoint, engine_client, engine_manifest,
                                                      engine_room):
    max_retries, fallback, _ = H.retry_policy(engine_manifest)
    rude = "Who cares, it is $24.9, check the card yourself."
    scripted_endpoint.add(hermes_calls(LOAD_PRICE_SKILL, LOOKUP_101), *[reply(rude)] * (max_retries + 1))
    r = run_turn(manifest=engine_manifest, room=engine_room, comments=[{"viewer": "amy", "text": "#101?"}],
                 backend=engine_client())
    assert r.fallback and r.reason == "retries_exhausted" and r.reply == fallback
    tone_results = [e for e in r.events if e.type == "hook_result" and e.hook_id == H.TONE_HOOK_ID]
    assert len(tone_results) == max_retries + 1 and not any(e.passed for e in tone_results)


# --- no false positives on gold replies ---------------------------------------------------------------------


def _gold_replies():
    from streams.reference_policy import GoldComment, ReferencePolicyError, gold_trajectory
    from streams.scenarios import demo_scenario_paths, load_scenario
    from streams.simulator import ScenarioRun
    from training_jobs.tiny_model.gold import generate, load_tiny_manifest

    out = {t.reply: t for t in generate(200, split="train")}
    tiny = load_tiny_manifest()
    for path in demo_scenario_paths():  # every comment of every demo scenario, every intent it could need
        for tick in ScenarioRun(load_scenario(path)).iter_ticks(1.0):
            room = tick.room
            regions = [""] + list((room.get("shipping") or {}).get("regions") or {})
            for c in tick.comments:
                ids = list(c.link_ids) or [p["link_id"] for p in room["products"]]
                comments = [GoldComment(c.text, "chit_chat", c.viewer_name),
                            GoldComment(c.text, "coupon", c.viewer_name)]
                comments += [GoldComment(c.text, intent, c.viewer_name, link_id=i, condition="acne")
                             for i in ids for intent in ("price", "stock", "compliance")]
                comments += [GoldComment(c.text, "shipping", c.viewer_name, region=r) for r in regions]
                for g in comments:
                    try:
                        t = gold_trajectory(tiny, room, g)
                    except ReferencePolicyError:
                        continue
                    out.setdefault(t.reply, t)
    return list(out.values())


def test_no_gold_reply_is_flagged():
    golds = _gold_replies()
    assert len(golds) > 100
    constraints = [manifest_from_yaml(p.read_text(encoding="utf-8")).constraints
                   for p in sorted(DEMO.glob("*.yaml")) if p.name not in ("room.yaml",)]
    assert {c.tone for c in constraints} >= {"warm", "warm, upbeat and concise"}
    constraints += [constraints[0].model_copy(update={"tone": t}) for t in ("formal and professional", "friendly")]
    flagged = []
    for g in golds:
        s = H.ReplyState(g.reply, [g.skill_id], [g.tool_result] if g.tool_result else [])
        for c in constraints:
            flagged += [(g.reply, v.hook_id, v.detail) for v in (H.check_language(c, s), H.check_tone(c, s))
                        if not v.passed]
    assert not flagged
