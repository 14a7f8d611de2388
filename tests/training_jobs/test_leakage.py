"""Leakage check (training_jobs.evals.leakage): evaluation texts found in training texts exactly, whole inside a
longer text, or as a near copy sharing a long n-gram; independent wording passes. Plain strings, no database."""

from __future__ import annotations

import pytest

from training_jobs.evals.leakage import Leak, find_leaks, normalise, tokens

CASE = ("Hi! Does link 103 really heal scars, and how much is the HydraGlow serum in today's flash sale? "
        "My sister bought it last week and says the price went up since then")


def test_normalisation_ignores_case_whitespace_punctuation_and_width():
    assert tokens("  Ｈｅｌｌｏ,\tWORLD!! ") == ["hello", "world"]
    assert normalise("Link 103 —  SOLD out?") == "link 103 sold out"


def test_exact_copy_is_found_whatever_the_formatting():
    leaks = find_leaks(["unrelated text", CASE.upper().replace(" ", "\n  ")], [CASE])
    assert leaks == [Leak(training_index=1, eval_index=0, kind="exact", shared_ngrams=leaks[0].shared_ngrams,
                          overlap=1.0, span=normalise(CASE))]


def test_a_case_inside_a_training_transcript_is_found():
    transcript = f"system: you are the host\nviewer: {CASE}\nassistant: HydraGlow is $35 today."
    [leak] = find_leaks([transcript], [CASE])
    assert (leak.kind, leak.overlap) == ("contained", 1.0)
    short = "how much is link 103 today"  # shorter than the n-gram, long enough to be matched whole
    assert find_leaks([f"viewer: {short}?? thanks"], [short])[0].kind == "contained"


def test_a_near_copy_shares_a_long_ngram():
    edited = CASE.replace("Hi!", "Hello there,").replace("last week", "on Monday")
    [leak] = find_leaks([edited], [CASE])
    assert leak.kind == "ngram" and 0.5 < leak.overlap < 1 and len(leak.span.split()) == 8
    assert leak.describe().startswith("eval #0 in training #0 (ngram, ")


def test_independent_wording_on_the_same_topic_passes():
    paraphrase = ("Can the serum from link 103 fade scars? Also what does HydraGlow cost during the current "
                  "sale, my sister paid less for it a few days ago")
    assert find_leaks([paraphrase], [CASE]) == []


def test_short_texts_match_only_exactly_and_thresholds_are_settable():
    assert find_leaks(["is it in stock now or not"], ["in stock"]) == []
    assert [leak.kind for leak in find_leaks(["In stock?"], ["in stock"])] == ["exact"]
    assert find_leaks(["a b c d e f g h i j"], ["x b c d e f y"]) == []
    assert find_leaks(["a b c d e f g h i j"], ["x b c d e y"], min_ngram=4)[0].span == "b c d e"
    assert find_leaks(["say hi to all of you"], ["hi to all"], min_contained_tokens=3)[0].kind == "contained"
    with pytest.raises(ValueError):
        find_leaks([], [], min_ngram=1)


def test_one_record_per_pair_ordered_by_eval_then_training():
    evals = [CASE, "a completely different evaluation prompt about gift wrapping paper and ribbons for presents"]
    training = [evals[1], "nothing", CASE, f"intro {evals[1]} outro", CASE]
    leaks = find_leaks(training, evals)
    assert [(x.eval_index, x.training_index, x.kind) for x in leaks] == [
        (0, 2, "exact"), (0, 4, "exact"), (1, 0, "exact"), (1, 3, "contained")]
    assert find_leaks([], evals) == [] and find_leaks(training, []) == [] and find_leaks([""], [""]) == []
