"""ResolverCache.observe as it was before observe_many (one message per call, a new Resolution per address),
and ResolverCache.lookup as it was in Python: the reference tests/appliance/detection/test_resolutions.py and
tests/appliance/native/test_resolver_cache.py hold the cache (observe_many and lookup in C, resolver_cache.h)
equal to."""

from __future__ import annotations

import bisect

from appliance.detection.resolutions import _A, _AAAA, _CNAME, _MAX_TIMES, Resolution, ResolverCache, _thin
from appliance.model import DnsMessage, ip_str


class ResolverCacheReference(ResolverCache):
    def observe(self, agent_id: str, message: DnsMessage) -> None:
        if not message.is_response or not message.answers or not message.qname:
            return
        names = [message.qname]
        addresses: list[tuple[str, int]] = []
        for answer in message.answers:
            if answer.rtype == _CNAME and answer.data not in names:
                names.append(answer.data)
            elif answer.rtype in (_A, _AAAA):
                addresses.append((answer.data, answer.ttl))
        if not addresses:
            return
        ts = message.timestamp_ns
        chain = tuple(names)
        with self._lock:
            self.responses_seen += 1
            by_ip = self._by_ip.setdefault(agent_id, {})
            by_name = self._by_name.setdefault(agent_id, {})
            for address, ttl in addresses:
                old = by_ip.pop(address, None)  # re-insert to keep insertion order = recency
                times = old.times if old is not None else []
                if not times or abs(ts - times[-1]) > 1_000_000_000:
                    bisect.insort(times, ts)
                    if len(times) > _MAX_TIMES:
                        _thin(times)
                by_ip[address] = Resolution(message.qname, chain, max(ts, old.seen_ns if old else ts), ttl, times)
            for name in chain:
                first = by_name.pop(name, ts)  # name -> first time seen (bounded by recency of use)
                by_name[name] = min(first, ts)
            while len(by_ip) > self._max:
                del by_ip[next(iter(by_ip))]
            while len(by_name) > self._max:
                del by_name[next(iter(by_name))]

    def lookup(self, agent_id: str, address: str | int, at_ns: int, window_s: float,
               slack_s: float = 2.0) -> Resolution | None:
        if isinstance(address, int):  # as the TLS detector rendered the flow's address before asking
            address = ip_str(address)
        by_ip = self._by_ip.get(agent_id)
        hit = by_ip.get(address) if by_ip is not None else None
        if hit is None:
            return None
        times = hit.times
        i = bisect.bisect_right(times, at_ns + int(slack_s * 1e9))
        if i == 0:
            return None
        age_s = (at_ns - times[i - 1]) / 1e9
        return hit if age_s <= window_s or age_s <= hit.ttl_s else None

    def lookup_function(self):  # type: ignore[no-untyped-def]
        return self.lookup
