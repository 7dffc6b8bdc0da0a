"""appliance.native.dpi.sample_facts (one pass over a TCP flow's samples: HTTP candidates, both directions'
handshake bytes joined, the hellos read, the certificate chain cut out, Facts and TLS metadata made by
SlotMakers) and SlotMaker itself: equal to the Python reference on seeded random flows, hostile arguments
refused with an exception (never a crash), objects made exactly as their dataclass makes them, no leak.
test_sanitized.py runs this file under ASan/UBSan."""

from __future__ import annotations

import dataclasses
import enum
import random
import tracemalloc
from typing import Any

import pytest

from appliance.detection.dpi import tls_meta
from appliance.detection.dpi.tls_fingerprint import FingerprintMemo
from appliance.detection.dpi.tls_parse import ClientHello, certificate_chain
from appliance.detection.facts import Facts, FlowFacts, facts_reference, sample_reader
from appliance.model import Transport
from appliance.native import dpi
from tests.appliance.detection import tls_certs as tc
from tests.appliance.detection import tls_records as tr
from tests.appliance.detection.test_facts import _mutated, _random_flow, assert_same_facts, flow_of, typed
from tests.appliance.detection.test_tls_benign import chrome


@pytest.fixture(scope="module")
def handshakes() -> dict[str, list[bytes]]:
    rng = random.Random(9)
    _, intermediate = tc.public_pki()
    leaf = tc.issue("www.example.com", issuer=intermediate, dns=["www.example.com"])
    return {"client": [chrome("www.example.com", rng), tr.client_hello([0x1301], [0, 16], sni="a.example", alpn=[b"h2"])],
            "server": [tr.server_hello(0x1301, [0x002B], selected=0x0304),
                       tr.server_flight(0xC02F, [0xFF01, 0x0017], [leaf.der, intermediate.der])]}


def reader() -> tuple[Any, ...]:
    return sample_reader(FingerprintMemo())


# Mutated flights carry certificates `cryptography` reads with a deprecation warning (a serial number that is
# not positive): counted, as on the wire, not a failure.
@pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")
def test_seeded_random_flows_equal_the_reference(handshakes: dict[str, list[bytes]]) -> None:
    rng = random.Random(11)
    assert assert_same_facts([_random_flow(rng, handshakes, n) for n in range(1500)], memo_entries=3) > 200


def test_the_certificate_chain_cut_out_in_c_equals_the_python(handshakes: dict[str, list[bytes]]) -> None:
    rng = random.Random(4)
    flight = handshakes["server"][1]
    chains = 0
    for n in range(3000):
        data = _mutated(rng, flight) if n % 4 else flight[: rng.randrange(len(flight) + 1)]
        flow = flow_of([(2, data)])
        found = dpi.sample_facts(flow.samples, reader())
        meta = found[0].tls if found is not None else None
        if meta is None or meta.server_hello is None:
            continue
        want = certificate_chain(tls_meta._joined(flow.samples, 2))
        assert found[4] == want, data
        chains += want is not None
    assert chains > 500


def test_a_hostile_certificate_message_is_cut_as_the_python_cuts_it() -> None:
    server = tr.server_hello(0xC02F, [0xFF01])
    for body in (b"", b"\x00", b"\x00\x00\x05\x00\x00\x09abc", b"\xff\xff\xff" + b"\x00\x00\x01x" * 20,
                 b"\x00\x00\x28" + b"\x00\x00\x01x" * 10, b"\x00\x00\x00"):
        flight = server + tr.record(11, body)
        flow = flow_of([(2, flight)])
        assert dpi.sample_facts(flow.samples, reader())[4] == certificate_chain(flight), body
    many = b"".join(b"\x00\x00\x01" + bytes([i]) for i in range(12))
    flight = server + tr.record(11, len(many).to_bytes(3, "big") + many)
    ders, complete = dpi.sample_facts(flow_of([(2, flight)]).samples, reader())[4]
    assert len(ders) == 8 and complete  # MAX_CERTIFICATES, as certificate_chain


class Direction(enum.IntEnum):
    OUT = 1
    IN = 2


def test_payloads_and_directions_of_other_types_read_as_the_python_reads_them(handshakes: dict[str, list[bytes]]) -> None:
    hello = handshakes["client"][0]
    for direction in (Direction.OUT, True, 1 << 80, -1, None, 1.0, "1"):
        flow = flow_of([(1, hello), (2, b"HTTP/1.1 200 OK\r\n\r\n")])
        flow.samples[0].direction = direction  # type: ignore[assignment]
        want, _ = facts_reference(flow)
        assert typed(FlowFacts(tls_views=False).facts(flow)) == typed(want), direction
    for kind in (bytearray, memoryview):
        flow = flow_of([(1, hello)])
        flow.samples[0].payload = kind(hello)  # type: ignore[assignment]
        assert typed(FlowFacts().facts(flow).tls) == typed(facts_reference(flow)[0].tls)


