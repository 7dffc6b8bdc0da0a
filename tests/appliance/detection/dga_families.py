"""Three published domain generation algorithms, re-implemented for test traffic.

- Cryptolocker (Fortinet, "A closer look at Cryptolocker's DGA", 2014): date-seeded xorshift mix.
- Locky (Forcepoint analysis, 2016; config 1: seed 62): date-seeded rotate-multiply.
- Ramnit (seeded Park-Miller LCG, as published in DGArchive write-ups): seed-based.
"""

from __future__ import annotations

import datetime as dt

_M32 = 0xFFFFFFFF


def cryptolocker(date: dt.date, count: int) -> list[str]:
    tlds = ["com", "net", "biz", "ru", "org", "co.uk", "info"]
    out = []
    for z in range(count):
        d, m, y = date.day * 65537, date.month * 65537, (date.year + z) * 65537
        s = ((d >> 3) ^ (y >> 8) ^ (y >> 11)) & 3
        s += 12
        name = ""
        for _ in range(s):
            d = (((d << 13) & _M32) >> 19) ^ (((d >> 1) << 13) & _M32) ^ (d >> 19)
            d &= _M32
            m = (((m << 2) & _M32) >> 25) ^ (((m >> 3) << 7) & _M32) ^ (m >> 25)
            m &= _M32
            y = (((y << 3) & _M32) >> 11) ^ (((y >> 4) << 21) & _M32) ^ (y >> 11)
            y &= _M32
            name += chr(ord("a") + (y ^ m ^ d) % 25)
        out.append(f"{name}.{tlds[z % 7]}")
    return out


def _ror(v: int, s: int) -> int:
    v &= _M32
    return ((v >> s) | (v << (32 - s))) & _M32


def _rol(v: int, s: int) -> int:
    v &= _M32
    return ((v << s) | (v >> (32 - s))) & _M32


def locky(date: dt.date, count: int) -> list[str]:
    seed, c1, c2, c3, c4 = 62, 0xB11924E1, 0x1BF5, 0x27100001, 0x2709A354
    tlds = ["ru", "pw", "eu", "in", "yt", "pm", "us", "fr", "de", "it", "be", "uk", "nl", "tf"]
    out = []
    for nr in range(count):
        t = _ror(c1 * (date.year + c2), 7)
        t = _ror(c1 * (t + seed + c3), 7)
        t = _ror(c1 * (t + date.day // 2 + c3), 7)
        t = _ror(c1 * (t + date.month + c4), 7)
        r = (_ror(c1 * (_rol(nr % 8 + nr // 8 * 9, 21) + t + _rol(seed, 17) + c3), 7) + c3) & _M32
        length = r % 11 + 5
        name = ""
        for i in range(length):
            r = (_ror(c1 * _rol(r, i), 7) + c3) & _M32
            name += chr(r % 25 + ord("a"))
        r = _ror(r * c1, 7)
        out.append(f"{name}.{tlds[(r + c3) % len(tlds)]}")
    return out


def ramnit(seed: int, count: int) -> list[str]:
    value = seed
    out = []

    def rand(modulus: int) -> int:
        nonlocal value
        ix = (16807 * (value % 127773) - 2836 * (value // 127773)) & _M32
        value = ix
        return ix % modulus

    for _ in range(count):
        seed_a = value
        length = rand(12) + 8
        seed_b = value
        name = "".join(chr(ord("a") + rand(25)) for _ in range(length))
        product = seed_a * seed_b
        value = (product + product // 2**32) % 2**32
        out.append(name + ".com")
    return out
