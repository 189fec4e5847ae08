"""The frontier benchmark's parts that need no dataset: bisection, candidates, PII sentences, verdicts."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from benchmarks.privacy.frontier import __main__ as frontier
from benchmarks.privacy.frontier.attacks import AttackPlan, AttackSizes, with_vocabulary
from benchmarks.privacy.frontier.candidates import CANDIDATES, Candidate
from benchmarks.privacy.frontier.pii_sentences import (
    ATTACKER_TEMPLATES,
    ENTITY_KINDS,
    VICTIM_TEMPLATES,
    PIISentence,
    attacker_pii_sentences,
    entity_recovery,
    entity_tokens,
    victim_pii_sentences,
)
from benchmarks.privacy.frontier.report import render_markdown, verdicts
from benchmarks.privacy.frontier.search import SearchConfig, bisect_strength
from textcrafter_rag.attacks import AttackConfig, Inverter, InverterConfig, pii_probe
from textcrafter_rag.encoders import bundled_minilm
from textcrafter_rag.numerics import row_norms, unit_rows
from textcrafter_rag.textcrafter import pii as policy_pii

# ---------------------------------------------------------------- bisection


@pytest.mark.parametrize("target", [0.95, 0.9, 0.8])
def test_bisection_hits_a_falling_target_within_tolerance(target: float) -> None:
    calls: list[float] = []

    def ratio(t: float) -> float:
        calls.append(t)
        return 1.0 / (1.0 + t)

    cfg = SearchConfig(tolerance=0.005, max_iter=12)
    t, history = bisect_strength(ratio, target=target, bracket=(1e-3, 10.0), falls=True, config=cfg)
    assert abs(ratio(t) - target) <= 0.005
    assert len(history) <= 2 + 12 and [h[0] for h in history] == calls[: len(history)]
    assert bisect_strength(ratio, target=target, bracket=(1e-3, 10.0), config=cfg)[0] == t  # deterministic


def test_bisection_of_a_rising_curve_and_a_target_outside_the_bracket() -> None:
    def rising(t: float) -> float:
        return t / (1.0 + t)

    t, _ = bisect_strength(rising, target=0.9, bracket=(0.1, 1000.0), falls=False)
    assert abs(rising(t) - 0.9) <= 0.005 and abs(t - 9.0) < 0.5
    # unreachable: the nearer end of the bracket, without inner evaluations
    t, history = bisect_strength(rising, target=0.999, bracket=(0.1, 10.0), falls=False)
    assert t == 10.0 and len(history) == 2
    with pytest.raises(ValueError, match="bracket"):
        bisect_strength(rising, target=0.5, bracket=(0.0, 1.0))


def test_bisection_stops_after_max_iter() -> None:
    def step(t: float) -> float:  # jumps over the target: no t is within tolerance
        return 1.0 if t < 0.5 else 0.5

    t, history = bisect_strength(step, target=0.9, bracket=(0.01, 1.0), config=SearchConfig(max_iter=5))
    assert len(history) == 7 and step(t) == 1.0


# ---------------------------------------------------------------- candidates


def test_candidates_are_registered_with_valid_brackets() -> None:
    assert {"gaussian", "textcrafter", "ldp"} <= set(CANDIDATES)
    assert CANDIDATES["ldp"].ndcg_falls is False and CANDIDATES["gaussian"].ndcg_falls
    with pytest.raises(ValueError, match="bracket"):
        Candidate(name="x", strength="s", bracket=(1.0, 0.5), build=lambda t, seed, ctx: None)  # type: ignore[arg-type,return-value]


def test_candidates_draw_the_same_noise_at_every_strength() -> None:
    """Common random numbers: the same seed gives the same noise direction whatever t."""
    x = unit_rows(np.random.default_rng(0).normal(size=(16, 384))).astype(np.float32)
    for name, (t1, t2) in {"gaussian": (0.01, 0.04), "textcrafter": (0.3, 1.2)}.items():
        c = CANDIDATES[name]
        d1 = c.mechanism(t1, seed=3, ctx=None).protect(x) - x  # type: ignore[arg-type]
        d2 = c.mechanism(t2, seed=3, ctx=None).protect(x) - x  # type: ignore[arg-type]
        np.testing.assert_allclose(d1 / t1, d2 / t2, atol=2e-4)
        if name == "textcrafter":  # released at norm t exactly
            np.testing.assert_allclose(row_norms(d2), 1.2, atol=1e-4)


# ---------------------------------------------------------------- PII sentences


def _literal_ngrams(templates: tuple[str, ...], n: int = 4) -> set[tuple[str, ...]]:
    out = set()
    for t in templates:
        for part in re.split(r"\{\w+\}", t.lower()):
            words = re.findall(r"[a-z]+", part)
            out |= {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    return out


def test_victim_attacker_and_policy_templates_are_disjoint() -> None:
    assert not set(VICTIM_TEMPLATES) & set(ATTACKER_TEMPLATES)
    victim = _literal_ngrams(VICTIM_TEMPLATES)
    assert victim and not victim & _literal_ngrams(ATTACKER_TEMPLATES)
    assert not victim & _literal_ngrams(policy_pii._TEMPLATES)
    assert not victim & _literal_ngrams(pii_probe._TEMPLATES)


def test_victim_and_attacker_entity_values_are_disjoint() -> None:
    victims = victim_pii_sentences(300)
    attacker = attacker_pii_sentences(1000, victims=victims)

    def values(sents: list[PIISentence]) -> set[tuple[str, ...]]:
        return {entity_tokens(k, v) for s in sents for k, v in s.entities}

    assert not values(victims) & values(attacker)
    assert not {s.text for s in victims} & {s.text for s in attacker}
    # the exclusion is what makes them disjoint: without it the two sets share values (dates at least)
    assert values(victims) & values(attacker_pii_sentences(1000, victims=()))
    assert {k for s in victims for k, _ in s.entities} == set(ENTITY_KINDS)
    assert {s.template for s in victims} == set(range(len(VICTIM_TEMPLATES)))


def test_pii_sentences_are_deterministic_distinct_and_filtered() -> None:
    a, b = victim_pii_sentences(50), victim_pii_sentences(50)
    assert a == b and len({s.text for s in a}) == 50
    assert victim_pii_sentences(50, seed=1) != a
    short = victim_pii_sentences(20, fits=lambda text: len(text) < 70)
    assert len(short) == 20 and all(len(s.text) < 70 for s in short)
    for s in a:
        assert all(v in s.text for _, v in s.entities)


def test_entity_recovery_matches_whole_tokens_case_insensitively() -> None:
    victim = PIISentence(
        text="x",
        entities=(
            ("name", "Ann Lee"),
            ("date", "14 March 2021"),
            ("email", "ann.lee@mail.example"),
            ("number", "48213"),
        ),
        template=0,
    )
    # "anna" is not "ann"; LEE matches lee; only 2021 of the date; e-mail local part ann, lee; 48213 exact
    out = entity_recovery([victim], ["Dear ANNA LEE, paid 48213 in 2021 to lee"])
    assert out["pii_n_entities"] == 4
    assert out["pii_recovery_name"] == 50.0 and out["pii_recovery_date"] == pytest.approx(100 / 3)
    assert out["pii_recovery_email"] == 50.0 and out["pii_recovery_number"] == 100.0
    assert out["pii_entity_recovery"] == 50.0  # 1 + 1 + 1 + 1 of 2 + 3 + 2 + 1 tokens
    assert out["pii_entity_exact"] == 25.0  # only the number is whole
    assert entity_recovery([victim], ["ann lee 14 march 2021 48213"])["pii_entity_exact"] == 100.0
    with pytest.raises(ValueError, match="reconstructions"):
        entity_recovery([victim], [])


# ---------------------------------------------------------------- verdicts


def _row(mech: str, corpus: str, cf: float, pii: float | None = None, attacker: str = "adaptive") -> dict:
    return {
        "mechanism": mech,
        "ndcg_target": 0.9,
        "ndcg10": 58.5,
        "ndcg_ratio": 0.9,
        "hit": True,
        "attacker": attacker,
        "pairs": 30000,
        "corpus": corpus,
        "content_f1": cf,
        "pii_entity_recovery": pii,
        "strength": 0.04,
        "strength_name": "s",
    }


def test_verdicts_apply_the_issue_rules() -> None:
    rows = [
        _row("gaussian", "wikitext", 15.0),
        _row("gaussian", "scifact", 4.0),
        _row("gaussian", "pii", 20.0, pii=30.0),
        _row("good", "wikitext", 4.5),
        _row("good", "scifact", 2.0),
        _row("good", "pii", 4.0, pii=10.0),
        _row("close", "wikitext", 11.0),  # 0.73x: not 30% lower
        _row("close", "scifact", 1.0),
        _row("close", "pii", 5.0, pii=5.0),
        _row("half", "wikitext", 9.0),
        _row("partial", "scifact", 1.0),  # low where measured, but the other corpora may leak
    ]
    v = {x["mechanism"]: x for x in verdicts(rows)}
    assert v["gaussian"]["switch"] == "reference" and v["gaussian"]["aim"] == "not met"
    assert v["good"]["switch"] == "meets" and v["good"]["aim"] == "met"
    assert v["good"]["rel_wikitext"] == pytest.approx(0.3)
    # content-F1 on the PII notes and PII-entity recovery are two ratios; the table shows each beside its own value
    assert v["good"]["rel_pii"] == pytest.approx(0.2) and v["good"]["rel_entity"] == pytest.approx(1 / 3)
    assert v["close"]["switch"] == "fails" and v["close"]["aim"] == "not met"
    assert v["half"]["switch"] == "not measured" and v["half"]["aim"] == "not met"
    assert v["partial"]["aim"] == "not measured" and v["partial"]["switch"] == "not measured"
    meta = {
        "encoder": "m",
        "dimension": 384,
        "targets": [0.9],
        "n_docs": 10,
        "n_queries": 5,
        "clean_ndcg10": 65.0,
        "tolerance": 0.005,
        "n_test": 3,
        "pairs": 30000,
        "best": None,
        "candidates": {"gaussian": {"strength": "s", "about": "noise"}},
        "corpora": ["wikitext", "scifact", "pii"],
        "corpora_about": "three",
        "points": [],
        "command": "python -m benchmarks.privacy.frontier",
    }
    md = render_markdown(rows, meta, None)
    assert md.startswith("# ") and "0.30× (-70%)" in md and "meets" in md
    good = next(line for line in md.splitlines() if line.startswith("| good |"))
    assert "| 4.00 [0.20× (-80%)] | 10.00 [0.33× (-67%)] |" in good


def test_with_vocabulary_adds_the_pieces_of_the_attackers_texts(tmp_path) -> None:
    encoder = bundled_minilm()
    cfg = InverterConfig(n_layers=1, n_prefix=2, max_vocab=60)
    inv = Inverter.create(["the cat sat on the mat", "a dog ran in the park"] * 5, config=cfg, encoder=encoder, seed=0)
    x = np.random.default_rng(0).normal(size=(2, 384)).astype(np.float32)
    before = inv.generate(x)
    ext = with_vocabulary(inv, ["Ticket 48213 from Zoe Quigley"], encoder=encoder)
    new = set(ext.tokenizer("Ticket 48213 from Zoe Quigley", add_special_tokens=False)["input_ids"])
    assert new <= {int(i) for i in ext.vocab_ids} and not new <= {int(i) for i in inv.vocab_ids}
    assert list(ext.vocab_ids[: len(inv.vocab_ids)]) == list(inv.vocab_ids)
    assert ext.model.tok.weight.shape[0] == len(ext.vocab_ids) == ext.model.out_bias.shape[0]
    assert inv.generate(x) == before and with_vocabulary(ext, ["Zoe"], encoder=encoder) is ext
    ext.save(tmp_path / "inv")
    assert list(Inverter.load(tmp_path / "inv").vocab_ids) == list(ext.vocab_ids)


def test_rows_of_a_given_inverter_are_keyed_by_its_weights_not_its_path(tmp_path) -> None:
    encoder = bundled_minilm()
    cfg = InverterConfig(n_layers=1, n_prefix=2, max_vocab=60)
    texts = ["the cat sat on the mat", "a dog ran in the park"] * 5
    Inverter.create(texts, config=cfg, encoder=encoder, seed=0).save(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "moved")
    Inverter.create(texts, config=cfg, encoder=encoder, seed=1).save(tmp_path / "other")

    def plan(inverter):
        sizes = AttackSizes(n_test=2, n_train=2, n_pii_train=2, pairs=2)
        return AttackPlan(encoder, tmp_path, [], sizes, AttackConfig(), tmp_path, inverter=inverter)

    ids = {name: plan(tmp_path / name).inverter_id for name in ("a", "moved", "other")}
    assert ids["a"] == ids["moved"] != ids["other"]
    assert plan(None).inverter_id == "None"  # the package's default inverter: the key rows were cached under


def test_an_unknown_best_candidate_is_refused_before_any_work() -> None:
    with pytest.raises(SystemExit, match="--best must be"):
        frontier.main(["--smoke", "--best", "textcrafter-awre", "--data-dir", "/nonexistent"])
