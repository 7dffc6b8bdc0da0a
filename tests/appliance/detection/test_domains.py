"""RegisteredDomains.split (C, appliance/native/suffix_split.h) answers what the public suffix library answers."""

from __future__ import annotations

import random

import pytest

from appliance.detection.domains import RegisteredDomains
from tests.appliance.detection.dns_flows import random_name


@pytest.fixture(scope="module")
def domains() -> RegisteredDomains:
    return RegisteredDomains()


def test_every_rule_under_every_kind_of_prefix_splits_as_the_library_does(domains: RegisteredDomains) -> None:
    names = []
    for rule in sorted(domains._psl._publicsuffix):
        body = rule.lstrip("!")
        body = body[2:] if body.startswith("*.") else body
        # The rule itself (literal "!" and "*" labels too), one and two labels below it, upper case, a trailing dot.
        names += [rule, "x." + rule, body, "x." + body, "a.b." + body, "www." + body, "A.Www." + body.upper(),
                  "x." + body + ".", "*." + body, "a.*." + body, "!x." + body]
    assert len(names) > 50_000
    wrong = [(n, domains.split(n), domains.split_reference(n)) for n in names if domains.split(n) != domains.split_reference(n)]
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("name, expected", [
    ("a.b.example.co.uk", ("example.co.uk", "example")), ("www.ck", ("www.ck", "www")), ("a.b.c.ck", ("b.c.ck", "b")),
    ("com", ("com", "com")), ("", ("", "")), ("a..b.com", ("a..b.com", "a")), ("Mail.Example.COM.", ("example.com", "example")),
    ("xn--80ak6aa92e.com", ("xn--80ak6aa92e.com", "xn--80ak6aa92e")), ("пример.рф", ("пример.рф", "пример")),
    ("x.y.t.tunnel-example.net", ("tunnel-example.net", "tunnel-example")),
])
def test_known_answers(domains: RegisteredDomains, name: str, expected: tuple[str, str]) -> None:
    assert domains.split(name) == expected == domains.split_reference(name)


def test_random_hostile_names_split_as_the_library_does() -> None:
    domains, rng = RegisteredDomains(cache_size=1000), random.Random(5)  # a small memo: cleared many times over
    names = [random_name(rng, ["t.tunnel-example.net", "x.co.uk", "a.b.kobe.jp"]) for _ in range(20_000)]
    names += ["." * 200, "a." * 127 + "com", "İ.COM", "ǅ.Ab.CO.UK", "\x00.com", "a\ud800.com", "é" * 250 + ".fr"]
    for name in names:
        assert domains.split(name) == domains.split_reference(name), name
        assert domains.split(name) == domains.split_reference(name), name  # remembered
    assert 0 < len(domains.memo) <= 1000


def test_split_refuses_what_is_not_a_str(domains: RegisteredDomains) -> None:
    with pytest.raises(TypeError):
        domains.split(b"example.com")  # type: ignore[arg-type]


def test_names_under_one_registered_domain_share_its_pair() -> None:
    """A tunnel's or a flood's names are all new: each gets the registered domain's one (registered, label) tuple,
    so the DNS loops meet the same string objects (kept hashes, identity before comparison)."""
    domains = RegisteredDomains(cache_size=4)
    names = [f"q{i}.t.tunnel-example.net" for i in range(3)] + ["TUNNEL-example.net.", "tunnel-example.net"]
    pairs = [domains.split(n) for n in names]
    assert pairs[0] == ("tunnel-example.net", "tunnel-example")
    assert all(p is pairs[0] for p in pairs)
    assert domains.split("other.example.org") == ("example.org", "example")
    assert domains.split("z.t.tunnel-example.net") == pairs[0]  # the memos cleared at 4 names: still the same answer
