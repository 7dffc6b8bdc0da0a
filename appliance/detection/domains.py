"""Registered domains from the public suffix list (shipped inside the `publicsuffixlist` package)."""

from __future__ import annotations

from publicsuffixlist import PublicSuffixList


class RegisteredDomains:
    """`registered("a.b.example.co.uk") == "example.co.uk"`; cached, thread-safe for reads."""

    def __init__(self, cache_size: int = 200_000) -> None:
        self._psl = PublicSuffixList(accept_unknown=True)
        self._cache: dict[str, tuple[str, str]] = {}
        self._cache_size = cache_size

    def split(self, name: str) -> tuple[str, str]:
        """(registered domain, its label left of the public suffix); the name itself when it has none."""
        hit = self._cache.get(name)
        if hit is not None:
            return hit
        registered = self._psl.privatesuffix(name) if name else None
        if registered is None:
            result = (name, name.split(".", 1)[0])
        else:
            suffix_len = len(registered) - registered.find(".") if "." in registered else 0
            result = (registered, registered[: len(registered) - suffix_len] if suffix_len else registered)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[name] = result
        return result

    @property
    def memo(self) -> dict[str, tuple[str, str]]:
        """The cache `split` fills: name -> (registered, label); read it (the C DNS scanner does), never write it."""
        return self._cache

    def registered(self, name: str) -> str:
        return self.split(name)[0]
