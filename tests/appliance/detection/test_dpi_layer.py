"""The DPI layer's loop over many flows (`DpiLayer.analyze_many`, what the pipeline calls) against each analyzer's own
`analyze` called flow by flow, as the layer did before its loop called the analyzers' C parts itself."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import pytest

from appliance.model import Detection, FlowRecord, Transport


def flow_by_flow(dpi: Any, flow: FlowRecord) -> list[Detection]:
    """The layer's body of before: every analyzer's `analyze`, in the same order."""
    config = dpi._config.current
    if flow.transport is Transport.TCP:
        out = dpi.dns.analyze(flow, config) if flow.dns else []
        facts = dpi._facts.facts(flow)
        out += dpi.tls.analyze(flow, facts, config)
        if facts.http_requests:
            out += dpi.http.analyze(flow, facts, config)
        return out
    if flow.transport is Transport.UDP:
        if not flow.dns:
            return []
        out = dpi.dns.analyze(flow, config)
        if flow.remote_port == 53:
            out += dpi.dga.analyze(flow, config)
        return out
    if flow.transport is Transport.ICMP:
        return dpi.icmp.analyze(flow, config)
    return []


def shown(detections: list[Detection]) -> list[tuple[Any, ...]]:
    return [dataclasses.replace(d, id="") for d in detections]


def dpi_of(tmp: Path) -> tuple[Any, Any]:
    """The DPI layer of the bench's appliance (a database of its own), and its parts."""
    from appliance.app import build_analysis, open_stores
    from bench.pipeline_bench import settings

    s = settings(tmp)
    s.paths.state_dir.mkdir(parents=True, exist_ok=True)
    parts, _ = build_analysis(s, open_stores(s), tls_views=False)
    return parts.dpi, parts


@pytest.fixture(scope="module")
def corpus_flows() -> list[FlowRecord]:
    from bench.pipeline_bench import corpus, finished_flows

    return finished_flows(corpus())


def test_the_loop_raises_what_each_analyzer_raises_flow_by_flow_on_the_bench_corpus(corpus_flows: list[FlowRecord]) -> None:
    flows = corpus_flows + [dataclasses.replace(f, remote_port=5353) for f in corpus_flows if f.dns][:50]  # mDNS-like: none
    # DNS over TCP: the DNS analyzer's own analyze first, then the facts and the gate
    flows += [dataclasses.replace(f, transport=Transport.TCP, protocol=6, flow_id=f.flow_id + "-tcp")
              for f in corpus_flows if f.dns and f.transport is Transport.UDP][::40]
    with tempfile.TemporaryDirectory() as tmp:
        dpi, parts = dpi_of(Path(tmp) / "many")
        reference, ref_parts = dpi_of(Path(tmp) / "one")
        for layer_parts in (parts, ref_parts):
            for flow in flows:
                for message in flow.dns:
                    if message.is_response:
                        layer_parts.resolver.observe(flow.agent_id, message)
        got: dict[int, list[Any]] = {}
        for start in range(0, len(flows), 256):
            got.update((start + i, shown(d)) for i, d in dpi.analyze_many(flows[start:start + 256]))
        want = {n: shown(d) for n, flow in enumerate(flows) if (d := flow_by_flow(reference, flow))}
        assert got == want
        assert {d.detector for found in got.values() for d in found} >= {
            "dpi.tls.raw_ip", "dpi.dns.tunnel_names", "dpi.dns.flood_rate", "dpi.dns.dga", "dpi.dns.nx_burst",
            "dpi.dns.dga_lexical", "dpi.http.encoded_data", "dpi.icmp.payload"}
        # the state the analyzers keep is the same too
        assert parts.facts.tls_handshakes == ref_parts.facts.tls_handshakes > 4000
        assert dpi.tls.prevalence._agents_of == reference.tls.prevalence._agents_of
        assert dpi.dns._windows.keys() == reference.dns._windows.keys()
        assert dpi.dga._askers == reference.dga._askers
        parts.db.close()
        ref_parts.db.close()


def test_a_flow_an_analyzer_fails_on_goes_to_failed_and_the_loop_goes_on(corpus_flows: list[FlowRecord]) -> None:
    flows = [f for f in corpus_flows if f.transport is Transport.UDP and f.dns and f.remote_port == 53][:40]
    broken = dataclasses.replace(flows[10], dns=[object()])  # not a DnsMessage: the scan cannot read it
    flows[10] = broken
    failed: list[FlowRecord] = []
    with tempfile.TemporaryDirectory() as tmp:
        dpi, parts = dpi_of(Path(tmp))
        dpi.analyze_many(flows, failed.append)
        assert failed == [broken]
        assert dpi.dns._agents  # the other flows were scanned
        with pytest.raises(Exception):
            dpi.analyze_many([broken])  # no `failed`: the caller's exception
        parts.db.close()


def test_out_of_range_flows_are_counted_and_skipped_in_the_loop(corpus_flows: list[FlowRecord]) -> None:
    flow = next(f for f in corpus_flows if f.transport is Transport.UDP and f.dns and f.remote_port == 53)
    future = dataclasses.replace(flow, first_ns=2**62, last_ns=2**62)
    with tempfile.TemporaryDirectory() as tmp:
        dpi, parts = dpi_of(Path(tmp))
        failed: list[FlowRecord] = []
        assert dpi.analyze_many([future, flow], failed.append) == [] and failed == []
        assert dpi.dns.out_of_range_flows == 1 and dpi.dga.out_of_range_flows == 1
        parts.db.close()
