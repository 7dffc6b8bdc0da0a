"""Seeded scenarios that drive the reference flow tracker and the trackers under test with the same
operations, comparing everything observable after every operation.

The only input the trackers do not share is the wall clock: each reads `time.monotonic()` when an
agent sends, and `sweep(now_wall)` advances an agent's event clock by `now_wall` minus that reading.
The readings differ by the time between the calls (usually microseconds, more on a loaded machine),
which the scenario measures around every call. Every event time sits on a 200 ms grid, and a sweep
is only made when no decision it, or a later eviction, takes lies within that measured uncertainty
of a boundary, which is checked on the reference's state before the sweep. An agent left without
flows by a sweep sends its next packets after its swept clock, which puts the clock back on the grid.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.flows.tracker import FlowLimits, FlowTimeouts
from appliance.generated import sensor_pb2
from appliance.ingest.convert import ConvertLimits
from appliance.flows.record_codec import AnyDns, dns_message_of
from appliance.model import TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, DnsMessage, FlowRecord
from tests.appliance import wire
from tests.appliance.native import protowire as pw
from tests.appliance.native.oracle import OracleConverter
from tests.appliance.native.reference_model import ReferenceConverter, ReferenceFlowTracker
from tests.appliance.native.streams import BAD_UTF8_NAMES, encode_batch, encode_packet, packet_fields

GRID_MS = 200
GRID_NS = GRID_MS * 1_000_000
SAFETY_NS = 2_000_000  # on top of the measured uncertainty: float rounding, int() truncation
_NS = 1_000_000_000
BASE_MS = 1_700_000_000_000

AGENTS = ["agent-a", "agent-b", "agent-c", "agent-d"]
LOCALS = ["10.0.0.5", "10.0.0.6"]
REMOTES = ["93.184.216.34", "1.1.1.1", "8.8.8.8", "203.0.113.9"]
RESOLVER = "10.0.0.1"
NAMES = ["www.example.org", "a.b.example.com", "x" * 40 + ".tunnel.example", "mail.example.net"]
PROCESSES = [(0, ""), (0, ""), (100, "curl"), (200, "naïve.exe"), (300, "p" * 300)]
FLAGS = [0, TCP_SYN, TCP_SYN | TCP_ACK, TCP_ACK, TCP_PSH | TCP_ACK, TCP_FIN | TCP_ACK, TCP_FIN,
         TCP_RST, TCP_RST | TCP_ACK, TCP_SYN | TCP_FIN]


# -- the trackers being compared ------------------------------------------------------------------
@dataclass
class Side:
    """One tracker of a scenario, what its callbacks received, and how batches reach it:
    `packets` (add_packets of the reference's raw packets), `wire` (add_wire) or `read_wire`
    (add_packets of its own converter's read_wire)."""

    name: str
    tracker: object
    feed: str
    converter: object | None = None
    expired: list[list[FlowRecord]] = field(default_factory=list)
    dns: list[tuple[str, DnsMessage]] = field(default_factory=list)
    # repr() of what the callbacks received, taken when they received it (cheaper than deepcopy).
    at_hand_off: list[str] = field(default_factory=list)

    def on_expire(self, flows: list[FlowRecord]) -> None:
        self.expired.append(list(flows))
        self.at_hand_off.append(repr(flows))

    def on_dns_responses(self, answers: list[tuple[str, AnyDns]]) -> None:
        for agent_id, message in answers:
            message = dns_message_of(message)  # the C table hands over serialized messages, the reference objects
            self.dns.append((agent_id, message))
            self.at_hand_off.append(repr(message))


def make_side(name: str, tracker_class: type, feed: str, timeouts: FlowTimeouts, limits: FlowLimits,
              converter: object | None = None) -> Side:
    side = Side(name, None, feed, converter)
    # The `wire` side's tracker parses with its converter's reader, given when it is built, as in app.build.
    built_with = {"reader": converter.wire} if feed == "wire" else {}  # type: ignore[union-attr]
    side.tracker = tracker_class(side.on_expire, timeouts, limits, side.on_dns_responses, **built_with)
    return side


def assert_same_tracking(ref: Side, side: Side, flow_ids: list[str], seen: tuple[int, int] = (0, 0)) -> None:
    """Everything a caller can observe of `side` equals the reference (callbacks from `seen` on)."""
    r, s = ref.tracker, side.tracker
    assert len(side.expired) == len(ref.expired), "the number of on_expire calls differs"
    assert side.expired[seen[0]:] == ref.expired[seen[0]:], "on_expire calls differ"
    assert side.dns[seen[1]:] == ref.dns[seen[1]:], "on_dns_responses calls differ"
    assert (s.active_flows, s.flows_created, s.flows_expired, s.flows_evicted) == (
        r.active_flows, r.flows_created, r.flows_expired, r.flows_evicted), "counters differ"
    assert s.snapshot() == r.snapshot(), "snapshot() differs"
    for limit in (0, 1, 3, 10**6):
        assert s.snapshot(limit=limit) == r.snapshot(limit=limit), f"snapshot(limit={limit}) differs"
    for agent in [*AGENTS, "", "nobody"]:
        assert s.snapshot(agent) == r.snapshot(agent), f"snapshot({agent!r}) differs"
        assert s.snapshot(agent, 2) == r.snapshot(agent, 2), f"snapshot({agent!r}, 2) differs"
    for wanted in flow_ids:
        assert s.find(wanted) == r.find(wanted), f"find({wanted!r}) differs"


def assert_nothing_changed_after_hand_off(side: Side) -> None:
    flows, messages = iter(side.expired), iter(side.dns)
    now = [repr(next(flows)) if text.startswith("[") else repr(next(messages)[1]) for text in side.at_hand_off]
    assert now == side.at_hand_off, "a flow or DNS message changed after it was handed over"


# -- sweeps the wall clock cannot make ambiguous ---------------------------------------------------
@dataclass
class Uncertainty:
    """How far an agent's state in the other trackers may be from the reference's: its wall reading
    (seconds) and, after sweeps, its event clock (ns)."""

    wall: float = 0.0
    clock_ns: int = 0


def plan_sweep(ref: ReferenceFlowTracker, now_wall: float,
               uncertain: dict[str, Uncertainty]) -> dict[str, tuple[int, int, bool]] | None:
    """What sweep(now_wall) does to each agent of the reference, as agent -> (clock after, flows
    left, swept); None when a decision lies within an agent's uncertainty of a boundary."""
    outcome: dict[str, tuple[int, int, bool]] = {}
    spread: dict[str, int] = {}
    for agent_id, agent in ref._agents.items():
        u = uncertain.get(agent_id, Uncertainty())
        quiet = now_wall - agent.wall
        if abs(quiet - 1.0) * _NS < u.wall * _NS + SAFETY_NS:
            return None
        clock, left, swept = agent.clock_ns, agent.count(), quiet >= 1.0
        spread[agent_id] = u.clock_ns + (int(u.wall * _NS) if swept else 0) + SAFETY_NS
        if swept:
            clock += int(quiet * _NS)
            left = 0
            for cls, table in agent.tables.items():
                horizon = clock - ref._idle_ns[cls]
                flows = list(table.values())
                if any(abs(f.last_ns - horizon) < spread[agent_id] for f in flows):
                    return None
                expired = 0
                while expired < len(flows) and flows[expired].last_ns <= horizon:
                    expired += 1
                left += len(flows) - expired
        outcome[agent_id] = (clock, left, swept)
    # A clock off the grid carries its uncertainty into evictions, which compare idle times across
    # agents: keep such clocks apart from the grid and from each other.
    phases = [(clock % GRID_NS, spread[a]) for a, (clock, left, _) in outcome.items() if left and clock % GRID_NS]
    for i, (phase, width) in enumerate(phases):
        if not width <= phase <= GRID_NS - width:
            return None
        for other, other_width in phases[i + 1:]:
            gap = abs(phase - other) % GRID_NS
            if min(gap, GRID_NS - gap) < width + other_width:
                return None
    return outcome


# -- the scenario -----------------------------------------------------------------------------
class FlowScenario:
    """A seeded sequence of tracker operations applied to every side, compared after each one.

    `wire=True` encodes every batch (canonically or not, sometimes with a broken packet or a
    process name that is not UTF-8) and gives the reference what the oracle reads from the bytes.
    `wide=True` spreads big batches over thousands of 5-tuples under a cap of hundreds of flows,
    for the hash table and the eviction scan rather than the corner cases. `extreme=True` takes
    limits and timeouts at their edges (one flow allowed, nothing kept, timeouts of zero).
    """

    def __init__(self, seed: int, subjects: list[tuple[str, type, str, type | None]], wire: bool = False,
                 wide: bool = False, extreme: bool = False) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.wire = wire
        self.wide = wide
        self.remotes = [f"198.51.{i // 200}.{i % 200 + 1}" for i in range(1000)] if wide else REMOTES
        self.local_ports = list(range(40000, 40040)) if wide else [40000, 40001, 5353]
        self.timeouts = FlowTimeouts(
            tcp_idle=rng.choice([3, 4, 6]), udp_idle=rng.choice([2, 3, 4]), dns_idle=rng.choice([1, 2, 3]),
            icmp_idle=rng.choice([2, 3]), other_idle=rng.choice([2, 5]), active=20, dns_active=5,
        )
        self.limits = FlowLimits(max_flows=rng.randint(200, 2000) if wide else rng.randint(5, 50),
                                 samples_per_flow=rng.randint(0, 3),
                                 sample_bytes=16, dns_per_flow=rng.randint(2, 4))
        if extreme:  # every timeout stays a multiple of the grid
            self.timeouts = FlowTimeouts(*(rng.choice([0, 0.2, 1, 2]) for _ in range(5)),
                                         active=rng.choice([0, 0.4, 20]), dns_active=rng.choice([0, 1, 5]))
            self.limits = FlowLimits(max_flows=rng.choice([1, 2, 3]), samples_per_flow=rng.choice([0, 1, 5]),
                                     sample_bytes=rng.choice([0, 1, 16]), dns_per_flow=rng.choice([1, 2]))
        self.convert_limits = ConvertLimits(max_payload_bytes=rng.choice([24, 65535]))
        self.agents = AGENTS[:rng.randint(1, 4)]
        self.time_ms = {a: BASE_MS + rng.randrange(0, 50) * GRID_MS for a in self.agents}
        self.floor_ms = {a: 0 for a in self.agents}
        self.ref_converter = (OracleConverter if wire else ReferenceConverter)(self.convert_limits)
        self.ref = make_side("reference", ReferenceFlowTracker, "packets", self.timeouts, self.limits)
        self.sides = [
            make_side(name, tracker_class, feed, self.timeouts, self.limits,
                      converter_class(self.convert_limits) if converter_class else None)
            for name, tracker_class, feed, converter_class in subjects
        ]
        self.log: list[str] = []
        self.seen = (0, 0)  # callbacks compared so far
        self.uncertain: dict[str, Uncertainty] = {}
        self.stats = {"sweeps_planned": 0, "sweeps_dropped": 0}

    # -- running ------------------------------------------------------------------------------
    def run(self, steps: int) -> None:
        for step in range(steps):
            self.step()
            self.check(step)
        self.flush_all()
        self.check(steps)
        for side in self.sides:
            assert_nothing_changed_after_hand_off(side)

    def check(self, step: int) -> None:
        ids = [f.flow_id for f in self.ref.tracker.snapshot(limit=10**6)][step % 4::4]
        ids += [f.flow_id for call in self.ref.expired[-2:] for f in call][:4] + ["0" * 20, ""]
        seen = self.seen
        self.seen = (len(self.ref.expired), len(self.ref.dns))
        for side in self.sides:
            try:
                assert_same_tracking(self.ref, side, ids, seen)
                if side.converter is not None:
                    assert (side.converter.rejected, side.converter.repaired) == (
                        self.ref_converter.rejected, self.ref_converter.repaired), "converter counters differ"
            except AssertionError as err:
                raise AssertionError(f"{side.name} != reference after step {step} of seed {self.seed}: {err}\n"
                                     f"{self.describe()}") from err

    def describe(self) -> str:
        return (f"timeouts={self.timeouts} limits={self.limits} convert={self.convert_limits}\n"
                "last operations:\n  " + "\n  ".join(self.log[-12:]))

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.66:
            self.add(self.rng.choice(self.agents))
        elif roll < 0.76:
            self.sweep()
        elif roll < 0.84:
            self.stream_opened(self.rng.choice(self.agents))
        elif roll < 0.93:
            self.stream_closed(self.rng.choice(self.agents + ["ghost"]))
        elif roll < 0.96:
            self.flush_all(self.rng.choice(["shutdown", "stream_end"]))
        else:
            self.add(self.rng.choice(self.agents), count=0)

    # -- operations ---------------------------------------------------------------------------
    def _all(self, call: Callable[[object], None]) -> float:
        """Make the call on every tracker, the reference first; returns how far apart in time."""
        start = time.monotonic()
        call(self.ref.tracker)
        for side in self.sides:
            call(side.tracker)
        return time.monotonic() - start

    def _forget_gone_agents(self) -> None:
        for agent in list(self.uncertain):
            if agent not in self.ref.tracker._agents:
                del self.uncertain[agent]

    def stream_opened(self, agent: str) -> None:
        self.log.append(f"stream_opened({agent!r})")
        known = agent in self.ref.tracker._agents
        spread = self._all(lambda t: t.stream_opened(agent))
        if not known:  # created now: its wall is this call's reading
            self.uncertain[agent] = Uncertainty(wall=spread)

    def stream_closed(self, agent: str) -> None:
        self.log.append(f"stream_closed({agent!r})")
        self._all(lambda t: t.stream_closed(agent))
        self._forget_gone_agents()

    def flush_all(self, reason: str = "shutdown") -> None:
        self.log.append(f"flush_all({reason!r})")
        self._all(lambda t: t.flush_all(reason))

    def sweep(self) -> None:
        ref = self.ref.tracker
        walls = [a.wall for a in ref._agents.values()]
        kind = self.rng.choice(["past", "short", "medium", "medium", "medium", "far"])
        plan = None
        if kind in ("short", "medium") and walls:
            self.stats["sweeps_planned"] += 1
            for _ in range(8):
                if kind == "short":  # under a second of quiet for the agent that sent last
                    now_wall = max(walls) + self.rng.uniform(0.05, 0.9)
                else:
                    now_wall = self.rng.choice(walls) + self.rng.uniform(1.05, 9.0)
                plan = plan_sweep(ref, now_wall, self.uncertain)
                if plan is not None:
                    break
            else:
                self.stats["sweeps_dropped"] += 1
        elif kind == "far":
            now_wall = max([*walls, time.monotonic()]) + 5000 + self.rng.random()
            plan = plan_sweep(ref, now_wall, self.uncertain)
            assert plan is not None, "a far sweep expires everything and cannot be ambiguous"
        if plan is None:
            now_wall, plan = min([*walls, time.monotonic()]) - 10.0, {}
        described = ", ".join(f"{a}: quiet {now_wall - ref._agents[a].wall:.3f} s" for a in plan)
        self.log.append(f"sweep({kind}; {described})")
        self._all(lambda t: t.sweep(now_wall))
        self._forget_gone_agents()
        for agent, (clock, left, swept) in plan.items():
            if swept and agent in ref._agents:  # its wall is now_wall everywhere; the uncertainty moved into the clock
                u = self.uncertain.setdefault(agent, Uncertainty())
                u.clock_ns, u.wall = u.clock_ns + int(u.wall * _NS) + 1, 0.0
            if swept and not left:
                self.floor_ms[agent] = max(self.floor_ms[agent], -(-clock // GRID_NS) * GRID_MS + GRID_MS)
                self.time_ms[agent] = max(self.time_ms[agent], self.floor_ms[agent])

    def add(self, agent: str, count: int | None = None) -> None:
        rng = self.rng
        if rng.random() < 0.12:
            self.time_ms[agent] -= rng.randint(1, 30) * GRID_MS  # event time goes back
        else:
            self.time_ms[agent] += rng.randint(0, 10) * GRID_MS
        self.time_ms[agent] = max(self.time_ms[agent], self.floor_ms[agent])
        now_ms = self.time_ms[agent]
        if count is None:
            count = rng.choice([50, 100, 300]) if self.wide else rng.choice([1, 1, 2, 3, 5, 8, 13, 20])
        messages = [self.packet(agent, now_ms) for _ in range(count)]
        now_ns = now_ms * 1_000_000
        if self.wire:
            data, batched = self.encode(messages)
            before = sum(self.ref_converter.rejected.values())
            raws = self.ref_converter.read_wire(data, batched, now_ns)
            expected_result = (len(raws), sum(self.ref_converter.rejected.values()) - before)
            self.log.append(f"add_wire({agent!r}, bytes.fromhex({data.hex()!r}), batched={batched}, now_ns={now_ns})")
        else:
            raws = self.ref_converter.read(messages, now_ns)
            self.log.append(f"add_packets({agent!r}, read({messages!r}, now_ns={now_ns}))".replace("\n", " "))
        start = time.monotonic()
        self.ref.tracker.add_packets(agent, raws)
        for side in self.sides:
            if side.feed == "packets":
                side.tracker.add_packets(agent, rng.choice([raws, tuple(raws), iter(raws), (r for r in raws)]))
            elif side.feed == "wire":
                result = side.tracker.add_wire(agent, data, batched, now_ns)
                assert result == expected_result, (
                    f"{side.name}: add_wire returned {result}, expected (accepted, rejected) {expected_result} "
                    f"(seed {self.seed})\n{self.describe()}")
            else:
                own = side.converter.read_wire(data, batched, now_ns)
                assert own == raws, f"{side.name}: read_wire differs (seed {self.seed})\n{self.describe()}"
                side.tracker.add_packets(agent, own)
        u = self.uncertain.setdefault(agent, Uncertainty())
        u.wall = time.monotonic() - start
        if self.ref.tracker._agents[agent].clock_ns % GRID_NS == 0:
            u.clock_ns = 0  # set by a packet's time, the same everywhere

    # -- packets ------------------------------------------------------------------------------
    def packet(self, agent: str, now_ms: int) -> sensor_pb2.NetworkPacket:
        rng = self.rng
        ts = max(self.floor_ms[agent], now_ms + rng.randint(-3, 3) * GRID_MS)
        if rng.random() < 0.03:
            ts = rng.choice([0, now_ms + 10**9])  # repaired to now by the converter
        local, remote = rng.choice(LOCALS), rng.choice(self.remotes)
        lport = rng.choice(self.local_ports)
        pid, process = rng.choice(PROCESSES)
        kind = rng.choice(["tcp", "tcp", "tcp", "dns_query", "dns_response", "dns_junk", "dns_server",
                           "dns_tcp", "udp", "udp", "icmp", "other", "reversed", "huge", "hostile"])
        if kind == "tcp":
            return wire.packet(local, remote, lport, rng.choice([443, 80]), 6, ts, rng.choice([1, 2]), 0,
                               rng.randbytes(rng.choice([0, 0, 3, 16, 40])), rng.choice(FLAGS), pid, process)
        if kind == "huge":  # counters past 32 bits, every flag bit, the largest pid
            return wire.packet(local, remote, lport, 443, 6, ts, rng.choice([1, 2]), 2**32 - 1, rng.randbytes(20),
                               rng.choice([2**32 - 1, 2**32 - 1 - TCP_FIN - TCP_RST]), 2**32 - 1, "big")
        if kind == "reversed":  # the same conversation seen with the ends swapped: another key, same flow id
            return wire.packet(remote, local, 443, lport, 6, ts, rng.choice([1, 2]), 0, b"", rng.choice(FLAGS), pid, process)
        if kind == "dns_query":
            query = wire.dns_query(rng.choice(NAMES), rng.choice([1, 28, 16]), ident=rng.randrange(65536))
            return _stamped(wire.udp_out(local, RESOLVER, lport, 53, query, ts), pid, process)
        if kind == "dns_response":
            return _stamped(wire.udp_in(local, RESOLVER, lport, 53, _dns_response(rng), ts), pid, process)
        if kind == "dns_junk":
            junk = rng.choice([rng.randbytes(rng.randint(1, 30)), wire.dns_query("x.example")[:-3],
                               b"\x12\x34\x81\x80\x00\x01\x00\x01" + b"\xc0\x0c" * 8])
            if rng.random() < 0.5:
                return wire.udp_in(local, RESOLVER, lport, 53, junk, ts)
            return wire.packet(local, RESOLVER, lport, 53, 17, ts, 1, 0, junk)  # outbound, maybe shorter than its header
        if kind == "dns_server":  # the agent is the resolver: port 53 is the local one
            return wire.udp_in(local, remote, 53, lport, wire.dns_query(rng.choice(NAMES)), ts)
        if kind == "dns_tcp":
            message = rng.choice([wire.dns_query(rng.choice(NAMES)), _dns_response(rng)])
            payload = rng.choice([struct.pack("!H", len(message)) + message, message[:5], b""])
            return wire.packet(local, RESOLVER, lport, 53, 6, ts, rng.choice([1, 2]), 0, payload, rng.choice(FLAGS), pid, process)
        if kind == "udp":
            data = rng.randbytes(rng.choice([0, 5, 20, 40]))
            if rng.random() < 0.5:
                return _stamped(wire.udp_out(local, remote, lport, 9999, data, ts), pid, process)
            return wire.udp_in(local, remote, lport, 9999, data, ts)
        if kind == "icmp":
            payload = rng.choice([b"", rng.randbytes(rng.randint(1, 3)), bytes([8, 0, 0, 0, 0, 1, 0, 7]) + b"ping" * 5])
            return wire.packet(local, remote, 0, 0, 1, ts, rng.choice([1, 2]), 0, payload, 0, pid, process)
        if kind == "other":
            return wire.packet(local, remote, 7, 9, rng.choice([47, 0, 132, 255]), ts, rng.choice([1, 2]), 0,
                               rng.randbytes(rng.choice([0, 10, 30])), rng.choice([0, TCP_FIN, TCP_RST]), pid, process)
        return rng.choice([  # rejected by the converter
            wire.packet(local="0.0.0.0", ts_ms=ts), wire.packet(direction=0, ts_ms=ts),
            wire.packet(protocol=300, ts_ms=ts), wire.packet(rport=70000, ts_ms=ts),
        ])

    def encode(self, messages: list[sensor_pb2.NetworkPacket]) -> tuple[bytes, bool]:
        """The bytes of one add_wire call: a batch, or one packet alone."""
        rng = self.rng
        bodies = []
        for message in messages:
            roll = rng.random()
            if roll < 0.5:
                bodies.append(message.SerializeToString())
                continue
            fields = packet_fields(message)
            if roll < 0.6:
                fields["process_name"] = rng.choice(BAD_UTF8_NAMES)
            body = encode_packet(rng, fields)
            if roll > 0.95 and body:
                body = body[:rng.randrange(len(body))] + rng.choice([b"\x80", pw.tag(9, pw.LEN) + b"\x7f", b"\x00"])
            bodies.append(body)
        if len(bodies) == 1 and rng.random() < 0.5:
            return bodies[0], False
        if rng.random() < 0.5:
            return b"".join(pw.field_bytes(1, body) for body in bodies), True
        return encode_batch(rng, bodies), True


def _stamped(pb: sensor_pb2.NetworkPacket, pid: int, process: str) -> sensor_pb2.NetworkPacket:
    pb.pid, pb.process_name = pid, process
    return pb


def _dns_response(rng: random.Random) -> bytes:
    name = rng.choice(NAMES)
    answers = rng.choice([
        [(1, bytes([1, 2, 3, 4]))],
        [(1, bytes([9, 9, 9, 9])), (28, bytes(range(16)))],
        [(5, wire.dns_name("cdn.example.net")), (16, b"\x05hello")],
        [],
    ])
    return wire.dns_response(name, answers, qtype=rng.choice([1, 28]), ident=rng.randrange(65536),
                             rcode=rng.choice([0, 0, 3]), ttl=rng.choice([0, 300]))
