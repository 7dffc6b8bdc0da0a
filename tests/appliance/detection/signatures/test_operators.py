"""The regex operator's leading-run prefilter (operators.leading_run): a necessary condition only, never an
answer RE2 alone would not give."""

from __future__ import annotations

import random

import re2

from appliance.detection.signatures.operators import OPERATORS, OperatorValueError, _regex_options, leading_run


def test_the_leading_run_reads_anchored_classes_and_refuses_what_it_cannot_be_sure_of():
    assert leading_run(r"^\d{1,3}(\.\d{1,3}){3}$") == ("0123456789", 1)
    assert leading_run(r"^[a-z]{12,}\.(com|net|org)$") == ("abcdefghijklmnopqrstuvwxyz", 12)
    assert leading_run(r"^[A-F0-9]+x") == ("0123456789abcdef", 1)
    for unsure in [r"^\d?", r"^[a-z]*x", r"^[a-z]{0,3}", r"^[^a]", r"^[a-]x", r"^\dx|y", "^(?m)x", r"^\d{,3}", r"\d^",
                   r"^[z-a]", r"^[a-Z]", r"^[a\]]", r"^\w", "^é", r"^(ab)", r"^\d(a|b"]:
        assert leading_run(unsure) is None, unsure


def test_the_regex_leading_run_prefilter_never_changes_an_answer():
    """Patterns opening with `^` and a class or `\\d` under every quantifier, followed by atoms chosen to break
    the reading (alternation at and below the top level, flags, braces RE2 reads as literals), against texts
    rich in near misses (case, digits, the non-ASCII letters that fold onto ASCII ones, short texts): the
    operator answers exactly as RE2 alone."""
    rng = random.Random(23)
    heads = ["^\\d", "^[a-c]", "^[A-C0-9]", "^[0-9]", "^[ks]", "^[a-z]", "^[b-d]", "^\\w", "^[^a]", "^[a-]"]
    quantifiers = ["", "", "+", "?", "*", "{2}", "{0,2}", "{2,}", "{1,3}", "+?", "{2}?", "{,2}", "{2", "{0}"]
    tails = ["", "", "a", "\\.", "$", "|b", "(a|b)", "(?i)a", "(?m)^a", "[0-9]{2}", "k", "\\d", ".", "x{1,2}", "(", ")"]
    alphabet = ["a", "b", "c", "d", "k", "s", "x", "A", "B", "C", "K", "S", "0", "1", "9", ".", "-", "\u212a", "\u017f", "é"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 7))) for _ in range(300)]
    prefiltered = 0
    for _ in range(2500):
        pattern = rng.choice(heads) + rng.choice(quantifiers) + "".join(rng.choice(tails) for _ in range(rng.randrange(0, 3)))
        try:
            test = OPERATORS["regex"].build(pattern, "str")
        except OperatorValueError:
            continue  # RE2 refuses it: no rule can hold it
        prefiltered += leading_run(pattern) is not None
        reference = re2.compile(pattern, _regex_options())
        for text in texts:
            assert test(text) == (reference.search(text) is not None), (pattern, text, leading_run(pattern))
    assert prefiltered > 500  # the prefilter was there to get wrong
