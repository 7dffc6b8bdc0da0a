"""The shipped TLS fingerprint lists (`data/tls_fingerprints.csv`) that rules name with `in_list`."""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from pathlib import Path

LISTS_FILE = Path(__file__).resolve().parent.parent / "data" / "tls_fingerprints.csv"


@dataclass(frozen=True)
class FingerprintEntry:
    fingerprint: str
    tool: str
    notes: str


@functools.cache
def fingerprint_lists(path: Path = LISTS_FILE) -> dict[str, dict[str, FingerprintEntry]]:
    """list name -> fingerprint (lower case) -> entry; read once, the file is part of the release."""
    lists: dict[str, dict[str, FingerprintEntry]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        for row in rows:
            fingerprint = row["fingerprint"].strip().lower()
            lists.setdefault(row["list"].strip(), {})[fingerprint] = FingerprintEntry(
                fingerprint, row["tool"].strip(), (row.get("notes") or "").strip())
    return lists
