"""`make eval-dga`: DGA detection share per family and benign false-positive rate, through the real
analysis pipeline (packet converter, flow tracker, DPI/signature/behaviour layers, correlation).

Infected hosts: `--hosts-per-family` hosts for each of the 26 families of `dga_corpus` (three
kinds), each trying at most 20 generated names (short bursts 8-12) among ordinary lookups, the
resolver answering NXDOMAIN as a sinkhole does. Benign hosts: at least `--benign-lookups` lookups
of real site names (HSTS preload list) over `--benign-hosts` hosts with typos, expired names and
search-domain suffixes. Prints per family the share of hosts that raised an alert, the targets,
and exits non-zero when a target is missed. Writes the figures to var/eval/dga.{txt,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAMILY_TARGET = 0.95  # share of families detected (a family counts as detected at >= 80% of its hosts)
FAMILY_FLOOR = 0.80
BENIGN_CEILING = 0.001


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts-per-family", type=int, default=20)
    parser.add_argument("--benign-hosts", type=int, default=2000)
    parser.add_argument("--benign-lookups", type=int, default=120_000)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "eval")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.appliance.detection import dga_corpus as dc

    started = time.perf_counter()
    picker = dc.BenignPicker(dc.preload_domains())
    per_host = max(args.benign_lookups // args.benign_hosts, 1)
    benign = [dc.benign_host(n, picker, per_host, args.minutes) for n in range(args.benign_hosts)]
    infected = [dc.infected_host(f, i) for f in dc.FAMILIES for i in range(args.hosts_per_family)]
    streams = [s for s, _ in benign] + infected
    with tempfile.TemporaryDirectory() as tmp:
        opened = dc.run_pipeline(streams, Path(tmp))
    elapsed = time.perf_counter() - started

    lines = [f"DGA evaluation through the real pipeline ({len(streams)} hosts, {elapsed:.0f} s)",
             f"{'family':<14}{'kind':<15}{'hosts':>6}{'alerted':>9}{'share':>8}"]
    families: list[dict[str, object]] = []
    shares: dict[str, float] = {}
    for family in dc.FAMILIES:
        hosts = [f"infected-{family.name}-{i:03d}" for i in range(args.hosts_per_family)]
        hit = sum(1 for h in hosts if h in opened)
        share = hit / len(hosts)
        shares[family.name] = share
        families.append({"family": family.name, "kind": family.kind, "hosts": len(hosts), "alerted": hit, "share": share})
        lines.append(f"{family.name:<14}{family.kind:<15}{len(hosts):>6}{hit:>9}{share:>8.0%}")
    lookups = sum(n for _, n in benign)
    nx_shares = [_failed_share(s) for s, _ in benign]
    alerted = sorted(s.machine_id for s, _ in benign if s.machine_id in opened)
    fp_rate = len(alerted) / len(benign)
    detected = sum(1 for share in shares.values() if share >= FAMILY_FLOOR) / len(shares)
    worst = min(shares, key=shares.__getitem__)
    kinds = {k: statistics.mean(shares[f.name] for f in dc.FAMILIES if f.kind == k) for k in ("dictionary", "pronounceable", "short-burst")}
    lines += [
        "mean share by kind: " + ", ".join(f"{k} {v:.0%}" for k, v in kinds.items()),
        f"families detected at >= {FAMILY_FLOOR:.0%} of hosts: {detected:.1%} (target >= {FAMILY_TARGET:.0%}); "
        f"lowest {worst} {shares[worst]:.0%} (floor {FAMILY_FLOOR:.0%})",
        f"benign: {len(benign)} hosts, {lookups} lookups of {len({d for s, _ in benign for d in _names(s)})} distinct names, "
        f"failed-lookup share median {statistics.median(nx_shares):.1%}, p95 {sorted(nx_shares)[int(0.95 * len(nx_shares))]:.1%}",
        f"benign hosts alerted: {len(alerted)} of {len(benign)} = {fp_rate:.2%} (target <= {BENIGN_CEILING:.1%})"
        + (f": {', '.join(alerted[:5])}" if alerted else ""),
    ]
    ok = detected >= FAMILY_TARGET and shares[worst] >= FAMILY_FLOOR and fp_rate <= BENIGN_CEILING and lookups >= 50_000
    missed = [what for what, held in (
        (f"families detected {detected:.0%} < {FAMILY_TARGET:.0%}", detected >= FAMILY_TARGET),
        (f"{worst} at {shares[worst]:.0%} < {FAMILY_FLOOR:.0%}", shares[worst] >= FAMILY_FLOOR),
        (f"benign alert rate {fp_rate:.2%} > {BENIGN_CEILING:.1%}", fp_rate <= BENIGN_CEILING),
        (f"only {lookups} benign lookups (< 50,000)", lookups >= 50_000)) if not held]
    lines.append("targets: " + ("met" if ok else "NOT met: " + "; ".join(missed)))
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dga.txt").write_text(text + "\n", encoding="utf-8")
    (args.out / "dga.json").write_text(json.dumps({
        "families": families, "family_detected_share": detected, "benign_hosts": len(benign), "benign_lookups": lookups,
        "benign_alerted": alerted, "benign_alert_rate": fp_rate, "targets_met": ok, "seconds": round(elapsed, 1),
        "failed_lookup_share_median": statistics.median(nx_shares)}, indent=2), encoding="utf-8")
    return 0 if ok else 1


def _names(stream) -> list[str]:  # noqa: ANN001
    return [q for q, _ in _lookups(stream)]


def _lookups(stream) -> list[tuple[str, int]]:  # noqa: ANN001
    """(question name, rcode) of each answer in a stream (decoded as the appliance decodes it)."""
    from appliance.ingest.convert import PacketConverter, expand

    out = []
    for raw in PacketConverter().read(p for p in stream.packets if p.direction == 2):
        dns = expand(raw).dns
        if dns is not None and dns.is_response:
            out.append((dns.qname, dns.rcode))
    return out


def _failed_share(stream) -> float:  # noqa: ANN001
    answers = _lookups(stream)
    return sum(1 for _, rcode in answers if rcode in (2, 3)) / max(len(answers), 1)


if __name__ == "__main__":
    sys.exit(main())
