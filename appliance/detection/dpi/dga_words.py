"""Word segmentation of domain labels: what dictionary and pronounceable DGAs look like.

Dictionary DGAs (suppobox, matsnu, gozi, nymaim2) concatenate real words, so their letter
statistics look benign to the trigram model in `dga.py`; pronounceable DGAs (simda, pykspa,
symmi) alternate consonants and vowels. `WordModel.shape(label)` splits a label into the most
probable word sequence (Viterbi over unigram log-probabilities) and says which DGA kind, if any,
the label looks like:

- ``dictionary``: every letter is covered by words of three letters or more, there are at least
  two of them, and most adjacent word pairs never occur together in English text (a brand such as
  "stackoverflow" is a common pair; "heavenfurther" is not);
- ``pronounceable``: six letters or more, at least 75% of adjacent letters switch between consonant
  and vowel, and the label is not made of known words;
- ``random``: neither of the above, and the trigram scorer of `dga.py` puts it at or above its
  threshold.

The model ships as `appliance/detection/data/word_model.json.gz`, built offline by
`python -m appliance.detection.dpi.dga_words build` from the unigram and bigram counts shipped in
the `wordsegment` package (Apache-2.0; derived counts only) and the SCOWL list of the Debian
package `wamerican`. Nothing is downloaded; nothing is built at run time.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from appliance.detection.dpi.dga import NameScorer
from appliance.native.dpi import WordTable

WORD_MODEL_PATH = Path(__file__).resolve().parent.parent / "data" / "word_model.json.gz"
_VOWELS = frozenset("aeiouy")
_MAX_WORD = 18
_UNKNOWN_PER_CHAR = -12.0  # log-probability of one letter outside every word: worse than any rare word
_MAX_LABEL = 63


@dataclass(frozen=True, slots=True)
class LabelShape:
    """How one label segments and which DGA kind it resembles (shown as detection evidence)."""

    label: str
    kind: str  # "dictionary", "pronounceable", "random" or "" (looks like an ordinary name)
    words: tuple[str, ...]
    coverage: float  # share of letters inside known words of 3+ letters
    unusual_pairs: float  # share of adjacent word pairs absent from the bigram table
    alternation: float  # share of adjacent letters switching consonant/vowel
    randomness: float  # the trigram scorer's 0..1 score

    def evidence(self) -> dict[str, object]:
        return {"label": self.label, "kind": self.kind, "words": list(self.words),
                "word_lengths": [len(w) for w in self.words], "coverage": self.coverage,
                "unusual_pairs": self.unusual_pairs, "alternation": self.alternation, "randomness": self.randomness}


class WordModel:
    """Unigram log-probabilities and a set of common word pairs (read-only after load: thread-safe)."""

    def __init__(self, unigrams: dict[str, float], pairs: set[str], scorer: NameScorer,
                 random_threshold: float = 0.5) -> None:
        self._logp = unigrams
        self._pairs = pairs
        self._scorer = scorer
        self._random_threshold = random_threshold
        self._cache: dict[str, LabelShape] = {}
        # Every proper prefix of a known word (the model's own words, not attacker-chosen): `segment` stops
        # extending a piece that starts no word instead of trying every length up to _MAX_WORD.
        self._prefixes = frozenset(w[:i] for w in unigrams for i in range(1, min(len(w), _MAX_WORD)))
        # The same words and prefixes as one C table: `segment` on ASCII letters (every DNS label's) without a
        # substring per piece tried (appliance/native/word_segment.h).
        self._table = WordTable(unigrams, self._prefixes, _MAX_WORD, _UNKNOWN_PER_CHAR)

    @classmethod
    def load(cls, scorer: NameScorer, path: Path = WORD_MODEL_PATH) -> WordModel:
        data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        return cls(data["unigrams"], set(data["pairs"]), scorer)

    def segment(self, text: str) -> tuple[list[str], float]:
        """The most probable split of `text` (letters only) and the share of letters in known words.

        In C for ASCII text (`WordTable.segment`, the loops of `segment_python`); other text takes the Python loop.
        """
        found = self._table.segment(text)
        return found if found is not None else self.segment_python(text)

    def segment_python(self, text: str) -> tuple[list[str], float]:
        """`segment` in Python, for any text: `segment_reference`'s Viterbi with the loops turned round: each
        start extends its piece only while the piece is a known word or the prefix of one (an unknown piece
        longer than a letter is never taken). For each end the starts still come in ascending order and a later
        one wins only when strictly better, so the split is the same, ties included; the tests hold the two equal.
        """
        n = len(text)
        best = [0.0] + [-math.inf] * n
        back = [0] * (n + 1)
        known = [False] * (n + 1)
        logp, prefixes = self._logp, self._prefixes
        for start in range(n):
            base = best[start]
            for end in range(start + 1, min(n, start + _MAX_WORD) + 1):
                piece = text[start:end]
                value = logp.get(piece)
                is_known = value is not None
                if value is None:
                    if end - start > 1:
                        if piece not in prefixes:
                            break
                        continue
                    value = _UNKNOWN_PER_CHAR
                total = base + value
                if total > best[end]:
                    best[end], back[end], known[end] = total, start, is_known
                if end - start == 1 and piece not in prefixes:
                    break
        return self._words(text, back, known)

    def segment_reference(self, text: str) -> tuple[list[str], float]:
        """What `segment` gives: the Viterbi as it was, every piece up to _MAX_WORD letters tried."""
        n = len(text)
        best = [0.0] + [-math.inf] * n
        back = [0] * (n + 1)
        known = [False] * (n + 1)
        logp = self._logp
        for end in range(1, n + 1):
            for start in range(max(0, end - _MAX_WORD), end):
                piece = text[start:end]
                value = logp.get(piece)
                is_known = value is not None
                if value is None:
                    if end - start > 1:
                        continue  # unknown text is consumed one letter at a time
                    value = _UNKNOWN_PER_CHAR
                total = best[start] + value
                if total > best[end]:
                    best[end], back[end], known[end] = total, start, is_known
        return self._words(text, back, known)

    def _words(self, text: str, back: list[int], known: list[bool]) -> tuple[list[str], float]:
        """The split the back pointers give, and the share of letters in known words of 3+ letters."""
        n = len(text)
        words: list[str] = []
        covered = 0
        end = n
        while end > 0:
            start = back[end]
            words.append(text[start:end])
            if known[end] and end - start >= 3:
                covered += end - start
            end = start
        words.reverse()
        return _merge_unknown(words, self._logp), covered / n if n else 0.0

    def shape(self, label: str) -> LabelShape:
        cached = self._cache.get(label)
        if cached is not None:
            return cached
        label = label[:_MAX_LABEL]
        words: list[str] = []
        coverage = 0.0
        for part in label.split("-"):  # matsnu-style hyphens separate words
            letters = "".join(c for c in part if c.isalpha())
            if letters:
                part_words, part_coverage = self.segment(letters)
                words.extend(part_words)
                coverage += part_coverage * len(letters)
        n_letters = sum(c.isalpha() for c in label)
        coverage = round(coverage / n_letters, 3) if n_letters else 0.0
        pairs = [f"{a} {b}" for a, b in zip(words, words[1:])]
        unusual = round(sum(p not in self._pairs for p in pairs) / len(pairs), 3) if pairs else 0.0
        letters_only = [c for c in label if c.isalpha()]
        switches = sum((a in _VOWELS) != (b in _VOWELS) for a, b in zip(letters_only, letters_only[1:]))
        alternation = round(switches / (len(letters_only) - 1), 3) if len(letters_only) > 1 else 0.0
        randomness = self._scorer.score(label)
        kind = ""  # the most specific shape first: words, then alternation, then plain randomness
        if coverage >= 0.999 and len(words) >= 2 and min(map(len, words)) >= 3 and unusual >= 0.5:
            kind = "dictionary"
        elif len(letters_only) >= 6 and alternation >= 0.75 and coverage < 0.75:
            kind = "pronounceable"
        elif randomness >= self._random_threshold:
            kind = "random"
        result = LabelShape(label, kind, tuple(words), coverage, unusual, alternation, randomness)
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[label] = result
        return result


def _merge_unknown(words: list[str], known: dict[str, float]) -> list[str]:
    """Runs of unknown single letters joined back into one piece (`x q z` -> `xqz`)."""
    out: list[str] = []
    for word in words:
        if out and word not in known and len(word) == 1 and out[-1] not in known:
            out[-1] += word
        else:
            out.append(word)
    return out


# -- model building (offline, `python -m appliance.detection.dpi.dga_words build`) ---------------
def build_model(words_path: Path, out: Path = WORD_MODEL_PATH, vocabulary: int = 60_000, pairs: int = 120_000) -> None:
    import wordsegment

    root = Path(wordsegment.__file__).parent
    counts: dict[str, int] = {}
    for line in (root / "unigrams.txt").read_text(encoding="utf-8").splitlines():
        word, _, count = line.partition("\t")
        if word.isalpha() and word.isascii() and (len(word) >= 3 or word in _SHORT_WORDS):
            counts[word] = int(count)
        if len(counts) >= vocabulary:
            break
    floor = min(counts.values())
    for line in words_path.read_text(encoding="utf-8", errors="ignore").splitlines():
        word = line.strip()
        if word.isalpha() and word.isascii() and word.islower() and 3 <= len(word) <= _MAX_WORD:
            counts.setdefault(word, floor)
    total = sum(counts.values())
    unigrams = {w: round(math.log(c / total), 2) for w, c in sorted(counts.items())}
    bigrams: list[tuple[int, str]] = []
    for line in (root / "bigrams.txt").read_text(encoding="utf-8").splitlines():
        pair, _, count = line.partition("\t")
        a, _, b = pair.partition(" ")
        if a in unigrams and b in unigrams:
            bigrams.append((int(count), pair))
    bigrams.sort(reverse=True)
    payload = {"source": "wordsegment 1.3.1 unigrams/bigrams (Apache-2.0) + SCOWL (wamerican)",
               "unigrams": unigrams, "pairs": sorted(p for _, p in bigrams[:pairs])}
    out.write_bytes(gzip.compress(json.dumps(payload, separators=(",", ":")).encode("utf-8"), 9, mtime=0))


_SHORT_WORDS = frozenset("a i an at be by do go he if in is it me my no of on or so to up us we".split())

if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "build":
        build_model(Path(sys.argv[2] if len(sys.argv) > 2 else "/usr/share/dict/american-english"))
        print(f"wrote {WORD_MODEL_PATH}")
    else:
        model = WordModel.load(NameScorer.load())
        for name in sys.argv[1:]:
            print(model.shape(name))
