"""Analyzer: the analysis stack (`app.build_analysis`) fed from the partition streams it leases.

- Leases: a partition is owned by one analyzer at a time (`lease:{p}`, SET NX PX, renewed every third
  of `cluster.lease_seconds`). Analyzers announce themselves with a heartbeat; each takes its share
  of the partitions (ceil(partitions / live analyzers)) and gives back what is over it, so a second
  analyzer gets half and the survivor of a crash gets everything once the dead one's leases expire.
- Taking a partition: its agents' behavioural baselines are restored from `ckpt:{p}`, then the
  entries its previous owner read and never committed are claimed (XAUTOCLAIM) and analysed first.
- Reading: XREADGROUP on the owned partitions; flow ids already in `seen:{p}` (an ingest node sent
  a batch twice) are skipped and counted; the rest are analysed in order, DNS entries feed the
  resolver cache and the DNS layers as they come.
- Committing (bus.COMMIT, one atomic script per partition and read): the analysed flow ids into the
  dedupe set, the alert events raised meanwhile out to `alerts:{p}`, XACK, and the counters, only if
  the lease is still ours. So a flow's visible effects happen once: an analyzer killed before its
  commit leaves its entries pending, and the next owner analyses them as if for the first time.
- Checkpoints: every `cluster.checkpoint_seconds`, on giving a partition back and at shutdown, the
  baselines of the partition's agents that changed go to `ckpt:{p}` (fenced by the lease too).

- Beaconing's destination prevalence (how many agents reach an address and port) is shared over
  every analyzer through Redis (`prevalence.SharedPrevalence`).

What a failover loses: the baselines' learning from flows committed after the last checkpoint, the
correlator's open detection groups and the alerts this analyzer had open (the next owner opens a new
alert for the same agent and indicator instead of updating), and the throttles.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.cluster import bus, shared_config
from appliance.cluster.prevalence import SharedPrevalence
from appliance.config import Settings
from appliance.detection import SAMPLED_PROTOCOLS
from appliance.detection.alert import Alert
from appliance.flows import record_codec
from appliance.model import FlowRecord

log = logging.getLogger(__name__)

READ_COUNT = 16  # entries per partition per read (an entry holds up to 256 flows)
BLOCK_MS = 200
CONFIG_CHECK_SECONDS = 1.0  # how often the version of the manager's shared settings is read (one GET)
BACKOFF = (0.5, 5.0)
_SAMPLED = record_codec.sample_mask(SAMPLED_PROTOCOLS)  # the samples the layers read

_ALERT_FIELDS = tuple(f.name for f in dataclasses.fields(Alert))  # shallow: json.dumps walks the rest

CHECKPOINT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return (#ARGV - 1) / 2
"""


@dataclass
class Partition:
    """What this analyzer keeps about a partition it owns."""

    number: int
    claim: bool = True  # entries left pending by someone (a dead owner, a failed commit) to claim first
    agents: set[str] = field(default_factory=set)  # agents whose baselines changed since the last checkpoint


