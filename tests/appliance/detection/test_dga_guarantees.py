"""The evaluation's guarantees on a fixed sample, through the real pipeline (converter, tracker,
every analysis layer, correlation): 26 families of three kinds on 5 hosts each, and 500 benign
hosts with 60 lookups each (30,000 lookups of real site names, realistic failed-lookup rates)."""

from __future__ import annotations

from pathlib import Path

from tests.appliance.detection import dga_corpus as dc

HOSTS_PER_FAMILY = 5


def test_families_are_detected_and_benign_hosts_are_not_on_a_fixed_sample(tmp_path: Path):
    picker = dc.BenignPicker(dc.preload_domains())
    benign = [dc.benign_host(n, picker, 60, 30, seed=11) for n in range(500)]
    infected = [dc.infected_host(f, i) for f in dc.FAMILIES for i in range(HOSTS_PER_FAMILY)]
    assert len(dc.FAMILIES) >= 25 and {f.kind for f in dc.FAMILIES} == {"dictionary", "pronounceable", "short-burst"}
    opened = dc.run_pipeline([s for s, _ in benign] + infected, tmp_path)

    shares = {f.name: sum(f"infected-{f.name}-{i:03d}" in opened for i in range(HOSTS_PER_FAMILY)) / HOSTS_PER_FAMILY
              for f in dc.FAMILIES}
    assert sum(share >= 0.8 for share in shares.values()) / len(shares) >= 0.95, shares
    assert min(shares.values()) >= 0.8, shares
    for agent, alerts in opened.items():
        if agent.startswith("infected-"):
            assert [a["category"] for a in alerts] == ["DomainGeneration"], alerts
    assert sum(n for _, n in benign) >= 30_000
    assert [s.machine_id for s, _ in benign if s.machine_id in opened] == []


def test_the_evaluation_cli_fails_when_it_could_not_show_the_targets(tmp_path: Path, capsys):
    from tools import dga_eval

    code = dga_eval.main(["--hosts-per-family", "1", "--benign-hosts", "10", "--benign-lookups", "500",
                          "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1 and "NOT met" in out and "benign lookups (< 50,000)" in out
    assert len([line for line in out.splitlines() if "short-burst" in line or "dictionary" in line
                or "pronounceable" in line]) >= 26
    assert (tmp_path / "dga.json").exists() and (tmp_path / "dga.txt").read_text().startswith("DGA evaluation")
