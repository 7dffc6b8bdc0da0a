"""ResolverCache: which addresses each agent resolved, from DNS responses in packets and resolver events.

Fed from the ingest threads (DNS responses as packets arrive, before their flow has ended) and
from StreamDnsEvents, read by the TLS detector on the analysis thread. Bounded per agent.
"""

from __future__ import annotations

import functools
import ipaddress
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from appliance import native
from appliance.model import DnsMessage
from appliance.native import dpi as native_dpi

_A = 1
_AAAA = 28
_CNAME = 5
_MAX_TIMES = 64  # resolver_cache.h's RC_MAX_TIMES
_observe = native_dpi.resolver_observe
_observe_batch = native_dpi.resolver_observe_batch
_lookup = native_dpi.resolver_lookup


@dataclass(slots=True)
class Resolution:
    name: str  # the question name that produced the address
    names: tuple[str, ...]  # question and CNAME chain names
    seen_ns: int  # the latest time it was seen
    ttl_s: int
    times: list[int]  # when it was seen (sorted, bounded): analysis runs behind ingestion


def _thin(times: list[int]) -> None:
    """Drops the interior time whose neighbours are closest together: it adds the least coverage.

    Dropping the oldest instead would lose the start of a name resolved every minute once 64 newer
    resolutions are in, while analysis (behind ingestion) may still have to look back that far.
    """
    i = min(range(1, len(times) - 1), key=lambda k: times[k + 1] - times[k - 1])
    del times[i]


_RESOLUTION_MAKER = native.slot_maker(native_dpi.SlotMaker, Resolution)  # how the C makes and updates them


class ResolverCache:
    """Per agent: address -> latest resolution, and name -> latest resolution time."""

    def __init__(self, max_per_agent: int = 50_000) -> None:
        self._by_ip: dict[str, dict[str, Resolution]] = {}
        self._by_name: dict[str, dict[str, int]] = {}
        self._max = max_per_agent
        self._lock = threading.Lock()
        self.responses_seen = 0

    def observe(self, agent_id: str, message: DnsMessage) -> None:
        self.observe_many([(agent_id, message)])

    def observe_many(self, items: Iterable[tuple[Any, ...]]) -> None:
        """Learn from DNS responses in the order they came: a name answered with addresses (the others teach
        nothing). Items are tuples whose first two fields are (agent_id, DnsMessage) (a DNS batch's items as
        record_codec.decode_dns gives them will do). Called for every answer the agents' resolvers returned,
        so in C (native resolver_cache.h, the twin of tests' resolutions_reference.py): one lock per call, and
        a known address's Resolution updated in place (readers use what `lookup` returned at once)."""
        with self._lock:
            self.responses_seen += _observe(items, self._by_ip, self._by_name, self._max, _RESOLUTION_MAKER, _thin)

    def observe_batch(self, data: bytes) -> bool:
        """`observe_many(record_codec.decode_dns(data))` for a serialized DnsBatch of answers, read in place (native
        resolver_batch.h): True when done; False, with nothing observed, when the batch is not plain (a resolver
        event among its items, a string that is not ASCII, encoding upb would read some other way or refuse), which
        the caller then reads into objects."""
        with self._lock:
            learned = _observe_batch(data, self._by_ip, self._by_name, self._max, _RESOLUTION_MAKER, _thin)
            if learned is None:
                return False
            self.responses_seen += learned
            return True

    def lookup(self, agent_id: str, address: str | int, at_ns: int, window_s: float,
               slack_s: float = 2.0) -> Resolution | None:
        """The resolution of `address` by this agent valid at `at_ns` (seen before it, within window or TTL):
        the latest time seen up to `slack_s` after `at_ns` is at most max(window_s, its TTL) old. `address`: a
        str, or an IPv4 address as an int (FlowRecord.remote_ip: model.ip_str's text is looked up). In C (the
        TLS detector asks for every TCP flow)."""
        return _lookup(self._by_ip, _RESOLUTION_MAKER, agent_id, address, at_ns, window_s, slack_s)

    def lookup_function(self) -> Callable[..., Resolution | None]:
        """`lookup` as one C call with no Python frame, for a caller that asks for every flow (the TLS detector):
        (agent_id, address, at_ns, window_s[, slack_s])."""
        return functools.partial(_lookup, self._by_ip, _RESOLUTION_MAKER)

    def name_resolved(self, agent_id: str, name: str, at_ns: int, window_s: float, slack_s: float = 2.0) -> bool:
        first = self._by_name.get(agent_id, {}).get(name)
        return first is not None and (first - at_ns) / 1e9 <= slack_s


@lru_cache(maxsize=65536)
def is_private(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
