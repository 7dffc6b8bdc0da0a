"""FlowFacts (one C call per TCP flow: appliance.native.dpi.sample_facts, the fingerprints behind a memo)
against its Python reference (facts.facts_reference: the per-sample loop, tls_meta._joined, the reference
hello parsers, hashlib every time): the same Facts, field for field with their types, the same REST `tls`
view and the same counters, on the bench corpus (office traffic and every attack scenario), browser-sized
handshakes, and thousands of seeded random flows (hellos cut and split over samples, garbage after 0x16,
HTTP interleaved with TLS, empty payloads, odd directions, huge sample counts); and the same detections
out of the whole pipeline."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from appliance.detection.dpi.tls_fingerprint import FingerprintMemo
from appliance.detection.facts import Facts, FlowFacts, facts_reference, tls_metadata
from appliance.model import FlowRecord, Packet, Transport
from tests.appliance.detection import tls_certs as tc
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.pipeline_run import pipeline_detections
from tests.appliance.detection.test_tls_benign import chrome, firefox


def typed(value: Any) -> Any:
    """A value with the type of every part (True == 1 and (1,) == [1] must not pass for equal)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple((f.name, typed(getattr(value, f.name))) for f in dataclasses.fields(value)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(typed(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, typed(v)) for k, v in value.items()))
    return (type(value).__name__, value)


def flow_of(samples: list[tuple[int, bytes]], transport: Transport = Transport.TCP, n: int = 0) -> FlowRecord:
    flow = FlowRecord(f"f{n}", "agent", int(transport), transport, 1, 40000 + n % 20000, 2, 443, 0, 1)
    flow.samples = [Packet(0, direction, int(transport), transport, 1, 2, 40000, 443, len(payload) + 52, payload)
                    for direction, payload in samples]
    return flow


class Counted:
    """FlowFacts' counters as the reference says they go."""

    def __init__(self) -> None:
        self.handshakes = self.incomplete = self.unreadable = self.certificates_unreadable = 0

    def add(self, facts: Facts, handshake: bool) -> None:
        meta = facts.tls
        if meta is None:
            self.unreadable += handshake
            return
        self.handshakes += 1
        self.incomplete += not meta.complete
        self.certificates_unreadable += meta.certificates_unreadable


def assert_same_facts(flows: list[FlowRecord], memo_entries: int = 1024) -> int:
    """Facts, views and counters of FlowFacts == the reference on `flows`; returns the flows with TLS metadata."""
    reader = FlowFacts(tls_views=True, fingerprints=FingerprintMemo(entries=memo_entries))
    quiet = FlowFacts(tls_views=False)
    want_counts = Counted()
    with_tls = 0
    for flow in flows:
        want, handshake = facts_reference(flow)
        want_counts.add(want, handshake)
        flow.tls = None
        got = reader.facts(flow)
        assert typed(got) == typed(want), flow.samples
        assert reader.facts(flow) is got  # parsed once: the layers after the first get the same object
        assert flow.tls == (want.tls.view() if want.tls is not None else None)
        viewless = dataclasses.replace(flow, tls=None)
        assert typed(quiet.facts(viewless)) == typed(want) and viewless.tls is None
        with_tls += want.tls is not None
    assert (reader.tls_handshakes, reader.tls_incomplete, reader.tls_unreadable, reader.tls_certificates_unreadable) == (
        want_counts.handshakes, want_counts.incomplete, want_counts.unreadable, want_counts.certificates_unreadable)
    # without views most flows are counted in C (FactsMemo), not by FlowFacts._finish: the same counts
    assert (quiet.tls_handshakes, quiet.tls_incomplete, quiet.tls_unreadable, quiet.tls_certificates_unreadable) == (
        want_counts.handshakes, want_counts.incomplete, want_counts.unreadable, want_counts.certificates_unreadable)
    return with_tls


@pytest.fixture(scope="module")
def corpus_flows() -> list[FlowRecord]:
    from bench.pipeline_bench import corpus, finished_flows

    return finished_flows(corpus())


