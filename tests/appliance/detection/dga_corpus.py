"""DGA evaluation corpus: 26 families of three kinds on infected hosts, and benign hosts whose
lookups come from a real popular-domain list with realistic failed-lookup rates.

Families (seeded per host, so every host of a family sees different names, as on different days):

- **dictionary** (suppobox, pizd, matsnu, gozi, nymaim2, rovnix, bigviktor): real words
  concatenated, each family with its published structure (word count, hyphens, TLD set) and a
  fixed word list of its own drawn from the SCOWL list (`wamerican`), as the malware ships one;
- **pronounceable** (simda, pykspa, proslikefan, symmi, kraken, tempedreve, vawtrak, banjori):
  consonant/vowel alternation with each family's length range and TLDs; banjori rewrites the first
  four letters of a long word-like base name;
- **short burst** (cryptolocker, locky, ramnit as exactly published in `dga_families`; necurs,
  tinba, padcrypt, corebot, dircrypt, qakbot, ranbyus, fobber by their published alphabet, length
  and TLDs): random letters, but the host reaches its server after only 8-12 tries.

Apart from the three exact ones these generators follow each family's published structure; they
are not byte-for-byte reproductions of the malware (no sample feed is reachable offline).

Benign names come from the Chromium HSTS preload list shipped in the `hstspreload` package
(160,000 real site names, Zipf-weighted so popular sites are shared by many hosts), plus CDN and
long SaaS host names. Failed lookups: typos of popular names, expired names, search-domain
suffixes, Chrome's single-label intranet probes, and now and then a page embedding several dead
third-party widgets at once.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import os
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tests.appliance.detection import dga_families
from tests.appliance.detection.scenarios import T0_MS, Stream

WORDS_PATH = Path("/usr/share/dict/american-english")
VOWELS = "aeiou"
CONSONANTS = "".join(c for c in string.ascii_lowercase if c not in VOWELS)
Generator = Callable[[random.Random, int], list[str]]


@lru_cache(maxsize=1)
def english_words() -> list[str]:
    """Lower-case words of 3-9 letters from SCOWL (Debian `wamerican`)."""
    text = WORDS_PATH.read_text(encoding="utf-8", errors="ignore")
    return sorted({w for w in text.split() if w.isascii() and w.isalpha() and w.islower() and 3 <= len(w) <= 9})


def _word_list(family: str, size: int, min_len: int = 3, max_len: int = 9) -> list[str]:
    """The family's fixed word list (malware ships one list; it does not change per host)."""
    pool = [w for w in english_words() if min_len <= len(w) <= max_len]
    return random.Random(family).sample(pool, size)


# -- dictionary kind ---------------------------------------------------------------------------------
def suppobox(rng: random.Random, n: int) -> list[str]:
    words = _word_list("suppobox", 384, 4, 8)
    return [rng.choice(words) + rng.choice(words) + ".net" for _ in range(n)]


def pizd(rng: random.Random, n: int) -> list[str]:
    words = _word_list("pizd", 256, 4, 7)
    return [rng.choice(words) + rng.choice(words) + ".net" for _ in range(n)]


def matsnu(rng: random.Random, n: int) -> list[str]:
    nouns, verbs = _word_list("matsnu-nouns", 800, 3, 8), _word_list("matsnu-verbs", 400, 3, 7)
    out = []
    for _ in range(n):
        name = ""
        while len(name) < 24:
            piece = rng.choice(verbs if rng.random() < 0.4 else nouns)
            if len(name) + len(piece) > 24:
                break
            name += ("-" if name and rng.random() < 0.3 else "") + piece
        out.append(name + ".com")
    return out


def gozi(rng: random.Random, n: int) -> list[str]:
    words = _word_list("gozi", 1200, 3, 9)  # gozi takes its words from a public text
    tlds = ["com", "ru", "info", "net"]
    out = []
    for _ in range(n):
        name = ""
        while len(name) < 12:
            name += rng.choice(words)
        out.append(name[:24] + "." + rng.choice(tlds))
    return out


def nymaim2(rng: random.Random, n: int) -> list[str]:
    first, second = _word_list("nymaim2-a", 2450, 3, 9), _word_list("nymaim2-b", 4387, 3, 9)
    tlds = ["com", "net", "org", "info", "biz", "in", "us", "co", "me", "online"]
    return [rng.choice(first) + ("-" if rng.random() < 0.5 else "") + rng.choice(second) + "." + rng.choice(tlds)
            for _ in range(n)]


