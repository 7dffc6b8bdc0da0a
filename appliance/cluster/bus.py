"""The Redis layout of the cluster and the scripts that keep it consistent.

Every key of partition `p` carries the hash tag `{p}` (`flows:{3}`, `counts:{3}`, `lease:{3}`,
`seen:{3}`, `ckpt:{3}`, `alerts:{3}`), so on Redis Cluster a partition lives in one slot and the
scripts below, which touch several of its keys at once, stay legal there.

- `flows:{p}`: the partition's stream. An entry is `k` (F: a FlowRecordBatch, D: a DnsBatch), `d`
  (the bytes, proto/flow_record.proto) and `n` (flows in it). One consumer group, `analyzers`.
- `counts:{p}`: what happened to the partition's flows (added, trimmed unread, analysed, duplicates
  skipped, per analyzer too), written by the same scripts that move the flows, so they add up.
- `lease:{p}`: the analyzer that owns the partition (SET NX PX, renewed; expires when it dies).
- `seen:{p}`: flow ids analysed lately (sorted set scored by commit time, kept `dedupe_seconds`).
- `ckpt:{p}`: the behavioural baselines of the partition's agents (one JSON value per agent).
- `alerts:{p}`: alert events (opened/updated) of the partition's agents, for the manager.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from appliance.errors import ApplianceError

GROUP = "analyzers"  # the consumer group of every partition stream
MANAGER_GROUP = "manager"  # the consumer group of every alert stream
PARTITION_KEY = "cluster:partition_key"  # the secret of the keyed partition hash (created once)
PARTITIONS = "cluster:partitions"  # the partition count every node must agree on
ANALYZERS = "cluster:analyzers"  # live analyzers: node id scored by the time its heartbeat runs out
ALERTS_MAXLEN = 100_000  # alert events kept per partition (the manager reads them within seconds)
KIND_FLOWS = b"F"
KIND_DNS = b"D"


class ClusterError(ApplianceError):
    """The cluster cannot do its job (Redis unreachable, nodes that disagree on the layout)."""


class LayoutError(ClusterError):
    """This node's `cluster.partitions` is not the one Redis records: a configuration error, not an outage."""


def flows_key(p: int) -> str:
    return f"flows:{{{p}}}"


def counts_key(p: int) -> str:
    return f"counts:{{{p}}}"


def lease_key(p: int) -> str:
    return f"lease:{{{p}}}"


def seen_key(p: int) -> str:
    return f"seen:{{{p}}}"


def checkpoint_key(p: int) -> str:
    return f"ckpt:{{{p}}}"


def alerts_key(p: int) -> str:
    return f"alerts:{{{p}}}"


# Appends one batch and keeps the stream at `maxlen` entries. Entries trimmed before the group read
# them (after its last-delivered-id) are counted with their flows: exact, because the trim and the
# count happen in the same atomic script as the append.
APPEND = """
local function later(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am > bm or (am == bm and as > bs)
end
local id = redis.call('XADD', KEYS[1], '*', 'k', ARGV[3], 'd', ARGV[4], 'n', ARGV[5])
local n = tonumber(ARGV[5])
redis.call('HINCRBY', KEYS[2], 'added', n)
redis.call('HINCRBY', KEYS[2], 'entries_added', 1)
local maxlen = tonumber(ARGV[1])
local over = redis.call('XLEN', KEYS[1]) - maxlen
local lost = 0
if over > 0 then
  local last = '0-0'
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
  if ok then
    for _, g in ipairs(groups) do
      local name, lid
      for i = 1, #g, 2 do
        if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then lid = g[i + 1] end
      end
      if name == ARGV[2] then last = lid end
    end
  end
  local entries = 0
  for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', over)) do
    if later(e[1], last) then
      local f = e[2]
      for i = 1, #f, 2 do if f[i] == 'n' then lost = lost + tonumber(f[i + 1]) end end
      entries = entries + 1
    end
  end
  redis.call('XTRIM', KEYS[1], 'MAXLEN', maxlen)
  if entries > 0 then
    redis.call('HINCRBY', KEYS[2], 'trimmed', lost)
    redis.call('HINCRBY', KEYS[2], 'trimmed_entries', entries)
  end
end
return lost
"""

