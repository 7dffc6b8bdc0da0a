"""WordModel.segment (the prefix-pruned Viterbi) held to segment_reference, the Viterbi as it was."""

from __future__ import annotations

import random
import string

import pytest

from appliance.detection.dpi.dga import NameScorer
from appliance.detection.dpi.dga_words import WordModel
from tests.appliance.detection import dga_corpus as dc


@pytest.fixture(scope="module")
def words() -> WordModel:
    return WordModel.load(NameScorer.load())


def _texts(rng: random.Random) -> list[str]:
    """Letters as shape() hands them to segment: DGA labels of every family, word salad, random letters, brands."""
    out = ["", "a", "i", "xq", "stackoverflow", "heavenfurther", "a" * 63, "ab" * 40, "thethethe", "qqqqqqqqqqqqqqqqqqqqqq",
           "internationalization" * 3, "pneumonoultramicroscopicsilicovolcanoconiosis", "bücher", "ǅabc漢字"]
    for family in dc.FAMILIES:
        for name in family.generate(rng, 60):
            out += ["".join(c for c in part if c.isalpha()) for part in name.split(".")[0].split("-")]
    english = dc.english_words()
    for _ in range(1500):
        out.append("".join(rng.choice(english) for _ in range(rng.randint(1, 5))))
        out.append("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 40))))
        # A word cut anywhere, then letters: prefixes that die inside the 18-letter reach.
        word = rng.choice(english)
        out.append(word[: rng.randint(1, len(word))] + "".join(rng.choice("aeiou") for _ in range(rng.randint(0, 6))))
    return out


def test_segment_equals_its_reference(words: WordModel) -> None:
    for text in _texts(random.Random(8)):
        assert words.segment(text) == words.segment_reference(text), text


def test_shapes_unchanged_on_dga_and_benign_labels(words: WordModel) -> None:
    """shape() through the pruned Viterbi against shape() through the reference (the same model, new memos)."""
    reference = WordModel.load(NameScorer.load())
    reference.segment = reference.segment_reference  # type: ignore[method-assign]
    rng = random.Random(9)
    labels = [name.split(".")[0] for family in dc.FAMILIES for name in family.generate(rng, 40)]
    labels += ["google", "stackoverflow", "my-bank-login", "x1-y2-z3", "a" * 80, "xn--80ak6aa92e", ""]
    for label in labels:
        assert words.shape(label) == reference.shape(label), label