def rovnix(rng: random.Random, n: int) -> list[str]:
    words = _word_list("rovnix", 700, 3, 9)  # rovnix walks the US Declaration of Independence
    tlds = ["com", "net", "biz", "cn", "ru"]
    out = []
    for _ in range(n):
        start = rng.randrange(len(words) - 6)
        name = ""
        for word in words[start:]:
            if len(name) + len(word) > 23:
                break
            name += word
        out.append(name + "." + rng.choice(tlds))
    return out


def bigviktor(rng: random.Random, n: int) -> list[str]:
    lists = [_word_list(f"bigviktor-{i}", 150, 3, 7) for i in range(4)]
    tlds = ["com", "net", "org", "info", "me", "club", "cc"]
    out = []
    for _ in range(n):
        k = rng.choice([3, 4])
        out.append("".join(rng.choice(lists[i]) for i in range(k)) + "." + rng.choice(tlds))
    return out


# -- pronounceable kind ------------------------------------------------------------------------------
def _pronounceable(rng: random.Random, length: int, start_vowel: bool | None = None) -> str:
    vowel = rng.random() < 0.5 if start_vowel is None else start_vowel
    out = []
    for _ in range(length):
        out.append(rng.choice(VOWELS if vowel else CONSONANTS))
        vowel = not vowel
    return "".join(out)


def simda(rng: random.Random, n: int) -> list[str]:
    tlds = ["com", "eu", "info", "net", "org", "biz", "su", "ws"]
    consonants, vowels = "qwrtpsdfghklzxcvbnmy", "eyuioa"  # simda counts y both ways
    out = []
    for _ in range(n):
        length = rng.randint(7, 11)
        out.append("".join(rng.choice(consonants if i % 2 == 0 else vowels) for i in range(length)) + "." + rng.choice(tlds))
    return out


def pykspa(rng: random.Random, n: int) -> list[str]:
    tlds = ["com", "net", "org", "info", "cc"]
    return [_pronounceable(rng, rng.randint(6, 12)) + "." + rng.choice(tlds) for _ in range(n)]


def proslikefan(rng: random.Random, n: int) -> list[str]:
    tlds = ["eu", "pw", "in", "me", "org", "co", "net", "com"]
    return [_pronounceable(rng, rng.randint(6, 12), False) + "." + rng.choice(tlds) for _ in range(n)]


def symmi(rng: random.Random, n: int) -> list[str]:
    pairs = [c + v for c in "bcdfghklmnprstvwxz" for v in VOWELS]
    return ["".join(rng.choice(pairs) for _ in range(rng.randint(4, 6))) + ".com" for _ in range(n)]


def kraken(rng: random.Random, n: int) -> list[str]:
    tlds = ["com", "net", "tv", "cc"]
    return [_pronounceable(rng, rng.randint(6, 11)) + "." + rng.choice(tlds) for _ in range(n)]


def tempedreve(rng: random.Random, n: int) -> list[str]:
    tlds = ["com", "net", "org", "info"]
    return [_pronounceable(rng, rng.randint(7, 13), True) + "." + rng.choice(tlds) for _ in range(n)]


def vawtrak(rng: random.Random, n: int) -> list[str]:
    return [_pronounceable(rng, rng.randint(7, 12)) + ".com" for _ in range(n)]


def banjori(rng: random.Random, n: int) -> list[str]:
    base = rng.choice(["earnestnessbiophysicalohax", "andersonbiophysicalkulax", "hhksjqmenbiophysicalohax"])
    out = []
    for _ in range(n):
        out.append(_pronounceable(rng, 4) + base[4:] + ".com")
    return out


# -- short bursts (random letters, few tries) --------------------------------------------------------
def _random_names(rng: random.Random, n: int, alphabet: str, low: int, high: int, tlds: list[str]) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(low, high))) + "." + rng.choice(tlds) for _ in range(n)]


def _day(rng: random.Random) -> dt.date:
    return dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(700))


def cryptolocker(rng: random.Random, n: int) -> list[str]:
    return dga_families.cryptolocker(_day(rng), n)


def locky(rng: random.Random, n: int) -> list[str]:
    return dga_families.locky(_day(rng), n)


def ramnit(rng: random.Random, n: int) -> list[str]:
    return dga_families.ramnit(rng.getrandbits(31) | 1, n)


def necurs(rng: random.Random, n: int) -> list[str]:
    tlds = ["tj", "in", "jp", "tw", "ac", "cm", "la", "mn", "so", "sh", "sc", "nu", "nf", "mu", "ms", "mx", "ki", "im",
            "cx", "cc", "tv", "bz", "me", "eu", "de", "ru", "co", "su", "pw", "kz", "sx", "us", "ug", "ir", "to", "ga",
            "com", "net", "org", "biz", "xxx", "pro", "bit"]
    return _random_names(rng, n, "abcdefghijklmnopqrstuvwxy", 7, 21, tlds)


