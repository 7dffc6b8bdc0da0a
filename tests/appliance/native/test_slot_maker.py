"""SlotMaker (appliance/native/slot_maker.h, in both fastpath and dpi): objects equal to the class's own, and the
classes it refuses."""

import dataclasses
import gc
import sys
from dataclasses import dataclass, field

import pytest

from appliance import native
from appliance.model import DnsAnswer, DnsMessage, FlowRecord, IcmpInfo, Packet, Transport
from appliance.native import dpi
from appliance.native.fastpath import SlotMaker


def slot_maker(cls: type, given: int | None = None, kind: type = SlotMaker) -> object:
    return native.slot_maker(kind, cls, given)


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _record_args() -> tuple:
    dns = [DnsMessage(7, True, 0, "example.org", 1, 1, [DnsAnswer("example.org", 1, 60, "192.0.2.1")])]
    sample = Packet(5, 1, 6, Transport.TCP, 1, 2, 3, 4, 100, b"\x16\x03", 0x18, 4242, "curl", None, None)
    return ("f-1", "agent", 6, Transport.TCP, 1, 40000, 2, 443, 10, 20, 3, 4, 500, 600, 400, 500, 0x1B, 4242,
            "curl", "idle", dns, [sample])


@pytest.mark.parametrize("kind", [SlotMaker, dpi.SlotMaker])
@pytest.mark.parametrize(("cls", "args"), [
    (Packet, (1, 2, 6, Transport.TCP, 5, 6, 7, 8, 9, b"payload", 0x18, 77, "proc", None, IcmpInfo(8, 0, b"x"))),
    (DnsMessage, (1, True, 3, "a.example", 16, 1, [DnsAnswer("a.example", 16, 30, "text")], False, 123)),
    (DnsAnswer, ("n", 1, 2, "d")),
    (IcmpInfo, (8, 0, b"data")),
])
def test_made_objects_equal_the_class_own(kind, cls, args):
    made = slot_maker(cls, kind=kind)(*args)
    assert type(made) is cls
    assert made == cls(*args)
    assert repr(made) == repr(cls(*args))


def test_a_record_gets_its_defaults_and_fresh_lists_are_not_shared():
    make = slot_maker(FlowRecord, _names(FlowRecord).index("samples") + 1)
    args = _record_args()
    made = make(*args)
    assert made == FlowRecord(*args)
    assert made.tls is None and made.kept_wire == b""
    made.tls = {"ja4": "x"}  # the slots are ordinary writable slots
    assert make(*args).tls is None
    assert made.remote_addr == "0.0.0.2"  # the base class's properties still apply


def test_wrong_argument_counts_and_keywords_are_refused():
    make = slot_maker(IcmpInfo)
    with pytest.raises(TypeError, match="exactly 3"):
        make(1, 2)
    with pytest.raises(TypeError, match="exactly 3"):
        make(1, 2, b"", 4)
    with pytest.raises(TypeError):
        make(1, 2, data=b"")


def test_references_are_counted():
    payload = b"some bytes that are not interned" * 3
    before = sys.getrefcount(payload)
    made = [slot_maker(IcmpInfo)(8, 0, payload) for _ in range(100)]
    assert sys.getrefcount(payload) == before + 100
    del made
    gc.collect()
    assert sys.getrefcount(payload) == before


def test_made_objects_are_collected_in_cycles():
    @dataclass(slots=True)
    class Node:
        other: object

    make = slot_maker(Node)
    a = make(None)
    a.other = a
    assert gc.is_tracked(a)
    del a
    assert gc.collect() >= 1  # the cycle is found: the maker's objects are tracked like the class's own


def test_classes_a_maker_cannot_build_exactly_are_refused():
    @dataclass
    class NoSlots:
        a: int

    @dataclass(slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            self.a += 1

    @dataclass(slots=True)
    class Factory:
        a: int
        items: list = field(default_factory=list)

    class OwnInit:
        __slots__ = ("a",)

        def __init__(self, a: int) -> None:
            self.a = a * 2

    with pytest.raises(TypeError, match="not a dataclass"):
        slot_maker(NoSlots)
    with pytest.raises(TypeError, match="__post_init__"):
        slot_maker(PostInit)
    with pytest.raises(TypeError, match="default_factory"):
        slot_maker(Factory, 1)
    with pytest.raises(TypeError, match="not a dataclass"):
        slot_maker(OwnInit)
    # And the C checks on their own, whatever Python asserted before.
    with pytest.raises(ValueError, match="object slots"):
        SlotMaker(IcmpInfo, ("type", "code"))  # a slot left out would stay empty
    with pytest.raises(ValueError, match="not a writable object slot"):
        SlotMaker(IcmpInfo, ("type", "code", "nope"))
    with pytest.raises(ValueError, match="named twice"):
        SlotMaker(IcmpInfo, ("type", "type", "data"))
    with pytest.raises(TypeError, match="immutable"):
        SlotMaker(IcmpInfo, ("type", "code", "data"), ([],))
    with pytest.raises(TypeError, match="instance dict"):
        SlotMaker(NoSlots, ("a",))


@pytest.mark.parametrize("kind", [SlotMaker, dpi.SlotMaker])
def test_a_class_with_more_than_its_slots_is_made_zeroed_by_its_allocator(kind):
    """The maker allocates unzeroed only when the slots are the whole instance; a weakref slot is not one of them
    and must start empty (a garbage pointer there would crash weakref.ref or the deallocator)."""
    import weakref

    @dataclass(slots=True, weakref_slot=True)
    class Referable:
        a: int
        b: str

    made = [slot_maker(Referable, kind=kind)(i, "b") for i in range(50)]
    refs = [weakref.ref(m) for m in made]
    assert made[7] == Referable(7, "b") and gc.is_tracked(made[7]) and refs[7]() is made[7]
    del made
    gc.collect()
    assert all(r() is None for r in refs)