def test_the_corpus_facts_equal_the_reference(corpus_flows: list[FlowRecord]) -> None:
    with_tls = assert_same_facts(corpus_flows)
    assert with_tls > 4000  # the office's HTTPS and the raw-IP TLS scenario
    assert sum(1 for f in corpus_flows if FlowFacts().facts(f).http_requests) > 50  # apt and the HTTP scenarios


def test_the_corpus_facts_equal_the_reference_through_a_tiny_memo(corpus_flows: list[FlowRecord]) -> None:
    assert_same_facts(corpus_flows[:1500], memo_entries=1)  # full after one key: starts over all the time


def test_browser_sized_handshakes_equal_the_reference() -> None:
    from bench.pipeline_bench import _browser_flows

    flows = [f for kind in _browser_flows(40).values() for f in kind]
    assert assert_same_facts(flows) == len(flows)
    chained = FlowFacts().facts(flows[-1]).tls
    assert chained is not None and len(chained.certificates) == 2 and chained.ja4s and chained.ja4.startswith("t13d")


def _http_request(rng: random.Random) -> bytes:
    method = rng.choice([b"GET", b"POST", b"PUT", b"BREW", b"get"])
    headers = b"".join(rng.choice([b"Host: a.example:8080\r\n", b"User-Agent: x\r\n", b"Content-Length: 12\r\n",
                                   b"Cookie: k=v\r\n", b"X: " + rng.randbytes(8) + b"\r\n"]) for _ in range(rng.randrange(4)))
    return method + b" /" + rng.randbytes(rng.randrange(3)) + b" HTTP/1.1\r\n" + headers + b"\r\n" + rng.randbytes(rng.randrange(9))


def _http_response(rng: random.Random) -> bytes:
    return (b"HTTP/1.1 " + rng.choice([b"200 OK", b"404 Not Found", b"abc", b""]) + b"\r\nContent-Length: "
            + str(rng.randrange(-5, 99999)).encode() + b"\r\n\r\n")


def _pieces(rng: random.Random, data: bytes) -> list[bytes]:
    """`data` split at random points (a hello over several TCP segments), sometimes cut short."""
    if rng.random() < 0.3:
        data = data[: rng.randrange(len(data) + 1)]
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(4)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def _mutated(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(out) + 1)
        if rng.random() < 0.5 and out:
            out[min(at, len(out) - 1)] = rng.randrange(256)
        else:
            del out[at : at + rng.randint(1, 30)]
    return bytes(out)


@pytest.fixture(scope="module")
def handshakes() -> dict[str, list[bytes]]:
    rng = random.Random(7)
    _, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    return {
        "client": [chrome("www.example.com", rng), chrome("Mail.Example.org.", rng, updated=True), firefox("a.example", rng),
                   tr.client_hello([0x1301], [0, 16], sni="x.example", alpn=[b"h2"], record_size=40)],
        "server": [tr.server_hello(0x1301, [0x002B, 0x0033], selected=0x0304, alpn=b"h2"),
                   tr.server_flight(0xC02F, [0xFF01, 0x0017], [leaf.der, intermediate.der]),
                   tr.server_flight(0xC02F, [0xFF01], [b"\x30\x03garbage", leaf.der])],
    }