def tinba(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, "abcdefghijklmnopqrstuvwxy", 12, 12, ["com", "in", "net", "biz"])


def padcrypt(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, "abcdefghijklmno", 16, 16, ["com", "co.uk", "de", "org", "net", "eu", "info", "online"])


def corebot(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, string.ascii_lowercase + string.digits, 12, 24, ["ddns.net"])


def dircrypt(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, string.ascii_lowercase, 8, 20, ["com"])


def qakbot(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, string.ascii_lowercase, 8, 25, ["com", "net", "org", "info", "biz"])


def ranbyus(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, "abcdefghijklmnopqrstuvwxy", 14, 14, ["in", "me", "cc", "su", "tw", "net", "com", "pw", "org"])


def fobber(rng: random.Random, n: int) -> list[str]:
    return _random_names(rng, n, string.ascii_lowercase, 10, 17, ["net", "com"])


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # "dictionary", "pronounceable" or "short-burst"
    generate: Generator


FAMILIES: list[Family] = (
    [Family(f.__name__, "dictionary", f) for f in (suppobox, pizd, matsnu, gozi, nymaim2, rovnix, bigviktor)]
    + [Family(f.__name__, "pronounceable", f) for f in (simda, pykspa, proslikefan, symmi, kraken, tempedreve, vawtrak, banjori)]
    + [Family(f.__name__, "short-burst", f) for f in (cryptolocker, locky, ramnit, necurs, tinba, padcrypt, corebot,
                                                    dircrypt, qakbot, ranbyus, fobber)]
)
MAX_DGA_LOOKUPS = 20


# -- benign names ------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def preload_domains() -> list[str]:
    """The registered (two-label) names of the Chromium HSTS preload list shipped by `hstspreload`."""
    import hstspreload

    data = (Path(hstspreload.__file__).parent / "hstspreload.bin").read_bytes()
    hosts: set[str] = set()
    for layer in hstspreload._JUMPTABLE[1:]:
        for jump in layer:
            if jump is None:
                continue
            chunk, i = data[jump[0] : jump[0] + jump[1]], 0
            while i < len(chunk):
                flags, size = chunk[i], chunk[i + 1]
                if flags & 0x80:
                    host = chunk[i + 2 : i + 2 + size].decode("ascii", "ignore")
                    if host.count(".") == 1:
                        hosts.add(host)
                i += 2 + size
    return sorted(hosts)


SAAS = ["{t}.my.salesforce.com", "{t}.sharepoint.com", "{t}-my.sharepoint.com", "{t}.atlassian.net", "{t}.slack.com",
        "{t}.zendesk.com", "{t}.okta.com", "{t}.service-now.com", "{t}.awsapps.com", "{t}.webex.com"]
CDN = ["e{n}.dscb.akamaiedge.net", "d{h}.cloudfront.net", "r{k}---sn-{h6}.googlevideo.com", "fonts.gstatic.com",
       "v10.events.data.microsoft.com", "safebrowsing.googleapis.com", "outlook.office365.com",
       "login.microsoftonline.com", "prod-{k}-{h6}.s3.us-east-1.amazonaws.com", "edge-{k}.cdn.jsdelivr.net"]


def _typo(rng: random.Random, domain: str) -> str:
    label, _, suffix = domain.partition(".")
    i = rng.randrange(len(label))
    how = rng.randrange(3)
    if how == 0 and len(label) > 3:
        label = label[:i] + label[i + 1 :]
    elif how == 1:
        label = label[:i] + label[i] + label[i:]
    else:
        label = label[:i] + rng.choice(string.ascii_lowercase) + label[i + 1 :]
    return f"{label}.{suffix}"


class BenignPicker:
    """Zipf-weighted choice over the preload list: a few sites are everyone's, most are rare."""

    def __init__(self, domains: list[str], seed: int = 7) -> None:
        rng = random.Random(seed)
        self.domains = rng.sample(domains, len(domains))
        weights = [1.0 / (rank + 10) for rank in range(len(self.domains))]
        self._cumulative = list(itertools.accumulate(weights))

    def pick(self, rng: random.Random) -> str:
        x = rng.random() * self._cumulative[-1]
        return self.domains[min(bisect.bisect_left(self._cumulative, x), len(self.domains) - 1)]


