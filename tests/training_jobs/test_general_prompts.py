"""Stage-2 general prompts (training_jobs.hat.general_prompts): disjoint from IFEval (the T4 evaluation set),
still training IFEval's instruction kinds, each verifiable prompt checkable by lm-eval's IFEval checkers."""

from __future__ import annotations

import pytest

from training_jobs.evals import ifeval
from training_jobs.evals.leakage import find_leaks
from training_jobs.hat.config import DistillStageConfig
from training_jobs.hat.general_prompts import (
    TrainingPrompt,
    built_prompts,
    general_prompts,
    general_training_prompts,
    load_material,
    verifiable_prompts,
)


@pytest.fixture(scope="module")
def ifeval_texts():
    return [p.prompt for p in ifeval.load_prompts()]


def test_general_prompts_mix_verifiable_and_built_deterministically():
    a, b = general_prompts(40, seed=1), general_prompts(40, seed=1)
    assert a == b and len(a) == len(set(a)) == 40 and general_prompts(40, seed=2) != a
    mix = general_training_prompts(40, seed=1)
    assert [p.prompt for p in mix] == a
    assert sum(p.source == "verifiable" for p in mix) == 20 and all(p.instruction_ids for p in mix
                                                                     if p.source == "verifiable")
    assert sum(p.source == "built" for p in general_training_prompts(10, verifiable_share=0.0)) == 10
    many = built_prompts(300)
    assert len(many) == 300 and len(set(many[:172])) == 172  # every distinct prompt before a repeat
    with pytest.raises(ValueError, match="verifiable_share"):
        general_prompts(4, verifiable_share=1.5)


def test_no_ifeval_prompt_leaks_into_the_general_prompts(ifeval_texts):
    config = DistillStageConfig()
    training = ([p.prompt for p in verifiable_prompts(20_000)] + built_prompts(172)
                + general_prompts(config.general_prompts, config.seed))
    leaks = find_leaks(training, ifeval_texts)
    assert not leaks, "\n".join(leak.describe() for leak in leaks[:10])
    assert not set(training) & set(ifeval_texts)


def test_the_leak_check_would_catch_the_old_mix(ifeval_texts):
    # What stage 2 trained on before: IFEval prompts mixed in, some lightly edited. The same check fails it.
    contaminated = general_prompts(30, seed=0) + [ifeval_texts[10], ifeval_texts[20].upper() + " Thanks!"]
    leaks = find_leaks(contaminated, ifeval_texts)
    found = {(leak.training_index, leak.eval_index, leak.kind) for leak in leaks}
    assert {(30, 10, "exact"), (31, 20, "contained")} <= found
    assert all(leak.training_index >= 30 for leak in leaks)  # (IFEval prompts share phrases with each other)


def test_verifiable_prompts_cover_every_ifeval_instruction_kind_in_new_words():
    from lm_eval.tasks.ifeval import instructions_registry

    prompts = verifiable_prompts(2000, seed=3)
    kinds = {i for p in prompts for i in p.instruction_ids}
    ifeval_kinds = {i for p in ifeval.load_prompts() for i in p.instruction_ids}
    assert kinds == ifeval_kinds and kinds <= set(instructions_registry.INSTRUCTION_DICT)
    assert {len(p.instruction_ids) for p in prompts} == {1, 2, 3}
    assert all(len(p.instruction_ids) == len(p.kwargs) == len(set(p.instruction_ids)) for p in prompts)


def test_every_verifiable_prompt_is_checked_without_random_draws():
    # kwargs complete and valid: the checkers never fall back to a random argument (unlike IFEval 1122/1129)
    prompts = verifiable_prompts(1500, seed=4)
    scores = ifeval.score_responses(prompts, [""] * len(prompts))
    assert not [p.key for p in scores.prompts if any(i.random for i in p.instructions)]
    assert scores.prompt_strict == 0.0  # and an empty reply follows nothing


def _first(prompts: list[TrainingPrompt], ids: tuple[str, ...]) -> TrainingPrompt:
    return next(p for p in prompts if p.instruction_ids == ids)


def test_the_checkers_verify_responses_to_training_prompts():
    prompts = verifiable_prompts(3000, seed=5)
    no_comma = _first(prompts, ("punctuation:no_comma",))
    bullets = _first(prompts, ("detectable_format:number_bullet_lists",))
    n = bullets.kwargs[0]["num_bullets"]
    repeat = _first(prompts, ("combination:repeat_prompt",))
    request = repeat.kwargs[0]["prompt_to_repeat"]
    assert repeat.prompt.startswith(request + "\n\n")
    cases = [(no_comma, "Short and plain with no pause marks.", True), (no_comma, "Yes, it is.", False),
             (bullets, "\n".join(f"* point {i}" for i in range(n)), True),
             (bullets, "\n".join(f"* point {i}" for i in range(n + 1)), False),
             (repeat, f"{request} Here is my answer.", True), (repeat, "Here is my answer.", False)]
    scores = ifeval.score_responses([c[0] for c in cases], [c[1] for c in cases])
    assert [p.strict for p in scores.prompts] == [c[2] for c in cases]


def test_material_errors_are_reported_with_the_file(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("languages: {}\ntasks:\n  - {text: 'Say hi.', words: [hi]}\nquestions: []\nconstraints: []\n")
    with pytest.raises(ValueError, match=r"m.yaml: tasks\[0\] needs text and at least two words"):
        load_material(bad)
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("languages: {}\ntasks:\n  - {text: 'Say hi.', words: [hi, hello]}\nquestions: []\n"
                    "constraints:\n  - {id: 'punctuation:no_comma', say: ['No commas.']}\n")
    assert len(verifiable_prompts(1, material_path=tiny)) == 1
    with pytest.raises(ValueError, match="yields only about 1 distinct"):
        verifiable_prompts(3, material_path=tiny)
