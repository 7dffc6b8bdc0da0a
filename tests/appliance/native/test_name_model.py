"""NameModel (appliance/native/name_model.h): NameScorer.features in C, held to `features_reference`."""

from __future__ import annotations

import random
import tracemalloc
from dataclasses import dataclass

import pytest

from appliance.detection.dpi.dga import NameFeatures, NameScorer
from appliance.native import dpi, slot_maker

# Labels where a slip would show: empty, one symbol, the model's own markers inside a label (their trigrams
# are in the model: "^ab" is a real key), characters outside the model (unicode of every width, upper case,
# '_', NUL), letters that are not ASCII (str.isalpha), digits that are not ASCII (str.isdigit), long ones.
EDGE_LABELS = ["", "a", "y", "^", "$", "^^$", "^ab", "ab$", "a^b$c", "xkcd", "google", "tunnel-example", "e65579",
               "xn--80ak6aa92e", "bücher", "ǅ漢字٣३", "\U0001d400bc", "\U0001f600" * 9, "ｆｕｌｌ", "İı", "A_B",
               "ab\x00cd", "aeiouy" * 9, "bcdfghjklmnpqrstvwxz", "qzxv1234", "-0-", "a" * 300, "x7" * 150,
               "1234567890", "bbbbbbbbbb", "mississippi"]


@dataclass(slots=True)
class _Pair:
    label: str
    score: float


def _random_labels(rng: random.Random, count: int) -> list[str]:
    plain = "abcdefghijklmnopqrstuvwxyz0123456789-"
    odd = plain + "^$._AZé中\U0001f600 \x00٣"
    out = []
    for _ in range(count):
        n = rng.choice([0, 1, 2, 4, 5, 7, 8, 9, 10, 12, 16, 25, 40, 63, 300])
        alphabet = odd if rng.random() < 0.3 else plain
        out.append("".join(rng.choice(alphabet) for _ in range(n)))
    return out


def _equal(a: NameFeatures, b: NameFeatures) -> bool:
    fields = ("label", "loglik", "entropy", "digit_ratio", "consonant_ratio", "max_consonant_run", "score")
    # Same values and types, float for float (== alone would let 0 == 0.0 or 1 == True through).
    return all(getattr(a, f) == getattr(b, f) and type(getattr(a, f)) is type(getattr(b, f)) for f in fields)


def test_the_scorer_and_the_dns_scanner_call_the_c_model() -> None:
    scorer = NameScorer.load()
    assert scorer.features.__self__ is scorer._native and scorer.score.__self__ is scorer._native
    assert isinstance(scorer._native, dpi.NameModel)


def test_equal_to_the_python_reference_on_edge_and_random_labels() -> None:
    from tests.appliance.detection import dga_corpus
    from tests.appliance.detection.dns_flows import random_name

    fast, reference = NameScorer.load(), NameScorer.load()
    rng = random.Random(11)
    labels = EDGE_LABELS + _random_labels(rng, 6000) + dga_corpus.english_words()[:2000]
    for family in (dga_corpus.suppobox, dga_corpus.matsnu, dga_corpus.gozi, dga_corpus.banjori, dga_corpus.pykspa,
                   dga_corpus.cryptolocker, dga_corpus.necurs, dga_corpus.simda):  # DGA labels of every kind
        labels += [name.split(".")[0] for name in family(rng, 200)]
    labels += [random_name(rng, ["t.example.net"]).split(".")[0] for _ in range(3000)]
    for label in labels:
        got, want = fast.features(label), reference.features_reference(label)
        assert isinstance(got, NameFeatures) and _equal(got, want), (label, got, want)
        assert fast.score(label) == want.score
    assert fast.memo is fast._cache and set(fast.memo) == set(reference.memo)


def test_the_memo_is_read_filled_and_cleared_over_its_limit() -> None:
    scorer = NameScorer.load()
    memo: dict[str, NameFeatures] = {}
    model = dpi.NameModel(scorer._logp, scorer._context_floor, scorer._unseen,
                          slot_maker(dpi.SlotMaker, NameFeatures), memo, 2)
    first = model.features("alpha")
    assert model.features("alpha") is first and memo == {"alpha": first}
    model.features("beta")
    model.features("gamma")
    assert list(memo) == ["alpha", "beta", "gamma"]  # 2 held: not over the limit yet
    model.features("delta")  # 3 held, over the limit: cleared before "delta" goes in, as features_reference does
    assert list(memo) == ["delta"]
    planted = NameFeatures("zz", 0.0, 0.0, 0.0, 0.0, 0, 0.25)
    memo["zz"] = planted  # what the memo holds is the answer (the scanner reads the same dict)
    assert model.features("zz") is planted and model.score("zz") == 0.25


def test_hostile_input_and_a_bad_model_are_refused() -> None:
    scorer = NameScorer.load()
    maker = slot_maker(dpi.SlotMaker, NameFeatures)
    for wrong in (None, b"abc", 3, ["a"]):
        with pytest.raises(TypeError):
            scorer.features(wrong)  # type: ignore[arg-type]
    floor, unseen = scorer._context_floor, scorer._unseen
    bad_models = [({"ab": 0.1}, floor), ({"abc": 1}, floor), ({"abc": float("nan")}, floor), ({"abé": 0.1}, floor),
                  ({"abc": 0.1}, {"abc": 0.1}), ({(1, 2, 3): 0.1}, floor),
                  ({"".join(map(chr, range(33, 100))): 0.1}, {})]
    for logp, fl in bad_models:
        with pytest.raises(ValueError):
            dpi.NameModel(logp, fl, unseen, maker, {}, 10)
    with pytest.raises(ValueError):  # a maker of another class
        dpi.NameModel(scorer._logp, floor, unseen, slot_maker(dpi.SlotMaker, _Pair), {}, 10)
    with pytest.raises(TypeError):
        dpi.NameModel(scorer._logp, floor, unseen, None, {}, 10)


def test_an_empty_model_scores_every_trigram_unseen() -> None:
    maker = slot_maker(dpi.SlotMaker, NameFeatures)
    model = dpi.NameModel({}, {}, -3.0, maker, {}, 10)
    assert model.features("abcdef").loglik == -3.0
    assert model.features("").loglik == -3.0


def test_no_leak() -> None:
    scorer = NameScorer.load()
    labels = _random_labels(random.Random(2), 2000)
    for label in labels:  # warm up (float free list, the memo's table)
        scorer.features(label)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5):
            scorer.memo.clear()
            for label in labels:
                scorer.features(label)
                scorer.score(label)
        scorer.memo.clear()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16384, grown
