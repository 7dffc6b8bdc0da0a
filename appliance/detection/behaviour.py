"""Behavioural layer: per-agent baselines (Welford, EMA, z-score, CUSUM) and beaconing (after RITA).

The z-score judges one window; CUSUM (Page, 1954) judges their sum: each closed window adds what it
sent above the baseline mean plus an allowance of `cusum_k` standard deviations, the sum never goes
below zero, and crossing `cusum_h` standard deviations (and `cusum_min_bytes`) is a detection. A slow,
steady exfiltration that never crosses 3 sigma in one window adds up there. CUSUM keeps its own
reference baseline, learnt only from windows that leave the sum at zero: the z-score's baseline
learns every window, so a shift that lasts hours would become its "normal" while being measured.

Baselines live in memory and start over with the process (a cluster analyzer checkpoints them to
Redis with `snapshot`; the next owner of the agent's partition puts them back with `restore`).
Beaconing looks at the start times of an agent's connections to one destination: it collapses
bursts, folds missed beats back onto the
period (an interval of about k times the median counts as k beats), then judges the coefficient of
variation of the intervals, backed by robust sub-scores (MAD over median, Bowley skew) and data-size
consistency, all shown as evidence.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.detections import Throttle, make_detection, transport_name
from appliance.model import Category, Detection, FlowRecord, Severity, Transport, ip_str
from appliance.native.dpi import BehaviourCore

_NS = 1_000_000_000
_MAX_KEYS = 200_000


@dataclass(slots=True)
class Welford:
    """Running mean and standard deviation, plus an exponential moving average."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    ema: float = 0.0

    def add(self, value: float, alpha: float) -> None:
        self.n += 1
        delta = value - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (value - self.mean)
        self.ema = value if self.n == 1 else alpha * value + (1 - alpha) * self.ema

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 0.0

    def z(self, value: float) -> float:
        return (value - self.mean) / max(self.std, 1e-9) if self.n > 1 else 0.0


@dataclass(slots=True)
class _Volume:
    stats: Welford = field(default_factory=Welford)
    bucket: int = -1
    total: int = 0
    by_remote: dict[int, int] = field(default_factory=dict)
    flow_ids: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    cusum: float = 0.0  # bytes above the reference baseline, accumulated over closed windows
    reference: Welford = field(default_factory=Welford)  # the windows that left the sum at zero
    run_buckets: int = 0  # closed windows since the sum left zero
    run_first_ns: int = 0
    run_max_z: float = 0.0
    run_by_remote: dict[int, int] = field(default_factory=dict)  # bytes out per destination during the run


def bowley_skew(values: list[float]) -> float:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    spread = q3 - q1
    return 0.0 if spread == 0 else (q3 + q1 - 2 * q2) / spread


def _pstdev(values: list[float] | list[int], mean: float) -> float:
    """Population standard deviation around `mean`, in floats: statistics.pstdev's exact rational
    arithmetic costs ~160 us for 200 integer sizes (19 us here), for digits the scores round away."""
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def beacon_scores(starts: list[int], sizes: list[int], min_interval_s: float) -> dict[str, float] | None:
    """Sub-scores of one connection series (start times in ns); None when too few intervals."""
    times = sorted(starts)
    collapsed = [times[0]]
    for t in times[1:]:
        if (t - collapsed[-1]) / _NS >= min_interval_s:
            collapsed.append(t)
    intervals = [(b - a) / _NS for a, b in zip(collapsed, collapsed[1:])]
    if len(intervals) < 3:
        return None
    median = statistics.median(intervals)
    folded: list[float] = []
    missed = 0
    for value in intervals:
        beats = round(value / median) if median > 0 else 1
        if beats >= 2 and abs(value / beats - median) <= 0.25 * median:
            folded.append(value / beats)
            missed += beats - 1
        else:
            folded.append(value)
    mean = statistics.fmean(folded)
    cv = _pstdev(folded, mean) / mean if mean > 0 else 1.0
    mad = statistics.median(abs(v - median) for v in folded)
    size_mean = statistics.fmean(sizes) if sizes else 0.0
    size_cv = _pstdev(sizes, size_mean) / size_mean if size_mean > 0 and len(sizes) > 1 else 0.0
    return {
        "connections": len(collapsed), "interval_median_s": round(median, 2), "interval_cv": round(cv, 3),
        "mad_over_median": round(mad / median, 3) if median > 0 else 1.0,
        "bowley_skew": round(bowley_skew(folded), 3) if len(folded) >= 4 else 0.0,
        "missed_beats": missed, "size_cv": round(size_cv, 3),
        "size_score": round(max(0.0, 1.0 - size_cv), 3),
    }


