"""Domain-name randomness: a character trigram model of benign names plus lexical features.

The model ships as `appliance/detection/data/ngram_model.json`, built once by
`python -m appliance.detection.dpi.dga build` from the SCOWL English word list (Debian package
`wamerican`), the labels of the public suffix list shipped inside the `publicsuffixlist` package,
and `data/benign_domains.txt`. Nothing is downloaded; nothing is built at run time.

`NameScorer.score(label)` returns a 0..1 randomness score for one registered-domain label (the part
left of the public suffix), from: mean trigram log-likelihood per character against the model,
Shannon entropy, digit ratio and consonant ratio/runs. Dictionary-word and brand names score low;
pseudo-random strings (most published DGAs) score high.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from appliance.native import dpi as native_dpi
from appliance.native import slot_maker

MODEL_PATH = Path(__file__).resolve().parent.parent / "data" / "ngram_model.json"
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"
_VOWELS = frozenset("aeiouy")
_log2 = math.log2
_BEGIN = "^"
_MEMO_LIMIT = 100_000  # labels the scorer remembers before it starts again
_END = "$"


def shannon_entropy_reference(text: str) -> float:
    """Bits per character of `text` (0.0 for empty): what `shannon_entropy` computes, in Python.

    H = log2(n) - sum(c * log2(c)) / n over the character counts c: the same value as
    -sum(p * log2(p)), with one logarithm per distinct character. The C version (appliance/native/dpi.c)
    is the one called: for a 200-character tunnel label this loop costs ~4.5 us, a tenth of the whole
    analysis of the bench corpus; tests hold the two equal.
    """
    n = len(text)
    if not n:
        return 0.0
    weighted = 0.0
    for count in map(text.count, set(text)):
        weighted += count * _log2(count)
    return _log2(n) - weighted / n


shannon_entropy = native_dpi.shannon_entropy


def label_features_reference(label: str, logp: dict[str, float], floor: dict[str, float],
                             unseen: float) -> tuple[float, int, int, int, int]:
    """(mean trigram log-likelihood, letters, digits, consonants, longest consonant run) of a label, in Python.

    What `label_features` (appliance/native/dpi.c) computes for `NameScorer.features`: every label of a DGA
    or a tunnel is new, so this per-character work ran for each (~5 us); tests hold the two equal.
    """
    text = _BEGIN + _BEGIN + label + _END
    total = 0.0
    for i in range(len(text) - 2):
        gram = text[i : i + 3]
        value = logp.get(gram)
        if value is None:
            value = floor.get(gram[:2], unseen)
        total += value
    letters = [c for c in label if c.isalpha()]
    digits = sum(c.isdigit() for c in label)
    consonants = [c for c in letters if c not in _VOWELS]
    run = best = 0
    for c in label:
        if c.isalpha() and c not in _VOWELS:
            run += 1
            best = max(best, run)
        else:
            run = 0
    return total / (len(text) - 2), len(letters), digits, len(consonants), best


label_features = native_dpi.label_features


@dataclass(frozen=True, slots=True)
class NameFeatures:
    """What the scorer saw in one label (shown as detection evidence)."""

    label: str
    loglik: float  # mean natural-log probability per trigram under the benign model
    entropy: float
    digit_ratio: float
    consonant_ratio: float
    max_consonant_run: int
    score: float


class NameScorer:
    """Scores labels against the benign trigram model (thread-safe: read-only after load)."""

    def __init__(self, trigrams: dict[str, int], bigrams: dict[str, int], smoothing: float = 0.1) -> None:
        vocab = len(_ALPHABET) + 1  # + end marker
        self._logp: dict[str, float] = {}
        for gram, count in trigrams.items():
            self._logp[gram] = math.log((count + smoothing) / (bigrams.get(gram[:2], 0) + smoothing * vocab))
        self._context_floor = {ctx: math.log(smoothing / (count + smoothing * vocab)) for ctx, count in bigrams.items()}
        self._unseen = math.log(1.0 / vocab)
        self._cache: dict[str, NameFeatures] = {}
        # features/score in C (native/name_model.h): the same memo, the same values as features_reference.
        self._native = native_dpi.NameModel(self._logp, self._context_floor, self._unseen,
                                            slot_maker(native_dpi.SlotMaker, NameFeatures), self._cache, _MEMO_LIMIT)
        self.features: Callable[[str], NameFeatures] = self._native.features
        self.score: Callable[[str], float] = self._native.score

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> NameScorer:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(data["trigrams"], data["bigrams"])

    def loglik(self, label: str) -> float:
        return label_features(label, self._logp, self._context_floor, self._unseen)[0]  # type: ignore[no-any-return]

    def features_reference(self, label: str) -> NameFeatures:
        """What `features` (NameModel.features, appliance/native/name_model.h) gives, in Python: the memo's, or
        computed and remembered. The tests hold the two equal."""
        cached = self._cache.get(label)
        if cached is not None:
            return cached
        ll, letters, digits, consonants, best = label_features(label, self._logp, self._context_floor, self._unseen)
        n = max(len(label), 1)
        entropy = shannon_entropy(label)
        digit_ratio = digits / n
        consonant_ratio = consonants / max(letters, 1)
        # Each feature mapped to 0..1 "how random", then weighted; the weights favour the model.
        f_ll = ramp(-ll, 2.0, 3.3)
        f_entropy = ramp(entropy, 2.8, 3.8) if n >= 8 else 0.0
        f_digits = ramp(digit_ratio, 0.1, 0.4)
        f_consonants = max(ramp(consonant_ratio, 0.65, 0.85), ramp(best, 4, 7))
        length_weight = ramp(n, 5, 10)  # short labels carry little information either way
        score = length_weight * (0.55 * f_ll + 0.15 * f_entropy + 0.15 * f_digits + 0.15 * f_consonants)
        result = NameFeatures(label, round(ll, 3), round(entropy, 3), round(digit_ratio, 3),
                              round(consonant_ratio, 3), best, round(min(score, 1.0), 3))
        if len(self._cache) > _MEMO_LIMIT:
            self._cache.clear()
        self._cache[label] = result
        return result

    @property
    def memo(self) -> dict[str, NameFeatures]:
        """The cache `features` fills: label -> features; read it (the C DNS scanner does), never write it."""
        return self._cache


def ramp(value: float, low: float, high: float) -> float:
    """0 at or below `low`, 1 at or above `high`, linear between."""
    if value <= low:
        return 0.0
    if value >= high:
        return 1.0
    return (value - low) / (high - low)


# -- model building (offline, `python -m appliance.detection.dpi.dga build`) ---------------------
def _corpus(words_path: Path) -> list[str]:
    items: list[str] = []
    for line in words_path.read_text(encoding="utf-8", errors="ignore").splitlines():
        word = line.strip().lower()
        if 3 <= len(word) <= 15 and all(c in _ALPHABET for c in word):
            items.append(word)
    data = Path(__file__).resolve().parent.parent / "data"
    for line in (data / "benign_domains.txt").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            items.extend(w for w in line.split() if all(c in _ALPHABET for c in w))
    import publicsuffixlist

    psl = Path(publicsuffixlist.__file__).parent / "public_suffix_list.dat"
    for line in psl.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("//"):
            for label in line.lstrip("*!.").split("."):
                if len(label) >= 3 and all(c in _ALPHABET for c in label):
                    items.append(label)
    return items


def build_model(words_path: Path, out: Path = MODEL_PATH) -> None:
    trigrams: Counter[str] = Counter()
    bigrams: Counter[str] = Counter()
    for word in _corpus(words_path):
        text = _BEGIN + _BEGIN + word + _END
        for i in range(len(text) - 2):
            trigrams[text[i : i + 3]] += 1
            bigrams[text[i : i + 2]] += 1
    out.write_text(json.dumps({"source": "SCOWL (wamerican) + public suffix list labels + benign_domains.txt",
                               "trigrams": dict(sorted(trigrams.items())), "bigrams": dict(sorted(bigrams.items()))},
                              separators=(",", ":")), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "build":
        build_model(Path(sys.argv[2] if len(sys.argv) > 2 else "/usr/share/dict/american-english"))
        print(f"wrote {MODEL_PATH}")
    else:
        scorer = NameScorer.load()
        for name in sys.argv[1:]:
            print(scorer.features(name))
