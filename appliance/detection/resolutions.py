"""ResolverCache: which addresses each agent resolved, from DNS responses in packets and resolver events.

Fed from the ingest threads (DNS responses as packets arrive, before their flow has ended) and
from StreamDnsEvents, read by the TLS detector on the analysis thread. Bounded per agent.
"""

from __future__ import annotations

import bisect
import ipaddress
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from appliance.model import DnsMessage

_A = 1
_AAAA = 28
_CNAME = 5
_MAX_TIMES = 64
_bisect_right = bisect.bisect_right


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

    def observe_many(self, items: Iterable[tuple[str, DnsMessage]]) -> None:
        """Learn from DNS responses in the order they came: a name answered with addresses (the others teach
        nothing). Called for every answer the agents' resolvers returned, so lean: one lock per call, and a
        known address's Resolution updated in place (readers use what `lookup` returned at once)."""
        with self._lock:
            for agent_id, message in items:
                if not message.is_response or not message.answers or not message.qname:
                    continue
                qname = message.qname
                names = [qname]
                addresses: list[tuple[str, int]] = []
                for answer in message.answers:
                    rtype = answer.rtype
                    if rtype == _CNAME:
                        if answer.data not in names:
                            names.append(answer.data)
                    elif rtype == _A or rtype == _AAAA:
                        addresses.append((answer.data, answer.ttl))
                if not addresses:
                    continue
                ts = message.timestamp_ns
                chain = tuple(names)
                self.responses_seen += 1
                by_ip = self._by_ip.get(agent_id)
                if by_ip is None:
                    by_ip = self._by_ip[agent_id] = {}
                by_name = self._by_name.get(agent_id)
                if by_name is None:
                    by_name = self._by_name[agent_id] = {}
                for address, ttl in addresses:
                    old = by_ip.pop(address, None)  # re-insert to keep insertion order = recency
                    if old is None:
                        by_ip[address] = Resolution(qname, chain, ts, ttl, [ts])
                        continue
                    times = old.times
                    if abs(ts - times[-1]) > 1_000_000_000:
                        bisect.insort(times, ts)
                        if len(times) > _MAX_TIMES:
                            _thin(times)
                    old.name, old.names, old.ttl_s = qname, chain, ttl
                    if ts > old.seen_ns:
                        old.seen_ns = ts
                    by_ip[address] = old
                for name in chain:
                    first = by_name.pop(name, ts)  # name -> first time seen (bounded by recency of use)
                    by_name[name] = first if first < ts else ts
                while len(by_ip) > self._max:
                    del by_ip[next(iter(by_ip))]
                while len(by_name) > self._max:
                    del by_name[next(iter(by_name))]

    def lookup(self, agent_id: str, address: str, at_ns: int, window_s: float, slack_s: float = 2.0) -> Resolution | None:
        """The resolution of `address` by this agent valid at `at_ns` (seen before it, within window or TTL)."""
        by_ip = self._by_ip.get(agent_id)  # no empty dict made per call: the TLS detector asks for every flow
        hit = by_ip.get(address) if by_ip is not None else None
        if hit is None:
            return None
        times = hit.times
        i = _bisect_right(times, at_ns + int(slack_s * 1e9))
        if i == 0:
            return None
        age_s = (at_ns - times[i - 1]) / 1e9
        return hit if age_s <= window_s or age_s <= hit.ttl_s else None

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
