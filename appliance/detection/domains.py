"""Registered domains from the public suffix list (shipped inside the `publicsuffixlist` package)."""

from __future__ import annotations

from collections.abc import Callable

from publicsuffixlist import PublicSuffixList

from appliance.native.dpi import SuffixSplitter


class RegisteredDomains:
    """`registered("a.b.example.co.uk") == "example.co.uk"`; cached, thread-safe for reads.

    `split` is C (appliance/native/suffix_split.h): the library's rules, walked from the right, so that a
    tunnel's ever-new names cost a few set lookups each; `split_reference` is the library's own answer,
    which tests/appliance/detection/test_domains.py holds it to.
    """

    split: Callable[[str], tuple[str, str]]  # (registered domain, its label left of the public suffix), or (name, first label)

    def __init__(self, cache_size: int = 200_000) -> None:
        self._psl = PublicSuffixList(accept_unknown=True)
        self._cache: dict[str, tuple[str, str]] = {}
        # The rules as the library parsed them ("!x", "*.x", "x", punycode forms too) and how deep they go.
        rules: frozenset[str] = self._psl._publicsuffix
        exceptions = frozenset(r[1:] for r in rules if r.startswith("!"))
        wildcards = frozenset(r[2:] for r in rules if r.startswith("*."))
        tails = set()  # every label-suffix of a rule, as stored and by kind: a deeper rule can match only below these
        for name in (*rules, *exceptions, *wildcards):
            labels = name.split(".")
            tails.update(".".join(labels[i:]) for i in range(len(labels)))
        self._splitter = SuffixSplitter(rules, exceptions, wildcards, frozenset(tails), self._psl._maxlabel + 1,
                                        self._cache, cache_size)
        self.split = self._splitter.split

    def split_reference(self, name: str) -> tuple[str, str]:
        """What `split` answers, from the library's `privatesuffix` (not remembered)."""
        registered = self._psl.privatesuffix(name) if name else None
        if registered is None:
            return (name, name.split(".", 1)[0])
        suffix_len = len(registered) - registered.find(".") if "." in registered else 0
        return (registered, registered[: len(registered) - suffix_len] if suffix_len else registered)

    @property
    def memo(self) -> dict[str, tuple[str, str]]:
        """The cache `split` fills: name -> (registered, label); read it (the C DNS scanner does), never write it."""
        return self._cache

    def registered(self, name: str) -> str:
        return self.split(name)[0]