def _random_flow(rng: random.Random, handshakes: dict[str, list[bytes]], n: int) -> FlowRecord:
    samples: list[tuple[int, bytes]] = []
    for _ in range(rng.choice([1, 1, 2, 2, 3, 4, 6, 10])):
        direction = rng.choice([1, 1, 2, 2, 2, 0, 3])
        kind = rng.randrange(10)
        if kind <= 2:  # a hello of the direction's side (or the other: a client speaking first from outside)
            side = "client" if (direction == 1) != (kind == 2) else "server"
            hello = rng.choice(handshakes[side])
            for piece in _pieces(rng, _mutated(rng, hello) if rng.random() < 0.25 else hello):
                samples.append((direction, piece))
        elif kind == 3:
            samples.append((direction, b"\x16" + rng.randbytes(rng.randrange(0, 60))))  # garbage after 0x16
        elif kind == 4:
            samples.append((direction, _http_request(rng)))
        elif kind == 5:
            samples.append((direction, _http_response(rng)))
        elif kind == 6:
            samples.append((direction, b""))
        elif kind == 7:
            samples.append((direction, rng.randbytes(rng.randrange(1, 40))))
        elif kind == 8:  # past what a join keeps: 16 KB and more in one direction
            samples.append((direction, b"\x16\x03\x01\x40\x00" + rng.randbytes(rng.choice([100, 17_000]))))
        else:
            samples.append((direction, b"\x17\x03\x03\x00\x10" + bytes(16)))  # application data after the hellos
    if rng.random() < 0.2:
        rng.shuffle(samples)
    return flow_of(samples, Transport.TCP if rng.random() < 0.95 else Transport.UDP, n)


# Mutated flights carry certificates `cryptography` reads with a deprecation warning (a serial number that is
# not positive): counted, as on the wire, not a failure.
@pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")
def test_seeded_random_flows_equal_the_reference(handshakes: dict[str, list[bytes]]) -> None:
    rng = random.Random(2026)
    flows = [_random_flow(rng, handshakes, n) for n in range(4000)]
    with_tls = assert_same_facts(flows)
    assert with_tls > 800  # the flows still reach the hello readers, not only the record check
    readers = FlowFacts()
    http = sum(1 for f in flows if readers.facts(f).http_requests)
    assert http > 150 and readers.tls_unreadable > 100 and readers.tls_incomplete > 100
    assert readers.tls_certificates_unreadable > 50  # the garbled certificate of a chain


def test_huge_sample_counts_equal_the_reference(handshakes: dict[str, list[bytes]]) -> None:
    rng = random.Random(3)
    many = [(rng.choice([1, 2]), rng.choice([b"", b"\x16\x03", b"GET / HTTP/1.1\r\n\r\n", b"HTTP/1.0 204 x\r\n\r\n",
                                            rng.randbytes(30)])) for _ in range(20_000)]
    split = [(1, piece) for piece in _pieces(random.Random(1), handshakes["client"][0])] + many
    assert assert_same_facts([flow_of(many), flow_of(split, n=1), flow_of([(2, bytes(70_000))] * 3, n=2)]) >= 1


def test_the_flow_tls_metadata_reads_as_the_detectors_do(handshakes: dict[str, list[bytes]]) -> None:
    flow = flow_of([(1, handshakes["client"][0]), (2, handshakes["server"][1])])
    meta = tls_metadata(flow)
    want, _ = facts_reference(flow)
    assert meta is not None and typed(meta) == typed(want.tls) and len(meta.certificates) == 2
    assert tls_metadata(flow_of([(1, b"GET / HTTP/1.1\r\n\r\n")])) is None
    assert tls_metadata(flow_of([(1, b"\x16garbage")])) is None


def _pipeline_detections(flows: list[FlowRecord], reference: bool) -> list[Any]:
    def use_reference(app: Any) -> None:  # every layer reads the reference's facts, parsed once per flow as FlowFacts does
        cache: dict[str, Any] = {}

        def facts(flow: FlowRecord) -> Facts:
            if cache.get("flow") is not flow:
                cache["flow"], cache["facts"] = flow, facts_reference(flow)[0]
            return cache["facts"]

        app.detection.facts.facts = facts

    return pipeline_detections(flows, use_reference if reference else None)


def test_the_pipeline_raises_the_same_detections_as_with_the_reference_facts(corpus_flows: list[FlowRecord]) -> None:
    flows = [dataclasses.replace(f, tls=None) for f in corpus_flows]
    got = _pipeline_detections(flows, reference=False)
    want = _pipeline_detections([dataclasses.replace(f, tls=None) for f in corpus_flows], reference=True)
    assert got == want
    assert {d.detector for d in got} >= {"dpi.tls.raw_ip"}  # the TLS detector is reached, not skipped
