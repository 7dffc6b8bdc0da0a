"""The C DPI helpers (appliance/native/dpi.c) against their Python references, with hostile input."""

from __future__ import annotations

import math
import random
import tracemalloc

import pytest

from appliance.detection.dpi.dga import shannon_entropy, shannon_entropy_reference
from appliance.native import dpi


def test_the_detectors_call_the_c_entropy() -> None:
    assert shannon_entropy is dpi.shannon_entropy


@pytest.mark.parametrize("text, expected", [
    ("", 0.0), ("a", 0.0), ("aaaa", 0.0), ("ab", 1.0), ("abcd", 2.0), ("aab", 0.9182958340544896),
    ("abcdefghijklmnop", 4.0),
])
def test_known_values(text: str, expected: float) -> None:
    assert dpi.shannon_entropy(text) == pytest.approx(expected, abs=1e-12)
    assert dpi.shannon_entropy(text.encode()) == pytest.approx(expected, abs=1e-12)


def _texts(rng: random.Random) -> list[str]:
    alphabets = ["abcdefghijklmnopqrstuvwxyz0123456789-", "".join(map(chr, range(256))),
                 "aé€中\u0101", "a\U0001F600\U0010FFFFb", "01"]
    out = []
    for _ in range(3000):
        alphabet = rng.choice(alphabets)
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 300))))
    return out


def test_equal_to_the_python_reference_on_seeded_strings() -> None:
    for text in _texts(random.Random(7)):
        assert math.isclose(dpi.shannon_entropy(text), shannon_entropy_reference(text), rel_tol=1e-12, abs_tol=1e-12), text


def test_bytes_are_their_latin_1_symbols() -> None:
    rng = random.Random(8)
    for _ in range(2000):
        data = rng.randbytes(rng.randrange(0, 400))
        want = shannon_entropy_reference(data.decode("latin-1"))
        for form in (data, bytearray(data), memoryview(data)):
            assert math.isclose(dpi.shannon_entropy(form), want, rel_tol=1e-12, abs_tol=1e-12)


def test_hostile_input() -> None:
    big = bytes(range(256)) * 40_000  # 10 MB of every byte value: exactly 8 bits
    assert dpi.shannon_entropy(big) == pytest.approx(8.0, abs=1e-9)
    assert dpi.shannon_entropy(big.decode("latin-1")) == pytest.approx(8.0, abs=1e-9)
    wide = "".join(map(chr, range(0x100, 0x100 + 1024))) * 64  # 1,024 symbols of a two-byte str: 10 bits
    assert dpi.shannon_entropy(wide) == pytest.approx(10.0, abs=1e-9)
    assert dpi.shannon_entropy("\udcff\ud800") == 1.0  # lone surrogates are code points like any other
    for wrong in (None, 3, 1.5, ["a"], memoryview(b"abcd")[::2]):
        with pytest.raises((TypeError, BufferError, ValueError)):
            dpi.shannon_entropy(wrong)


def test_no_leak_and_buffers_released() -> None:
    wide, data = "x3k9\u20ac" * 50, bytearray(b"x3k9" * 50)
    for _ in range(100):  # warm up caches (float free list)
        dpi.shannon_entropy(wide)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(20_000):
            dpi.shannon_entropy(wide)
            dpi.shannon_entropy(data)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4096, grown
    data.extend(b"more")  # a buffer still exported would refuse the resize (BufferError)


def test_label_features_equal_their_python_reference() -> None:
    from appliance.detection.dpi.dga import NameScorer, label_features, label_features_reference
    from tests.appliance.detection.dns_flows import random_name

    scorer = NameScorer.load()
    model = (scorer._logp, scorer._context_floor, scorer._unseen)
    rng = random.Random(3)
    labels = ["", "a", "y", "xkcd", "tunnel-example", "e65579", "google", "xn--80ak6aa92e", "bücher", "ǅ漢字٣३",
              "\U0001d400bc", "a" * 300, "-0-", "ｆｕｌｌ", "İı", "aeiouy" * 9, "bcdfghjklmnpqrstvwxz"]
    labels += [random_name(rng, ["t.example.net"]).split(".")[0] for _ in range(3000)]
    for label in labels:
        assert label_features(label, *model) == label_features_reference(label, *model), label
    with pytest.raises(TypeError):
        label_features(b"abc", *model)