def series_scores(series: deque[tuple[int, int]], min_interval_s: float,
                  figures: tuple[Any, ...] | None = None) -> dict[str, float] | None:
    """beacon_scores of a connection series [(start ns, bytes out)], its figures computed in C
    (BehaviourCore.beacon_figures: the same operations, bit for bit) unless only the Python can."""
    if figures is None:
        figures = BehaviourCore.beacon_figures(series, min_interval_s)
    if figures is None:
        return beacon_scores([s for s, _ in series], [b for _, b in series], min_interval_s)
    if not figures:
        return None
    connections, median, cv, mad_over_median, skew, missed, size_cv, _ = figures
    return {
        "connections": connections, "interval_median_s": round(median, 2), "interval_cv": round(cv, 3),
        "mad_over_median": round(mad_over_median, 3) if median > 0 else 1.0,
        "bowley_skew": round(skew, 3) if skew is not None else 0.0,
        "missed_beats": missed, "size_cv": round(size_cv, 3),
        "size_score": round(max(0.0, 1.0 - size_cv), 3),
    }


class FleetPrevalence(Protocol):
    """Destination prevalence shared beyond this layer's agents (a cluster analyzer sees only some)."""

    def visited(self, destination: tuple[int, int], agent_id: str, seen_ns: int) -> None:
        """An agent reached this (address, port) at this event time."""

    def agents(self, destination: tuple[int, int], since_ns: int) -> set[str]:
        """The agents known to have reached it since this event time (empty when unknown)."""
        ...