class Analyzer:
    """One analyzer node: leases, reads, analyses, commits, checkpoints."""

    def __init__(self, settings: Settings, on_fatal: Callable[[], None] | None = None) -> None:
        from appliance.app import build_analysis, open_stores  # the composition recipe of every analysis

        self.settings = settings
        self._on_fatal = on_fatal  # called when the analyzer gives up for good
        self.cluster = settings.cluster
        self.node = self.cluster.node_id
        self.stores = open_stores(settings, batched_alerts=True)  # its own database: one commit per read
        self.parts, self.pipeline = build_analysis(settings, self.stores, tls_views=False)
        self.parts.channel.subscribe(self._on_alert)
        self.prevalence = SharedPrevalence()  # beaconing's destination prevalence over every analyzer's agents
        self.parts.behaviour.fleet = self.prevalence
        self._alerts: dict[str, tuple[str, Alert]] = {}  # alert id -> its latest event since the last commit
        self.owned: dict[int, Partition] = {}
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = BACKOFF[0]
        self._next_lease = 0.0  # monotonic time of the next lease round
        self.flows_analysed = 0
        self.duplicates_skipped = 0
        self.entries_reclaimed = 0
        self.pending_trimmed = 0  # entries a dead owner held that MAXLEN trimmed before anyone committed them
        self.commits_fenced = 0  # commits refused because the lease had moved on
        self.entries_refused = 0  # entries that did not decode
        self.partitions_taken = 0
        self.partitions_released = 0
        self.baselines_restored = 0
        self.checkpoints_written = 0
        self.config_version = 0  # the manager's shared analysis settings in use here (0: none yet)
        self.config_refused = 0  # shared settings documents refused (they keep what they had)
        self._triage_id = b"0"  # the last cluster:triage entry taken (from the start: what is left of it)
        self.triage_taken = 0  # statuses the manager's analysts set, set here too
        self.triage_refused = 0  # cluster:triage entries that were not an alert id and a status
        self._next_config_check = 0.0
        self.fatal = ""  # why the analyzer gave up (a configuration that disagrees with the cluster's)

    def _on_alert(self, event: str, alert: Alert) -> None:
        # The latest state of each alert is what the manager needs (it upserts by id): an alert updated
        # many times in one read goes out once, "opened" if it was opened in that read.
        earlier = self._alerts.get(alert.id)
        self._alerts[alert.id] = (earlier[0] if earlier is not None else event, alert)

    def _alert_events(self) -> list[str]:
        events = [json.dumps({"event": event, "alert": {name: getattr(alert, name) for name in _ALERT_FIELDS}},
                             default=str) for event, alert in self._alerts.values()]
        self._alerts.clear()
        return events

    # -- life cycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self.parts.watcher.start()
        if self.parts.exporter is not None:
            self.parts.exporter.start()
        self._thread = threading.Thread(target=self._run, name="cluster-analyzer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the read in hand, checkpoint and give back every partition, close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            if self._client is not None:
                for p in list(self.owned):
                    self._release(p)
                self._client.zrem(bus.ANALYZERS, self.node)
        except Exception:
            log.exception("cluster: could not give the partitions back (their leases expire instead)")
        self.parts.watcher.stop()
        if self.parts.exporter is not None:
            self.parts.exporter.stop()
        self.stores.db.close()

    def stats(self) -> dict[str, int]:
        return {"flows_analysed": self.flows_analysed, "duplicates_skipped": self.duplicates_skipped,
                "entries_reclaimed": self.entries_reclaimed, "pending_trimmed": self.pending_trimmed,
                "commits_fenced": self.commits_fenced, "entries_refused": self.entries_refused,
                "partitions_owned": len(self.owned), "partitions_taken": self.partitions_taken,
                "partitions_released": self.partitions_released, "baselines_restored": self.baselines_restored,
                "checkpoints_written": self.checkpoints_written, "prevalence_errors": self.prevalence.errors,
                "config_version": self.config_version, "config_refused": self.config_refused,
                "triage_taken": self.triage_taken, "triage_refused": self.triage_refused}

    # -- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        import redis

        next_checkpoint = 0.0
        while not self._stop.is_set():
            try:
                self._connect()
                now = time.monotonic()
                if now >= self._next_config_check:
                    self._sync_config()
                    self._sync_triage()
                    self._next_config_check = now + CONFIG_CHECK_SECONDS
                if now >= self._next_lease:
                    self._leases()
                if now >= next_checkpoint:
                    self._checkpoint_all()
                    next_checkpoint = now + self.cluster.checkpoint_seconds
                if not self.owned:
                    self._stop.wait(0.2)
                    continue
                for part in list(self.owned.values()):
                    if part.claim:
                        self._reclaim(part)
                self._read()
            except bus.LayoutError as err:
                log.error("cluster: %s: the analyzer stops", err)
                self.fatal = str(err)
                if self._on_fatal is not None:
                    self._on_fatal()
                return
            except (redis.RedisError, bus.ClusterError) as err:
                log.error("cluster: Redis failed under the analyzer (%s): connecting again in %.1f s", err, self._backoff)
                self._client = self.prevalence.client = None
                for part in self.owned.values():
                    part.claim = True  # what was read and not committed is still pending with us
                self._stop.wait(self._backoff)
                self._backoff = min(self._backoff * 2, BACKOFF[1])
            except Exception:
                log.exception("cluster: analyzer loop failed; going on")
                self._stop.wait(0.5)

    def _sync_config(self) -> None:
        """Take the manager's analysis settings when their version moved (shared_config)."""
        raw = self._client.get(shared_config.VERSION)
        version = int(raw) if raw is not None and raw.isdigit() else 0
        if version == self.config_version:
            return
        try:
            documents = shared_config.parse(self._client.hgetall(shared_config.CONFIG))
        except shared_config.ConfigRefused as err:
            self.config_refused += 1
            log.error("cluster: the manager's analysis settings (version %d) refused: %s; keeping version %d",
                      version, err, self.config_version)
        else:
            shared_config.apply(self.stores, *documents)
            log.info("cluster: analysis settings of the manager in use (version %d, %d exclusions)",
                     version, len(documents[2]))
        self.config_version = version  # a refused version is not read again; the next one is

    def _sync_triage(self) -> None:
        """Set on this analyzer's alerts the statuses the manager's analysts set (shared_config.TRIAGE)."""
        reply = self._client.xread({shared_config.TRIAGE: self._triage_id}, count=1000)
        for _, entries in reply or []:
            for entry_id, fields in entries:
                self._triage_id = entry_id
                try:
                    alert_id, status = shared_config.parse_triage(fields)
                except shared_config.ConfigRefused as err:
                    self.triage_refused += 1
                    log.warning("cluster: triage entry %r refused: %s", entry_id, err)
                    continue
                self.stores.alerts.take_status(alert_id, status)
                self.triage_taken += 1
        self.stores.alerts.commit()

    def _connect(self) -> Any:
        if self._client is None:
            client = bus.connect(self.cluster.redis_url)
            bus.agree_on_layout(client, self.cluster.partitions)
            bus.ensure_groups(client, self.cluster.partitions)
            self._scripts = {name: client.register_script(text) for name, text in (
                ("commit", bus.COMMIT), ("renew", bus.RENEW), ("release", bus.RELEASE), ("checkpoint", CHECKPOINT))}
            self._client = self.prevalence.client = client
            self._backoff = BACKOFF[0]
            log.info("cluster: analyzer %s connected", self.node)
        return self._client

    # -- leases ---------------------------------------------------------------------------------
    def _renew_if_due(self) -> None:
        """Renew when a round is due: called between the partitions of a long read too."""
        if time.monotonic() >= self._next_lease:
            self._renew()

    def _renew(self) -> None:
        """Heartbeat, and renew every lease held (a lease found lost is dropped at once)."""
        self._next_lease = time.monotonic() + self.cluster.lease_seconds / 3
        lease_ms = int(self.cluster.lease_seconds * 1000)
        now_ms = int(time.time() * 1000)
        self._client.zadd(bus.ANALYZERS, {self.node: now_ms + lease_ms})
        for p in list(self.owned):
            if not self._scripts["renew"](keys=[bus.lease_key(p)], args=[self.node, lease_ms]):
                log.warning("cluster: lease of partition %d lost (expired or taken)", p)
                del self.owned[p]

    def _leases(self) -> None:
        """Renew, give back what is over this analyzer's share of the live analyzers, take what is missing."""
        client = self._client
        self._renew()
        lease_ms = int(self.cluster.lease_seconds * 1000)
        client.zremrangebyscore(bus.ANALYZERS, "-inf", int(time.time() * 1000))
        live = max(int(client.zcard(bus.ANALYZERS)), 1)
        partitions = self.cluster.partitions
        share = math.ceil(partitions / live)
        for p in sorted(self.owned, reverse=True)[: max(len(self.owned) - share, 0)]:
            self._release(p)
        start = int.from_bytes(self.node.encode()[-4:].rjust(4, b"\0"), "big") % partitions  # spread the first picks
        for i in range(partitions):
            if len(self.owned) >= share:
                break
            p = (start + i) % partitions
            if p not in self.owned and client.set(bus.lease_key(p), self.node, nx=True, px=lease_ms):
                self._take(p)

    def _take(self, p: int) -> None:
        raw = self._client.hgetall(bus.checkpoint_key(p))
        for agent, blob in raw.items():
            try:
                self.parts.behaviour.restore(agent.decode(), json.loads(blob))
                self.baselines_restored += 1
            except (ValueError, TypeError, KeyError):
                log.warning("cluster: checkpoint of agent %r in partition %d unreadable: baselines start over", agent[:64], p)
        self.owned[p] = Partition(p)
        self.partitions_taken += 1
        log.info("cluster: took partition %d (%d baselines restored)", p, len(raw))

    def _release(self, p: int) -> None:
        part = self.owned.get(p)
        if part is not None:
            self._checkpoint(part)
        self._scripts["release"](keys=[bus.lease_key(p)], args=[self.node])
        self.owned.pop(p, None)
        self.partitions_released += 1
        log.info("cluster: gave partition %d back", p)

    # -- reading and committing -------------------------------------------------------------------
    def _reclaim(self, part: Partition) -> None:
        start = "0-0"
        while True:
            reply = self._client.xautoclaim(
                bus.flows_key(part.number), bus.GROUP, self.node, min_idle_time=0, start_id=start, count=READ_COUNT)
            next_start, entries = reply[0], reply[1]
            self.pending_trimmed += len(reply[2]) if len(reply) > 2 else 0  # Redis 7 names the trimmed ones
            self._renew_if_due()
            if part.number not in self.owned:
                return
            if entries:
                self.entries_reclaimed += len(entries)
                if not self._handle(part, entries):
                    return
            start = next_start.decode() if isinstance(next_start, bytes) else str(next_start)
            if start == "0-0":
                break
        part.claim = False

    def _read(self) -> None:
        streams = {bus.flows_key(p): ">" for p in self.owned}
        reply = self._client.xreadgroup(bus.GROUP, self.node, streams, count=READ_COUNT, block=BLOCK_MS)
        for name, entries in reply or []:
            key = name.decode() if isinstance(name, bytes) else name
            p = int(key[key.index("{") + 1 : key.index("}")])
            self._renew_if_due()
            part = self.owned.get(p)
            if part is not None and entries:
                self._handle(part, entries)

    def _handle(self, part: Partition, entries: list[Any]) -> bool:
        """Analyse the entries (in order) and commit them; False when the commit was fenced."""
        decoded: list[tuple[bytes, list[FlowRecord] | None, Any]] = []
        ids: list[str] = []
        for entry_id, fields in entries:
            ids.append(entry_id.decode() if isinstance(entry_id, bytes) else entry_id)
            if not fields:  # deleted under us (XAUTOCLAIM of a trimmed id): nothing to analyse
                continue
            kind, data = fields.get(b"k"), fields.get(b"d", b"")
            try:
                if kind == bus.KIND_FLOWS:
                    decoded.append((kind, record_codec.decode(data, _SAMPLED), None))
                elif kind == bus.KIND_DNS:  # read where it is used: in place, nearly always (observe_dns_batch)
                    decoded.append((kind, None, data))
                else:
                    self.entries_refused += 1
            except record_codec.RecordError:
                self.entries_refused += 1
                log.exception("cluster: entry %r of partition %d refused", ids[-1], part.number)
        flow_ids = [f.flow_id for _, flows, _ in decoded if flows for f in flows]
        seen = set()
        if flow_ids:
            scores = self._client.zmscore(bus.seen_key(part.number), flow_ids)
            seen = {fid for fid, score in zip(flow_ids, scores) if score is not None}
        analysed: list[str] = []
        duplicates = 0
        for kind, flows, dns in decoded:
            if dns is not None:
                try:
                    self.pipeline.observe_dns_batch(dns, self.parts.resolver)
                except record_codec.RecordError:
                    self.entries_refused += 1
                    log.exception("cluster: a DNS entry of partition %d refused", part.number)
                continue
            fresh = []
            for flow in flows or []:
                if flow.flow_id in seen:
                    duplicates += 1
                    continue
                seen.add(flow.flow_id)  # the same flow twice in this read counts once too
                fresh.append(flow)
                part.agents.add(flow.agent_id)
            if fresh:
                if self.parts.exporter is not None:
                    self.parts.exporter.flows(fresh)
                self.pipeline.process_all(fresh)
                analysed.extend(f.flow_id for f in fresh)
        self.stores.alerts.commit()
        self.prevalence.flush()
        alerts = self._alert_events()
        result = self._scripts["commit"](
            keys=[bus.lease_key(part.number), bus.flows_key(part.number), bus.seen_key(part.number),
                  bus.counts_key(part.number), bus.alerts_key(part.number)],
            args=[self.node, bus.GROUP, int(self.cluster.dedupe_seconds * 1000), bus.ALERTS_MAXLEN, len(ids),
                  len(analysed), duplicates, len(alerts), *ids, *analysed, *alerts])
        if int(result) < 0:
            self.commits_fenced += 1
            log.warning("cluster: partition %d moved to another analyzer before this commit: nothing committed", part.number)
            self.owned.pop(part.number, None)
            return False
        self.flows_analysed += len(analysed)
        self.duplicates_skipped += duplicates
        return True

    # -- checkpoints ------------------------------------------------------------------------------
    def _checkpoint_all(self) -> None:
        for part in list(self.owned.values()):
            self._checkpoint(part)

    def _checkpoint(self, part: Partition) -> None:
        if not part.agents:
            return
        snapshots = self.parts.behaviour.snapshot(part.agents)
        args: list[Any] = [self.node]
        for agent_id, state in snapshots.items():
            args += [agent_id, json.dumps(state, separators=(",", ":"))]
        result = self._scripts["checkpoint"](keys=[bus.lease_key(part.number), bus.checkpoint_key(part.number)], args=args)
        if int(result) >= 0:
            self.checkpoints_written += 1
            part.agents.clear()


def run_analyzer(settings: Settings) -> int:
    """`python -m appliance` with `cluster.role: analyzer`: analyse until SIGTERM or SIGINT."""
    from appliance.__main__ import wait_for_stop_signal
    from appliance.analysis.memory import reserve as reserve_memory
    from appliance.app import tune_analysis_garbage_collector

    # Before the stack is built. Analysis runs on a thread here, with a malloc arena of its own: the arena pool is
    # what serves it (Python's objects), the heap third serves the main thread only.
    reserve_memory(settings.analysis.memory_prefault_mb)
    # A fatal error ends the wait below as a signal would; the exit status then says it failed.
    analyzer = Analyzer(settings, on_fatal=lambda: os.kill(os.getpid(), signal.SIGTERM))
    analyzer.start()
    tune_analysis_garbage_collector(threading.Event())  # a daemon thread: it ends with the process
    print(f"appliance analyzer {analyzer.node} running on {settings.cluster.partitions} partitions "
          f"({settings.cluster.redis_url.split('@')[-1]})", flush=True)
    signum = wait_for_stop_signal()
    logging.getLogger("appliance").info("signal %d: analyzer shutting down", signum)
    analyzer.stop()
    log.info("cluster: analyzer stopped: %s", analyzer.stats())
    if analyzer.fatal:
        print(f"appliance analyzer: cannot run: {analyzer.fatal}", file=sys.stderr)
        return 2
    return 0