def benign_host(n: int, picker: BenignPicker, lookups: int, minutes: float, start_ms: int = T0_MS,
                seed: int = 0) -> tuple[Stream, int]:
    """One host's lookups over `minutes`; returns the stream and the count of lookups with a dot."""
    rng = random.Random(f"benign-{seed}-{n}")
    random.seed(f"benign-{seed}-{n}")
    s = Stream(f"host-{seed}-{n:05d}", f"10.{8 + n // 57600}.{n // 240 % 240}.{10 + n % 240}")
    tenant = rng.choice(["acme", "contoso", "globex", "initech", "umbrella-corp", "northwind-traders"])
    search_suffix = rng.choice(["corp.example.com", "ad.example.org", "office.example.net"])
    heavy_suffix = rng.random() < 0.05  # a badly configured resolver list: many search-suffix lookups
    span = int(minutes * 60_000)
    times = sorted(rng.randrange(span) for _ in range(lookups))
    counted = 0
    if rng.random() < 0.3:  # Chrome's intranet-redirect probes at start: three random single labels
        for i in range(3):
            s.dns(start_ms + i * 5, "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(7, 15))), rcode=3)
    for t in times:
        at = start_ms + t
        r = rng.random()
        if r < 0.015:
            s.dns(at, "www." + _typo(rng, picker.pick(rng)), rcode=3)
        elif r < 0.025:
            s.dns(at, rng.choice(picker.domains), rcode=3)  # an expired or parked-then-dropped name
        elif r < (0.25 if heavy_suffix else 0.045):
            s.dns(at, f"{rng.choice(['wpad', 'www', 'api', 'cdn'])}.{picker.pick(rng)}.{search_suffix}", rcode=3)
        elif r < (0.251 if heavy_suffix else 0.046):
            dead = [rng.choice(picker.domains) for _ in range(rng.randint(2, 4))]
            for i, name in enumerate(dead):  # an old page embedding widgets of defunct sites
                s.dns(at + i * 3, "widgets." + name, rcode=rng.choice([2, 3]))
                counted += 1
        elif r < 0.12:
            s.dns(at, rng.choice(SAAS).format(t=tenant))
        elif r < 0.25:
            h = os.urandom(8).hex()
            s.dns(at, rng.choice(CDN).format(n=rng.randint(1000, 99999), h=h[:13], h6=h[:8], k=rng.randint(1, 99)))
        else:
            s.dns(at, rng.choice(["www.", "", "static.", "api."]) + picker.pick(rng))
        counted += 1
    return s, counted


def infected_host(family: Family, index: int, start_ms: int = T0_MS, background: int = 10) -> Stream:
    """A host that runs `family` (20 tries at most, a short burst reaching its server after 8-12)
    among some ordinary lookups; the resolver answers every generated name NXDOMAIN but the live one."""
    rng = random.Random(f"{family.name}-{index}")
    random.seed(f"{family.name}-{index}")
    s = Stream(f"infected-{family.name}-{index:03d}", f"10.200.{index // 240}.{10 + index % 240}")
    tries = rng.randint(8, 12) if family.kind == "short-burst" else MAX_DGA_LOOKUPS
    names = list(dict.fromkeys(family.generate(rng, tries * 2)))[:tries]
    t = start_ms + rng.randint(0, 60_000)
    for i in range(background):
        s.dns(start_ms + rng.randrange(600_000), rng.choice(["www.wikipedia.org", "outlook.office365.com", "www.bbc.co.uk",
                                                              "fonts.gstatic.com", "github.com", "update.microsoft.com"]))
    for i, name in enumerate(names):
        live = family.kind == "short-burst" and i == len(names) - 1
        s.dns(t, name, rcode=0 if live else 3)
        t += rng.randint(300, 4_000)
    return s


# -- the real pipeline, fed as the ingest path feeds it -------------------------------------------
def run_pipeline(streams: list[Stream], tmp: Path, slice_ms: int = 30_000) -> dict[str, list[dict[str, object]]]:
    """Every stream through the packet converter, the flow tracker and the whole analysis pipeline
    of an appliance built by `app.build` with the shipped rules (hosts interleaved by event time as they stream side by
    side); returns the alerts opened, by agent."""
    import logging

    from appliance.app import build
    from bench.pipeline_bench import finished_flows, settings

    logging.disable(logging.WARNING)
    app = build(settings(tmp))  # the shipped signature rules loaded, as in the pipeline benchmark
    assert app.detection is not None
    opened: dict[str, list[dict[str, object]]] = {}
    app.detection.channel.subscribe(
        lambda event, alert: opened.setdefault(alert.agent_id, []).append(
            {"category": alert.category, "summary": alert.summary, "detectors": sorted({d["detector"] for d in alert.detections})})
        if event == "opened" else None)
    process = app.pipeline.process
    for flow in finished_flows([(s.machine_id, s.sorted()) for s in streams], slice_ms):
        process(flow)
    app.detection.db.close()
    logging.disable(logging.NOTSET)
    return opened
