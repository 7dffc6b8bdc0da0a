"""The behaviour layer in Python: what `behaviour.BehaviourLayer` does with its accounting in C, for the tests.

`BehaviourLayerReference` is `BehaviourLayer` as it was before its per-flow bookkeeping moved to
appliance/native/behaviour_tally.h: the same dataclasses, judges and checkpoints, in one Python loop. The
differential tests (tests/appliance/detection/test_behaviour_fast.py) feed both the same flows and compare
every detection and the snapshots.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.behaviour import (_NS, FleetPrevalence, _Volume, _welford_from, _welford_state,
                                           beacon_scores)
from appliance.detection.detections import Throttle, make_detection, transport_name
from appliance.model import Category, Detection, FlowRecord, Severity, Transport, ip_str

_MAX_KEYS = 200_000


class BehaviourLayerReference:
    """`behaviour.BehaviourLayer` as it was before its accounting moved to C (the differential tests' reference)."""

    name = "behaviour"

    def __init__(self, config: AnalysisConfigHolder, fleet: FleetPrevalence | None = None) -> None:
        self._config = config
        self.fleet = fleet  # None: this layer sees every agent (standalone); else shared prevalence (cluster)
        self._volume: dict[str, _Volume] = {}
        self._series: dict[tuple[str, int, int], deque[tuple[int, int]]] = {}
        self._visitors: dict[tuple[int, int], dict[str, int]] = {}  # destination -> agent -> last seen ns
        self._throttle = Throttle()

    def analyze(self, flow: FlowRecord) -> list[Detection]:
        config = self._config.current
        out = self._analyze_volume(flow, config)
        if flow.transport is Transport.TCP or flow.transport is Transport.UDP:
            out.extend(self._analyze_beaconing(flow, config))
        return out

    def _analyze_volume(self, flow: FlowRecord, config: AnalysisConfig) -> list[Detection]:
        c = config.volume
        state = self._volume.get(flow.agent_id)
        if state is None:
            if len(self._volume) >= _MAX_KEYS:
                self._volume.clear()
            state = self._volume[flow.agent_id] = _Volume()
        bucket = flow.last_ns // int(c.bucket_s * _NS)
        out: list[Detection] = []
        if bucket > state.bucket:
            if state.bucket >= 0:
                found = self._cusum(flow, state, float(state.total), config)
                state.stats.add(float(state.total), c.ema_alpha)
                for _ in range(min(bucket - state.bucket - 1, 60)):  # quiet buckets are part of the baseline
                    quiet = self._cusum(flow, state, 0.0, config)
                    found = found or quiet
                    state.stats.add(0.0, c.ema_alpha)
                if found is not None:
                    out.append(found)
            state.bucket, state.total = bucket, 0
            state.by_remote.clear()
        elif bucket < state.bucket:
            bucket = state.bucket  # a late flow counts in the open bucket
        state.total += flow.bytes_out
        state.by_remote[flow.remote_ip] = state.by_remote.get(flow.remote_ip, 0) + flow.bytes_out
        state.flow_ids.append(flow.flow_id)
        stats = state.stats
        if stats.n < c.warmup_buckets or state.total < c.min_bytes:
            return out
        z = stats.z(float(state.total))
        if z < c.z_threshold or not self._throttle.allow(("volume", flow.agent_id), flow.last_ns, config.detectors.report_interval_s):
            return out
        top_ip = max(state.by_remote, key=state.by_remote.__getitem__)
        address = ip_str(top_ip)
        confidence = 0.45 + 0.35 * min(1.0, (z - c.z_threshold) / (3 * c.z_threshold))
        reason = f"{state.total} bytes out in {c.bucket_s:.0f} s, {z:.1f} standard deviations above this agent's baseline"
        return out + [make_detection(
            "behaviour.volume", Category.VOLUME_ANOMALY, confidence, Severity.MEDIUM, agent_id=flow.agent_id,
            indicator=address, protocol=transport_name(flow), transport=transport_name(flow),
            evidence={"bytes_out": state.total, "bucket_s": c.bucket_s, "baseline_mean": round(stats.mean),
                      "baseline_std": round(stats.std), "ema": round(stats.ema), "z_score": round(z, 2),
                      "baseline_buckets": stats.n, "top_destination_bytes": state.by_remote[top_ip], "reason": reason},
            flow_ids=list(state.flow_ids), first_ns=bucket * int(c.bucket_s * _NS), last_ns=flow.last_ns, remote_ip=address)]

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

    @staticmethod
    def _prevalence(visitors: dict[str, int], now_ns: int, window_s: float) -> int:
        horizon = now_ns - int(window_s * _NS)
        for agent in [a for a, seen in visitors.items() if seen < horizon]:
            del visitors[agent]
        return len(visitors)

    def _analyze_beaconing(self, flow: FlowRecord, config: AnalysisConfig) -> list[Detection]:
        c = config.beaconing
        if flow.packets_out == 0 or flow.remote_port in c.ignore_ports or flow.local_port in c.ignore_ports:
            return []
        if flow.local_port < 1024 <= flow.remote_port:
            return []  # the agent is the server side of this flow
        key = (flow.agent_id, flow.remote_ip, flow.remote_port)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= _MAX_KEYS:
                self._series.clear()
            series = self._series[key] = deque(maxlen=c.history)
        series.append((flow.first_ns, flow.bytes_out))
        visitors = self._visitors.get(key[1:])
        if visitors is None:
            if len(self._visitors) >= _MAX_KEYS:
                self._visitors.clear()
            visitors = self._visitors[key[1:]] = {}
        visitors[flow.agent_id] = flow.last_ns
        fleet = self.fleet
        if fleet is not None:
            fleet.visited(key[1:], flow.agent_id, flow.last_ns)
        if len(series) < c.min_connections:
            return []
        prevalence = self._prevalence(visitors, flow.last_ns, c.prevalence_window_s)
        if fleet is not None and c.common_destination_agents and prevalence < c.common_destination_agents:
            since = flow.last_ns - int(c.prevalence_window_s * _NS)
            prevalence = len(fleet.agents(key[1:], since) | visitors.keys())
        if c.common_destination_agents and prevalence >= c.common_destination_agents:
            return []
        scores = beacon_scores([s for s, _ in series], [b for _, b in series], c.min_interval_s)
        if scores is None or scores["connections"] < c.min_connections or scores["interval_cv"] > c.max_cv:
            return []
        if not self._throttle.allow(("beacon",) + tuple(map(str, key)), flow.last_ns, config.detectors.report_interval_s):
            return []
        cv = scores["interval_cv"]
        confidence = (0.5 + 0.2 * (1 - cv / c.max_cv if c.max_cv else 1.0) + 0.15 * scores["size_score"]
                      + 0.15 * min(1.0, (scores["connections"] - c.min_connections) / (2 * c.min_connections)))
        address = flow.remote_addr
        reason = (f"{int(scores['connections'])} connections to {address}:{flow.remote_port} every "
                  f"{scores['interval_median_s']:.0f} s (interval CV {cv:.2f})")
        return [make_detection(
            "behaviour.beaconing", Category.BEACONING, confidence, Severity.MEDIUM, agent_id=flow.agent_id,
            indicator=address, protocol=transport_name(flow), transport=transport_name(flow),
            evidence={**scores, "remote_port": flow.remote_port, "prevalence_agents": prevalence, "reason": reason},
            flow_ids=[flow.flow_id], first_ns=min(s for s, _ in series), last_ns=flow.last_ns, remote_ip=address)]

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