def test_hostile_arguments_raise_and_never_crash(handshakes: dict[str, list[bytes]]) -> None:
    samples = flow_of([(1, handshakes["client"][0])]).samples
    good = reader()
    for bad_reader in (None, (), good[:6], good + (None,), (good[1], good[0], *good[2:]), (None, *good[1:]),
                       (*good[:3], tls_meta.METADATA_MAKERS[2], *good[4:])):
        with pytest.raises(TypeError):
            dpi.sample_facts(samples, bad_reader)
    with pytest.raises(TypeError):
        dpi.sample_facts(samples)  # type: ignore[call-arg]
    for bad_samples in (None, 5, [None], [object()]):
        with pytest.raises((TypeError, AttributeError)):
            dpi.sample_facts(bad_samples, good)
    flow = flow_of([(1, b"GET / HTTP/1.1\r\n\r\n")])
    for payload in ("GET / HTTP/1.1", None, 3, memoryview(b"\x16\x03\x01\x00\x05abcde")[::2]):
        flow.samples[0].payload = payload  # type: ignore[assignment]
        with pytest.raises((TypeError, BufferError, ValueError)):
            dpi.sample_facts(flow.samples, good)
    for at in (4, 5):
        with pytest.raises(KeyError):  # a plain dict computes nothing
            dpi.sample_facts(samples, (*good[:at], {}, *good[at + 1 :]))

    class Wrong(dict[str, Any]):
        def __missing__(self, key: str) -> Any:
            return ("not", "a str")

    with pytest.raises(TypeError):
        dpi.sample_facts(samples, (*good[:4], Wrong(), *good[5:]))
    server = flow_of([(2, handshakes["server"][0])]).samples
    with pytest.raises(TypeError):
        dpi.sample_facts(server, (*good[:6], Wrong()))
    assert dpi.sample_facts(samples, good)[0].tls is not None  # still reads after every refusal


def test_a_sample_list_changed_under_the_walk_is_read_as_far_as_it_goes(handshakes: dict[str, list[bytes]]) -> None:
    samples: list[Any] = []

    class Shrinking:
        """A packet whose payload empties the list being walked (a getter with side effects)."""
        direction = 1

        @property
        def payload(self) -> bytes:
            samples.clear()
            return handshakes["client"][0]

    samples.extend([Shrinking()] + flow_of([(2, b"HTTP/1.1 200 OK\r\n\r\n")] * 50).samples)
    found = dpi.sample_facts(samples, reader())
    assert found is not None and found[0].tls is not None and found[2] is None and samples == []


def test_a_slot_maker_makes_what_the_dataclass_makes(handshakes: dict[str, list[bytes]]) -> None:
    hello = FlowFacts().facts(flow_of([(1, handshakes["client"][0])])).client_hello
    assert hello is not None
    values = [getattr(hello, f.name) for f in dataclasses.fields(ClientHello)]
    made = tls_meta.METADATA_MAKERS[0](*values)
    assert type(made) is ClientHello and typed(made) == typed(ClientHello(*values)) and made == hello
    made.sni = "other"  # an ordinary object: its slots writable, its copies equal
    assert dataclasses.replace(made) == made and repr(made).startswith("ClientHello(")
    facts = tls_meta.slot_maker(Facts)([], [], None, None)
    assert facts == Facts() and facts.http_requests is not facts.http_responses
    with pytest.raises(TypeError):
        tls_meta.METADATA_MAKERS[1](1, 2)


def test_slot_makers_refuse_what_is_no_writable_object_slot() -> None:
    @dataclasses.dataclass(slots=True)
    class Base:
        a: int = 0

    @dataclasses.dataclass(slots=True)
    class Child(Base):
        b: int = 0

    class NoSlots:
        a = 0

    class Member:
        __slots__ = ("x",)

    for cls, names in ((Child, ("a", "b")), (Base, ("a", "a")), (Base, ("nope",)), (NoSlots, ("a",)),
                       (Base, ("__init__",)), (Member, (1,)), (Base, tuple("abcdefghijklmnopq")), (Base, ())):
        with pytest.raises((TypeError, ValueError)):
            dpi.SlotMaker(cls, names)
    with pytest.raises(TypeError):
        dpi.SlotMaker(Base(), ("a",))
    with pytest.raises(TypeError):
        dpi.SlotMaker(Base, ["a"])
    with pytest.raises(TypeError):
        tls_meta.slot_maker(NoSlots)

    @dataclasses.dataclass(slots=True)
    class Checked:
        a: int = 0

        def __post_init__(self) -> None:
            pass

    with pytest.raises(TypeError):  # its __init__ does more than assign
        tls_meta.slot_maker(Checked)
    assert dpi.SlotMaker(Member, ("x",))(5).x == 5


def test_no_leak_on_any_path(handshakes: dict[str, list[bytes]]) -> None:
    good = reader()
    flows = [flow_of([(1, handshakes["client"][0]), (2, handshakes["server"][1]), (1, b"GET / HTTP/1.1\r\n\r\n"),
                      (2, b"HTTP/1.1 200 OK\r\n\r\n")]),
             flow_of([(1, b"\x16garbage"), (2, b"")]), flow_of([(1, b"plain")]),
             flow_of([(1, handshakes["client"][1][:30])])]
    broken = flow_of([(1, handshakes["client"][0])])
    broken.samples.append(None)  # type: ignore[arg-type]

    def calls() -> None:
        for flow in flows:
            dpi.sample_facts(flow.samples, good)
        for samples, with_reader in ((broken.samples, good), (flows[0].samples, good[:6])):
            try:  # the error paths free what they took (pytest.raises keeps tracebacks alive: not used here)
                dpi.sample_facts(samples, with_reader)
            except (TypeError, AttributeError):
                pass
            else:
                raise AssertionError("a broken call was taken")

    for _ in range(100):
        calls()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            calls()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 16384, grown


def test_packets_of_a_decoded_record_read_the_same() -> None:
    """The analysis process's flows come out of the record codec: their packets must read as the tracker's."""
    from bench.pipeline_bench import corpus, finished_flows

    from appliance.flows import record_codec

    flows = [f for f in finished_flows(corpus())[:3000] if f.transport is Transport.TCP]
    decoded = record_codec.decode(record_codec.encode(flows))
    for original, copy in zip(flows, decoded):
        assert typed(FlowFacts(tls_views=False).facts(copy)) == typed(facts_reference(original)[0])