# Commits what an analyzer did with some entries of a partition, all or nothing, and only while it
# still holds the lease (a paused analyzer whose lease moved on commits nothing): the flow ids go
# into the dedupe set, the alert events out, the entries are acknowledged and the counters move.
# ARGV: node, group, dedupe horizon ms, alerts maxlen, #entries, #flows, #duplicates, #alerts, then
# the entry ids, the flow ids, the alert events.
COMMIT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local ne, nf, nd, na = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local i = 9
local ids = {}
for j = 1, ne do ids[j] = ARGV[i]; i = i + 1 end
local chunk = {}
for j = 1, nf do
  chunk[#chunk + 1] = now
  chunk[#chunk + 1] = ARGV[i]
  i = i + 1
  if #chunk >= 1000 then redis.call('ZADD', KEYS[3], unpack(chunk)); chunk = {} end
end
if #chunk > 0 then redis.call('ZADD', KEYS[3], unpack(chunk)) end
for j = 1, na do
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 'a', ARGV[i])
  i = i + 1
end
if ne > 0 then redis.call('XACK', KEYS[2], ARGV[2], unpack(ids)) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[4], 'analysed', nf)
redis.call('HINCRBY', KEYS[4], 'analysed:' .. ARGV[1], nf)
if nd > 0 then
  redis.call('HINCRBY', KEYS[4], 'duplicates', nd)
  redis.call('HINCRBY', KEYS[4], 'duplicates:' .. ARGV[1], nd)
end
return nf
"""

RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def connect(url: str) -> Any:
    """A redis-py client that never waits long: a stalled Redis must not stall a caller for ever."""
    import redis

    return redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0, health_check_interval=10)


def agree_on_layout(client: Any, partitions: int) -> bytes:
    """The secret of the keyed partition hash; ClusterError when Redis holds another partition count.

    The first node to connect creates both; every node reads the same. The hash is keyed because the
    agent id comes from the agent's machine id, which the agent chooses: without a secret, agents could
    pick machine ids that all land on one partition and bury its analyzer.
    """
    client.set(PARTITIONS, partitions, nx=True)
    recorded = int(client.get(PARTITIONS))
    if recorded != partitions:
        raise LayoutError(f"cluster.partitions is {partitions} here but {recorded} in Redis: every node must use {recorded}")
    client.set(PARTITION_KEY, secrets.token_hex(32), nx=True)
    key = client.get(PARTITION_KEY)
    return bytes.fromhex(key.decode())


def ensure_groups(client: Any, partitions: int) -> None:
    """The consumer group of every partition stream, from its first entry (created once)."""
    import redis

    for p in range(partitions):
        try:
            client.xgroup_create(flows_key(p), GROUP, id="0", mkstream=True)
        except redis.ResponseError as err:
            if "BUSYGROUP" not in str(err):
                raise


class PartitionMap:
    """agent id -> partition: keyed BLAKE2b of the agent id, modulo the partition count (cached)."""

    _MAX_CACHED = 100_000

    def __init__(self, key: bytes, partitions: int) -> None:
        self._key = key
        self.partitions = partitions
        self._cache: dict[str, int] = {}

    def __call__(self, agent_id: str) -> int:
        p = self._cache.get(agent_id)
        if p is None:
            digest = hashlib.blake2b(agent_id.encode(), key=self._key, digest_size=8).digest()
            p = int.from_bytes(digest, "big") % self.partitions
            if len(self._cache) >= self._MAX_CACHED:
                self._cache.clear()
            self._cache[agent_id] = p
        return p


def partition_counts(client: Any, partitions: int) -> dict[str, int]:
    """The `counts:{p}` hashes summed over partitions (field -> total)."""
    pipe = client.pipeline(transaction=False)
    for p in range(partitions):
        pipe.hgetall(counts_key(p))
    totals: dict[str, int] = {}
    for fields in pipe.execute():
        for name, value in fields.items():
            key = name.decode()
            totals[key] = totals.get(key, 0) + int(value)
    return totals