class BehaviourLayer(BehaviourCore):
    """Volume anomaly per agent and beaconing per (agent, destination address, port).

    `analyze` is BehaviourCore's (appliance/native/behaviour_tally.h): the bookkeeping every flow does,
    in C, on the Python state below. It calls the judges here only when one can fire; they are the Python
    they were (behaviour_reference.py holds the whole layer as it was, for the tests)."""

    name = "behaviour"
    _volume: dict[str, _Volume]
    _series: dict[tuple[str, int, int], deque[tuple[int, int]]]
    _visitors: dict[tuple[int, int], dict[str, int]]  # destination -> agent -> last seen ns
    fleet: FleetPrevalence | None  # None: this layer sees every agent (standalone); else shared prevalence (cluster)

    def __init__(self, config: AnalysisConfigHolder, fleet: FleetPrevalence | None = None) -> None:
        super().__init__(config, {}, {}, {}, _Volume, _MAX_KEYS, Transport.TCP, Transport.UDP)
        self._config = config
        self.fleet = fleet
        self._throttle = Throttle()

    def _settings(self, config: AnalysisConfig) -> tuple[Any, ...]:
        """What the C accounting reads of a new config in force."""
        v, b = config.volume, config.beaconing
        return (int(v.bucket_s * _NS), v.warmup_buckets, v.min_bytes, b.history, b.min_connections, b.ignore_ports,
                b.common_destination_agents, int(b.prevalence_window_s * _NS), b.min_interval_s, b.max_cv,
                v.cusum, v.ema_alpha, v.cusum_k, config.detectors.report_interval_s, v.cusum_h, float(v.cusum_min_bytes))

    def _roll(self, flow: FlowRecord, state: _Volume, bucket: int, config: AnalysisConfig) -> Detection | None:
        """A flow opened a later window: the closed one (and the quiet ones after it) join the baselines."""
        c = config.volume
        found = None
        if state.bucket >= 0:
            found = self._cusum(flow, state, float(state.total), config)
            state.stats.add(float(state.total), c.ema_alpha)
            for _ in range(min(bucket - state.bucket - 1, 60)):  # quiet buckets are part of the baseline
                quiet = self._cusum(flow, state, 0.0, config)
                found = found or quiet
                state.stats.add(0.0, c.ema_alpha)
        state.bucket, state.total = bucket, 0
        state.by_remote.clear()
        return found

    def _volume_alarm(self, flow: FlowRecord, state: _Volume, bucket: int, config: AnalysisConfig) -> Detection | None:
        """The open window holds at least min_bytes and the baseline is warm: its z-score judged."""
        c = config.volume
        stats = state.stats
        z = stats.z(float(state.total))
        if z < c.z_threshold or not self._throttle.allow(("volume", flow.agent_id), flow.last_ns, config.detectors.report_interval_s):
            return None
        top_ip = max(state.by_remote, key=state.by_remote.__getitem__)
        address = ip_str(top_ip)
        confidence = 0.45 + 0.35 * min(1.0, (z - c.z_threshold) / (3 * c.z_threshold))
        reason = f"{state.total} bytes out in {c.bucket_s:.0f} s, {z:.1f} standard deviations above this agent's baseline"
        return make_detection(
            "behaviour.volume", Category.VOLUME_ANOMALY, confidence, Severity.MEDIUM, agent_id=flow.agent_id,
            indicator=address, protocol=transport_name(flow), transport=transport_name(flow),
            evidence={"bytes_out": state.total, "bucket_s": c.bucket_s, "baseline_mean": round(stats.mean),
                      "baseline_std": round(stats.std), "ema": round(stats.ema), "z_score": round(z, 2),
                      "baseline_buckets": stats.n, "top_destination_bytes": state.by_remote[top_ip], "reason": reason},
            flow_ids=list(state.flow_ids), first_ns=bucket * int(c.bucket_s * _NS), last_ns=flow.last_ns, remote_ip=address)

    def _cusum(self, flow: FlowRecord, state: _Volume, value: float, config: AnalysisConfig) -> Detection | None:
        """Adds one closed window's bytes to the agent's CUSUM; a detection when the sum crosses its threshold."""
        c = config.volume
        reference = state.reference
        if not c.cusum:
            return None
        if reference.n < c.warmup_buckets:
            reference.add(value, c.ema_alpha)
            return None
        mean, std = reference.mean, max(reference.std, 1.0)
        state.cusum = max(0.0, state.cusum + value - mean - c.cusum_k * std)
        if state.cusum == 0.0:
            reference.add(value, c.ema_alpha)
            state.run_buckets, state.run_max_z = 0, 0.0
            state.run_by_remote.clear()
            return None
        if state.run_buckets == 0:
            state.run_first_ns = state.bucket * int(c.bucket_s * _NS)
        state.run_buckets += 1
        state.run_max_z = max(state.run_max_z, (value - mean) / std)
        if value and len(state.run_by_remote) < 10_000:
            for remote, sent in state.by_remote.items():
                state.run_by_remote[remote] = state.run_by_remote.get(remote, 0) + sent
        threshold = max(c.cusum_h * std, float(c.cusum_min_bytes))
        if state.cusum < threshold or not state.run_by_remote:
            return None
        excess, buckets, max_z = state.cusum, state.run_buckets, state.run_max_z
        top_ip = max(state.run_by_remote, key=state.run_by_remote.__getitem__)
        top_bytes = state.run_by_remote[top_ip]
        first_ns = state.run_first_ns
        state.cusum, state.run_buckets, state.run_max_z = 0.0, 0, 0.0  # alarm given: start over (Page's scheme)
        state.run_by_remote.clear()
        address = ip_str(top_ip)
        confidence = 0.45 + 0.3 * min(1.0, excess / (4 * threshold))
        reason = (f"{excess:,.0f} bytes out above this agent's baseline ({mean:,.0f} per {c.bucket_s:.0f} s) accumulated "
                  f"over {buckets} windows, none more than {max_z:.1f} standard deviations above it")
        return make_detection(
            "behaviour.cusum", Category.VOLUME_ANOMALY, confidence, Severity.MEDIUM, agent_id=flow.agent_id,
            indicator=address, protocol=transport_name(flow), transport=transport_name(flow),
            evidence={"cumulative_excess_bytes": round(excess), "windows": buckets, "bucket_s": c.bucket_s,
                      "baseline_mean": round(mean), "baseline_std": round(std), "cusum_k": c.cusum_k,
                      "cusum_h": c.cusum_h, "threshold_bytes": round(threshold), "max_window_z": round(max_z, 2),
                      "top_destination_bytes": top_bytes, "reason": reason},
            flow_ids=list(state.flow_ids), first_ns=first_ns, last_ns=flow.last_ns, remote_ip=address)

    def _judge_beacon(self, flow: FlowRecord, config: AnalysisConfig, key: tuple[str, int, int],
                      series: deque[tuple[int, int]], visitors: dict[str, int], prevalence: int,
                      figures: tuple[Any, ...] | None) -> Detection | None:
        """The series holds min_connections, `prevalence` of this layer's agents reached its destination (the C
        forgot the others) and, with no fleet, the destination is not common and `figures` (beacon_figures,
        None when only the Python computes them) do not rule a beacon out: its regularity judged."""
        c = config.beaconing
        fleet = self.fleet
        if fleet is not None and c.common_destination_agents and prevalence < c.common_destination_agents:
            since = flow.last_ns - int(c.prevalence_window_s * _NS)
            prevalence = len(fleet.agents(key[1:], since) | visitors.keys())
        if c.common_destination_agents and prevalence >= c.common_destination_agents:
            return None
        throttled = ("beacon",) + tuple(map(str, key))
        if figures is None and not self._throttle.would_allow(throttled, flow.last_ns, config.detectors.report_interval_s):
            return None  # what the scores are cannot matter (they are computed without side effects); with
            # figures, the C asked already
        scores = series_scores(series, c.min_interval_s, figures)
        first_ns = figures[-1] if figures else min(s for s, _ in series)
        if scores is None or scores["connections"] < c.min_connections or scores["interval_cv"] > c.max_cv:
            return None
        if not self._throttle.allow(throttled, flow.last_ns, config.detectors.report_interval_s):
            return None
        cv = scores["interval_cv"]
        confidence = (0.5 + 0.2 * (1 - cv / c.max_cv if c.max_cv else 1.0) + 0.15 * scores["size_score"]
                      + 0.15 * min(1.0, (scores["connections"] - c.min_connections) / (2 * c.min_connections)))
        address = flow.remote_addr
        reason = (f"{int(scores['connections'])} connections to {address}:{flow.remote_port} every "
                  f"{scores['interval_median_s']:.0f} s (interval CV {cv:.2f})")
        scores.update(remote_port=flow.remote_port, prevalence_agents=prevalence, reason=reason)  # the evidence
        transport = transport_name(flow)
        return make_detection(
            "behaviour.beaconing", Category.BEACONING, confidence, Severity.MEDIUM, agent_id=flow.agent_id,
            indicator=address, protocol=transport, transport=transport, evidence=scores,
            flow_ids=[flow.flow_id], first_ns=first_ns, last_ns=flow.last_ns, remote_ip=address)

    # -- checkpoints (cluster: an analyzer taking over a partition restores its agents' baselines) -----
    def snapshot(self, agent_ids: set[str]) -> dict[str, dict[str, Any]]:
        """The baselines of these agents as plain, JSON-safe data: the volume windows with their CUSUM,
        and the connection series beaconing judges. Not included: the re-report throttle and the
        cross-agent destination prevalence (both start empty after a takeover)."""
        out: dict[str, dict[str, Any]] = {}
        for agent_id in agent_ids:
            v = self._volume.get(agent_id)
            out[agent_id] = {"volume": None if v is None else {
                "stats": _welford_state(v.stats), "reference": _welford_state(v.reference), "bucket": v.bucket,
                "total": v.total, "by_remote": list(v.by_remote.items()), "flow_ids": list(v.flow_ids),
                "cusum": v.cusum, "run_buckets": v.run_buckets, "run_first_ns": v.run_first_ns,
                "run_max_z": v.run_max_z, "run_by_remote": list(v.run_by_remote.items())}, "series": []}
        for (agent_id, remote_ip, remote_port), series in self._series.items():
            if agent_id in out:
                out[agent_id]["series"].append([remote_ip, remote_port, [list(s) for s in series]])
        return out

    def restore(self, agent_id: str, state: dict[str, Any]) -> None:
        """Put back an agent's baselines from `snapshot` (ValueError/TypeError/KeyError when it is not one)."""
        history = self._config.current.beaconing.history
        volume = state["volume"]
        restored: _Volume | None = None
        if volume is not None:
            restored = _Volume(
                stats=_welford_from(volume["stats"]), bucket=int(volume["bucket"]), total=int(volume["total"]),
                by_remote={int(k): int(n) for k, n in volume["by_remote"]},
                flow_ids=deque((str(i) for i in volume["flow_ids"]), maxlen=20), cusum=float(volume["cusum"]),
                reference=_welford_from(volume["reference"]), run_buckets=int(volume["run_buckets"]),
                run_first_ns=int(volume["run_first_ns"]), run_max_z=float(volume["run_max_z"]),
                run_by_remote={int(k): int(n) for k, n in volume["run_by_remote"]})
        series = {(agent_id, int(remote_ip), int(remote_port)): deque(((int(t), int(b)) for t, b in points), maxlen=history)
                  for remote_ip, remote_port, points in state["series"]}
        # Everything parsed: only now does any of it replace what the layer holds (never half restored).
        if restored is not None:
            self._volume[agent_id] = restored
        self._series.update(series)


def _welford_state(w: Welford) -> list[float]:
    return [w.n, w.mean, w.m2, w.ema]


def _welford_from(values: list[Any]) -> Welford:
    n, mean, m2, ema = values
    return Welford(int(n), float(mean), float(m2), float(ema))
