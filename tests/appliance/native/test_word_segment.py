"""WordTable (appliance/native/word_segment.h): WordModel.segment in C, held to the Python loop it replaces.

tests/appliance/detection/test_dga_words.py holds `segment` (now this table for ASCII text) to the reference
Viterbi on thousands of labels; here the table's own edges: small models with ties and merged unknown runs,
what goes to the Python loop, and what the constructor refuses.
"""

from __future__ import annotations

import random
import string

import pytest

from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_words import WordModel
from appliance.native.dpi import WordTable


@pytest.fixture(scope="module")
def scorer() -> NameScorer:
    return NameScorer.load()


@pytest.fixture(scope="module")
def shipped(scorer: NameScorer) -> WordModel:
    return WordModel.load(scorer)


def _model(scorer: NameScorer, unigrams: dict[str, float]) -> WordModel:
    return WordModel(unigrams, set(), scorer)


def test_table_equals_the_python_loop_on_random_letters_and_words(shipped: WordModel) -> None:
    rng = random.Random(3)
    words = sorted(shipped._logp)
    texts = ["", "a", "zzzz", "q" * 256]
    for _ in range(3000):
        texts.append("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 63))))
        texts.append("".join(rng.choice(words) for _ in range(rng.randint(1, 6)))[:63])
    for text in texts:
        assert shipped._table.segment(text) == shipped.segment_python(text) == shipped.segment_reference(text), text


def test_ties_keep_the_earliest_start_and_merged_runs_stop_at_a_known_word(scorer: NameScorer) -> None:
    # "ab"+"c" and "a"+"bc" cost the same: the Python loop keeps the first start that reached the end.
    model = _model(scorer, {"ab": -2.0, "bc": -2.0, "a": -12.0, "c": -12.0, "xq": -50.0})
    for text in ("abc", "abcabc", "xqz", "xqxqz", "zxq", "qqqq", "abxqc", "cba"):
        assert model._table.segment(text) == model.segment_python(text) == model.segment_reference(text), text
    # x and q are unknown single letters: joined into "xq", which is a word, so z is not joined to it.
    assert model.segment("xqz")[0] == ["xq", "z"]


def test_text_the_table_does_not_take_goes_to_the_python_loop(shipped: WordModel) -> None:
    for text in ("bücher", "ǅabc漢字", "a" * 257):
        assert shipped._table.segment(text) is None
        assert shipped.segment(text) == shipped.segment_reference(text)


def test_hostile_arguments_are_refused() -> None:
    table = WordTable({"ab": -1.0}, frozenset({"a"}), 18, -12.0)
    assert table.size == 2
    with pytest.raises(TypeError):
        table.segment(b"ab")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        WordTable({"ab": "x"}, frozenset(), 18, -12.0)  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        WordTable({1: -1.0}, frozenset(), 18, -12.0)  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        WordTable({}, ["a"], 18, -12.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        WordTable({}, frozenset({3}), 18, -12.0)
    with pytest.raises(ValueError):
        WordTable({"": -1.0}, frozenset(), 18, -12.0)
    for bad in (0, 256):
        with pytest.raises(ValueError):
            WordTable({}, frozenset(), bad, -12.0)


def test_non_ascii_keys_are_left_out_and_change_no_ascii_split(scorer: NameScorer) -> None:
    model = _model(scorer, {"ab": -2.0, "bü": -1.0})
    assert model._table.size == 3  # "ab", and the prefixes "a" and "b" ("bü" is not ASCII: left out)
    assert model._table.segment("abab") == model.segment_python("abab")
