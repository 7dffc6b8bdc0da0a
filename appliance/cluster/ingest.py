"""RedisSink: an ingest node's analysis sink; ended flows go to the partition streams on Redis.

The same face as `AnalysisProcess` (the composition root hands flows to either). Ended flows go into
the bounded, per-agent-fair queue (`FairQueue`) and a sender thread takes rounds of it, groups them by
partition (keyed hash of the agent id) and appends one FlowRecordBatch per partition with the APPEND
script (bus.py), which bounds the stream at `cluster.stream_maxlen` and counts what it trims unread.
DNS answers and resolver events go ahead of the flows, as DnsBatch entries of the agent's partition.

Nothing here ever blocks a gRPC stream: producers only touch the queue. When Redis is unreachable the
sender drops what it holds (counted, per agent too), waits with backoff and connects again; the queue
meanwhile holds its bound and drops what does not fit, counted as always. A batch whose reply was
lost when a live connection broke is sent once more at once: the analyzers' dedupe by flow id makes
a double append harmless, while a lost batch would not be.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from appliance.analysis.fair_queue import QueuedHandOff
from appliance.cluster import bus
from appliance.config import Settings
from appliance.flows import record_codec
from appliance.model import FlowRecord

log = logging.getLogger(__name__)

BATCH_FLOWS = 256  # flows taken from the queue per round (split by partition into entries)
BACKOFF = (0.5, 5.0)  # first and longest wait before connecting again after Redis went away
COUNTS_EVERY = 2.0  # seconds between reads of the partitions' counters (trimmed flows) while idle


class RedisSink(QueuedHandOff):
    """Flows, DNS answers and resolver events to the partition streams; counted when Redis is away."""

    mode = "ingest"

    def __init__(self, settings: Settings, queue_size: int, on_drop: Callable[[str, int], None] | None = None,
                 batch_flows: int = BATCH_FLOWS) -> None:
        super().__init__(queue_size, on_drop)
        self._cluster = settings.cluster
        self._on_drop = on_drop
        self._batch = batch_flows
        self._client: Any = None
        self._append: Any = None
        self._partition: bus.PartitionMap | None = None
        self._retry_at = 0.0
        self._backoff = BACKOFF[0]
        self._closing = False
        self._thread: threading.Thread | None = None
        self._counts_at = 0.0
        self.counts: dict[str, int] = {}  # the partitions' counters as last read
        self.flows_appended = 0
        self.entries_appended = 0
        self.flows_dropped_redis = 0  # flows Redis never took (unreachable, or refused the layout)
        self.dropped_redis_by_agent: Counter[str] = Counter()
        self.resends = 0  # batches sent again after a connection broke under them
        self.reconnects = 0

    # -- producers (the tracker, the gRPC streams: never block) ------------------------------------
    def reload(self) -> None:
        """Nothing to reload here: the analyzers read their own analysis config."""

    # -- what the metrics read ----------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return self._queue.depth

    @property
    def flows_dropped(self) -> int:
        return self._queue.dropped + self.flows_dropped_redis

    @property
    def dropped_by_agent(self) -> dict[str, int]:
        return dict(self._queue.dropped_by_agent + self.dropped_redis_by_agent)

    def counter(self, name: str) -> int:
        return 0  # analysis happens on the analyzers; their figures are in Redis (counts:{p})

    def export_stats(self) -> dict[str, Any]:
        return {}

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, "running": self._client is not None, "pid": 0, "restarts": 0, "flows_lost": 0,
                "dns_dropped": self.dns_dropped, "flows_not_analysed": 0,
                "cluster": {"flows_appended": self.flows_appended, "entries_appended": self.entries_appended,
                            "flows_dropped_redis": self.flows_dropped_redis, "resends": self.resends,
                            "reconnects": self.reconnects, "redis_connected": int(self._client is not None),
                            "flows_trimmed_unread": self.counts.get("trimmed", 0),
                            "flows_analysed": self.counts.get("analysed", 0),
                            "duplicates_skipped": self.counts.get("duplicates", 0)}}

    # -- life cycle -----------------------------------------------------------------------------
    def spawn(self) -> None:
        """Nothing to start before gRPC: no child process."""

    def start(self) -> None:
        self._closing = False
        self._queue.reopen()
        self._thread = threading.Thread(target=self._send_loop, name="cluster-send", daemon=True)
        self._thread.start()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every flow handed over so far is in Redis (or dropped and counted)."""
        deadline = time.monotonic() + timeout
        if not self._queue.wait_idle(timeout):
            return False
        with self._queue.cond:
            return self._queue.cond.wait_for(lambda: not self._dns and self._queue.idle, max(deadline - time.monotonic(), 0))

    def stop(self) -> None:
        with self._queue.cond:
            self._closing = True
            self._queue.cond.notify_all()
        self._queue.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- the sender ---------------------------------------------------------------------------------
    def _next_work(self) -> tuple[str, Any] | None:
        cond = self._queue.cond
        with cond:
            while True:
                if self._dns:
                    items = list(self._dns)
                    self._dns.clear()
                    return "dns", items
                flows = self._queue.take_round(self._batch, timeout=0)
                if flows:
                    return "flows", flows
                if self._closing:
                    return None
                if time.monotonic() - self._counts_at >= COUNTS_EVERY:
                    return "counts", None
                cond.wait(0.5)

    def _send_loop(self) -> None:
        while True:
            work = self._next_work()
            if work is None:
                return
            kind, items = work
            try:
                if kind == "counts":
                    self._read_counts()
                else:
                    self._deliver(bus.KIND_DNS if kind == "dns" else bus.KIND_FLOWS, items)
            except Exception:  # never let the sender die: count, log, go on
                log.exception("cluster sender failed on %s", kind)
                if kind == "flows":
                    self._count_dropped(items)
            finally:
                if kind == "flows":
                    self._queue.done(len(items))

    def _connected(self) -> Any:
        """The client, connecting (and agreeing on the layout) when there is none; raises when Redis is away."""
        if self._client is not None:
            return self._client
        if time.monotonic() < self._retry_at:
            raise bus.ClusterError("Redis unreachable (waiting before the next attempt)")
        client = bus.connect(self._cluster.redis_url)
        try:
            key = bus.agree_on_layout(client, self._cluster.partitions)
            bus.ensure_groups(client, self._cluster.partitions)
        except Exception:
            client.close()
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF[1])
            raise
        self._partition = bus.PartitionMap(key, self._cluster.partitions)
        self._append = client.register_script(bus.APPEND)
        self._client = client
        self._backoff = BACKOFF[0]
        self.reconnects += 1
        log.info("cluster: connected to Redis (%d partitions)", self._cluster.partitions)
        return client

    def _deliver(self, kind: bytes, items: list[Any]) -> None:
        import redis

        for attempt in (1, 2):
            try:
                client = self._connected()
            except (redis.RedisError, bus.ClusterError) as err:
                self._lost(kind, items, err)
                return
            entries = self._entries(kind, items)
            try:
                pipe = client.pipeline(transaction=False)
                for p, payload, n in entries:
                    self._append(keys=[bus.flows_key(p), bus.counts_key(p)],
                                 args=[self._cluster.stream_maxlen, bus.GROUP, kind, payload, n], client=pipe)
                pipe.execute()
            except redis.RedisError as err:
                self._drop_client()
                if attempt == 1 and isinstance(err, (redis.ConnectionError, redis.TimeoutError)):
                    self.resends += 1
                    continue  # the connection broke under this batch: once more on a new one
                self._lost(kind, items, err)
                return
            if kind == bus.KIND_FLOWS:
                self.flows_appended += len(items)
            self.entries_appended += len(entries)
            return

    def _entries(self, kind: bytes, items: list[Any]) -> list[tuple[int, bytes, int]]:
        """One (partition, payload, flows) entry per partition of the items."""
        assert self._partition is not None
        by_partition: dict[int, list[Any]] = {}
        if kind == bus.KIND_DNS:
            for item in items:
                by_partition.setdefault(self._partition(item[0]), []).append(item)
            return [(p, record_codec.encode_dns(group), 0) for p, group in by_partition.items()]
        for flow in items:
            by_partition.setdefault(self._partition(flow.agent_id), []).append(flow)
        return [(p, record_codec.encode(group), len(group)) for p, group in by_partition.items()]

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _lost(self, kind: bytes, items: list[Any], err: Exception) -> None:
        if self._client is None and self._retry_at <= time.monotonic():
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF[1])
        if kind == bus.KIND_DNS:
            if not self.dns_dropped:
                log.error("cluster: Redis unreachable (%s): DNS answers and flows are dropped and counted", err)
            self.dns_dropped += len(items)
            return
        if not self.flows_dropped_redis:
            log.error("cluster: Redis unreachable (%s): flows are dropped and counted until it is back", err)
        self._count_dropped(items)

    def _count_dropped(self, flows: list[FlowRecord]) -> None:
        by_agent = Counter(f.agent_id for f in flows)
        self.flows_dropped_redis += len(flows)
        self.dropped_redis_by_agent.update(by_agent)
        if self._on_drop is not None:
            for agent_id, count in by_agent.items():
                self._on_drop(agent_id, count)

    def _read_counts(self) -> None:
        import redis

        self._counts_at = time.monotonic()
        try:
            client = self._connected()
            self.counts = bus.partition_counts(client, self._cluster.partitions)
        except (redis.RedisError, bus.ClusterError):
            self._drop_client()
