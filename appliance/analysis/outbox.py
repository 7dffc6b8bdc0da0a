"""OutboxHandOff: the producer side of the hand-off to the analysis process, kept in C.

Ended flows and DNS items wait in `appliance.native.fastpath.Outbox` (appliance/native/outbox.h) under the
same bound and fairness rules as `FairQueue` (which the thread mode and the cluster's Redis sink keep), and
the sending thread writes them to the channel from C without the interpreter lock. This class is what the
tracker and the gRPC handlers call (never blocking) and what the metrics read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from appliance.analysis.fair_queue import DNS_PENDING_MAX
from appliance.flows import record_codec
from appliance.flows.record_codec import AnyDns, EndedFlow
from appliance.model import DnsMessage
from appliance.native.fastpath import Outbox


class OutboxHandOff:
    """Flows and DNS items into the C outbox; drops counted in total, per agent and to `on_drop`."""

    def __init__(self, queue_size: int, on_drop: Callable[[str, int], None] | None, batch: int, gather: float) -> None:
        self._outbox = Outbox(queue_size, batch, DNS_PENDING_MAX, gather)
        self._on_drop = on_drop
        self.dropped_by_agent: Counter[str] = Counter()

    def submit_many(self, flows: list[EndedFlow]) -> None:
        try:  # WireFlows (the C table wrote them all): taken as they are
            dropped = self._outbox.put(flows)
        except TypeError:  # a FlowRecord among them (one Python held: ICMP), encoded here
            dropped = self._outbox.put(list(zip([f.agent_id for f in flows], record_codec.entries(flows))))
        if dropped:
            self.dropped_by_agent.update(dropped)
            if self._on_drop is not None:
                for agent_id, count in dropped.items():
                    self._on_drop(agent_id, count)

    def send_now(self) -> None:
        """Send what waits without gathering (an agent's stream ended: its flows were just flushed, and nothing of
        that agent follows them to fill a batch). The gathering exists for the steady trickle of ended flows."""
        self._outbox.poke(flush=True)

    def observe_answers(self, answers: list[tuple[str, AnyDns]]) -> None:
        """A batch's DNS answers (what the resolver cache learns from), ahead of the flows that follow them."""
        try:  # serialized by the C table (all but ICMP's): taken as they are
            self._outbox.put_dns(answers)
        except TypeError:
            dns_bytes = record_codec.dns_bytes
            self._outbox.put_dns([(agent_id, dns_bytes(message)) for agent_id, message in answers])

    def observe_dns(self, agent_id: str, message: DnsMessage) -> None:
        """A resolver event an agent reported."""
        self._outbox.put_dns([(agent_id, record_codec.dns_bytes(message), True)])

    @property
    def queue_depth(self) -> int:
        return self._outbox.depth

    @property
    def oldest_wait_s(self) -> float:
        """Seconds the oldest flow waiting here has waited: how far behind the analysis process is."""
        return self._outbox.oldest_wait

    @property
    def flows_dropped(self) -> int:
        return self._outbox.dropped

    @property
    def dns_dropped(self) -> int:
        return self._outbox.dns_dropped
