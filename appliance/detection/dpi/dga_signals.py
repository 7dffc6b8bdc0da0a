"""DGA signals from what the network shows, each a detection of its own.

A DGA host looks up many registered domains that nobody else looks up and that do not exist; the
names also look made (random letters, word salad, or pronounceable nonsense). Two detectors judge
these separately, per agent, over `dga.burst_window_s` of event time, so that correlation sees two
independent signals even for a family that tries only 8-12 names before it reaches its server:

- ``dpi.dns.nx_burst`` (network): distinct *unknown* registered domains answered NXDOMAIN in the
  window, where unknown means fewer than `dga.common_domain_agents` agents looked
  it up in the last `dga.prevalence_window_s` (a dead name the whole office asks for is a
  misconfiguration, not malware). It needs `dga.burst_min_domains` of them, and more than
  `dga.burst_baseline_factor` times what this agent usually has per window (its own baseline);
  an NXDOMAIN share three times the population's adds confidence.
- ``dpi.dns.dga_lexical`` (names): among those unresolved unknown domains, the ones whose label
  has a DGA shape (`dga_words.WordModel.shape`: random, dictionary or pronounceable); it needs
  `dga.lexical_min_domains` of them and `dga.lexical_min_share` of the unresolved ones.

Evidence names the domains, their kinds, their segmentation, and the resolved answers' TTLs.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.detections import Throttle, make_detection
from appliance.detection.domains import RegisteredDomains
from appliance.detection.dpi.dga import ramp
from appliance.detection.dpi.dga_words import LabelShape, WordModel
from appliance.detection.dpi.flow_scan import ScannedAnalyzer
from appliance.model import Category, Detection, FlowRecord, Severity, ip_str
from appliance.native.dpi import DgaScanner, dga_unknown_since, dga_unresolved

# (the agent's state, newest timestamp, burst window due to close, a name failed and the judge can fire)
Scanned = tuple["_AgentFailures", int, bool, bool]

_NS = 1_000_000_000
# NXDOMAIN only (dns_windows.h, dga_scan): a resolver outage answers SERVFAIL for every name of every host, which is no DGA.
_MAX_AGENTS = 100_000
_MAX_DOMAINS = 200_000
_MAX_PER_AGENT = 256  # far above any threshold; bounds the work of one judgement


@dataclass(slots=True)
class _AgentFailures:
    """One agent's unresolved registered domains in the window, and its baseline of them."""

    failed: dict[str, tuple[int, str]] = field(default_factory=dict)  # registered -> (ts, label), oldest first
    window_start: int = 0
    baseline: float = 0.0  # running mean of unresolved unknown domains per closed window
    windows: int = 0
    answers: int = 0  # answers and NXDOMAIN answers in the current window
    failures: int = 0
    last_share: float = 0.0  # NXDOMAIN share of the last closed window with enough answers
    ttls: deque[int] = field(default_factory=lambda: deque(maxlen=64))  # TTLs of what did resolve lately


class DgaSignals(ScannedAnalyzer):
    """The NXDOMAIN-burst and lexical DGA detectors, fed the DNS messages of finished flows.

    The loop over a flow's messages, and the start of the judge, is one C call (`DgaScanner.scan`: `dga_scan` bound
    to this state and config, appliance/native/dns_windows.h); its Python twin is
    `dga_signals_reference.DgaSignalsReference`, which the tests hold it to.
    """

    _skipped_event = "dga_flow_skipped"

    def __init__(self, domains: RegisteredDomains, words: WordModel, max_agents: int = _MAX_AGENTS,
                 max_domains: int = _MAX_DOMAINS, max_per_agent: int = _MAX_PER_AGENT) -> None:
        super().__init__()
        self._domains = domains
        self._max_agents = max_agents
        self._max_domains = max_domains  # registered domains whose askers are counted
        self._max_per_agent = max_per_agent  # failed registered domains kept per agent
        self._words = words
        self._agents: dict[str, _AgentFailures] = {}
        self._askers: dict[str, list] = {}  # registered -> [last ts, agents asking (capped)]
        self._population_share = 0.0  # running mean of the agents' NXDOMAIN share per closed window
        self._population_windows = 0
        self._throttle = Throttle()
        self._scanner = DgaScanner(self._agents, self._new_state, self._askers, domains.memo, domains.split, max_agents,
                                   max_per_agent, max_domains)

    def analyze(self, flow: FlowRecord, config: AnalysisConfig) -> list[Detection]:
        self.configure(config)
        scanned = self.scan(flow)
        return [] if scanned is None else self.judge(flow, scanned, config)

    def _configure_scanner(self, config: AnalysisConfig) -> None:
        c = config.dga
        self._scanner.configure(c.common_domain_agents, c.prevalence_window_s * _NS, int(c.burst_window_s * _NS),
                                min(c.burst_min_domains, c.lexical_min_domains))

    def judge(self, flow: FlowRecord, scanned: Scanned, config: AnalysisConfig) -> list[Detection]:
        """The window closed by the scan, and the judge when it can fire (failed_any); a list of its own."""
        state, now_ns, close_due, failed_any = scanned
        if close_due:
            self._close_window(state, now_ns, config.dga.common_domain_agents)
        if not failed_any:
            return []
        return self._judge(flow, state, now_ns, config)

    @staticmethod
    def _new_state(first_ns: int) -> _AgentFailures:
        return _AgentFailures(window_start=first_ns)

    def _close_window(self, state: _AgentFailures, now_ns: int, cap: int) -> None:
        """One value per closed window for the agent's baseline, and its NXDOMAIN share for the population."""
        unknown = self._unknown_in_window(state, cap)
        state.windows += 1
        state.baseline += (unknown - state.baseline) / min(state.windows, 20)
        if state.answers >= 10:
            state.last_share = state.failures / state.answers
            self._population_windows += 1
            self._population_share += (state.last_share - self._population_share) / min(self._population_windows, 1000)
        state.window_start, state.answers, state.failures = now_ns, 0, 0

    def _unknown_in_window(self, state: _AgentFailures, cap: int) -> int:
        """The agent's unknown failures since its window started (C: dga_unknown_since)."""
        return dga_unknown_since(state.failed, self._askers, state.window_start, cap)  # type: ignore[no-any-return]

    def _is_common(self, registered: str, cap: int) -> bool:
        entry = self._askers.get(registered)
        return entry is not None and len(entry[1]) >= cap

    def _judge(self, flow: FlowRecord, state: _AgentFailures, now_ns: int, config: AnalysisConfig) -> list[Detection]:
        c = config.dga
        failed = state.failed
        horizon = now_ns - int(c.burst_window_s * _NS)
        askers, cap = self._askers, c.common_domain_agents
        # Failures older than the window leave; too few unknown ones left and nothing can report (C: dga_unresolved).
        if dga_unresolved(failed, askers, horizon, cap) < min(c.burst_min_domains, c.lexical_min_domains):
            return []
        resolver = ip_str(flow.remote_ip)
        interval = config.detectors.report_interval_s
        # Both reports throttled (most failing flows of a DGA host): nothing below could report or change state.
        if not (self._throttle.would_allow(("nx_burst", flow.agent_id, resolver), now_ns, interval)
                or self._throttle.would_allow(("dga_lexical", flow.agent_id, resolver), now_ns, interval)):
            return []
        # _is_common, inlined: this runs over every failure
        unknown = [(d, label) for d, (_, label) in failed.items() if (entry := askers.get(d)) is None or len(entry[1]) < cap]
        count = len(unknown)
        threshold = max(float(c.burst_min_domains), c.burst_baseline_factor * state.baseline)
        share = state.failures / state.answers if state.answers else 0.0
        common = dict(agent_id=flow.agent_id, indicator=resolver, protocol="dns", transport="udp",
                      flow_ids=[flow.flow_id], first_ns=max(horizon, failed[next(iter(failed))][0]),
                      last_ns=now_ns, remote_ip=resolver)
        out: list[Detection] = []
        if count >= threshold and self._throttle.allow(("nx_burst", flow.agent_id, resolver), now_ns, interval):
            evidence = {"unresolved_unknown_domains": count, "unresolved_domains": len(failed),
                        "baseline_per_window": round(state.baseline, 2), "baseline_windows": state.windows,
                        "nxdomain_share": round(share, 2), "previous_window_nxdomain_share": round(state.last_share, 2),
                        "population_nxdomain_share": round(self._population_share, 3),
                        "population_windows": self._population_windows,
                        "window_s": c.burst_window_s, "resolver": resolver,
                        "resolved_ttl_median": sorted(state.ttls)[len(state.ttls) // 2] if state.ttls else None,
                        "sample_domains": [d for d, _ in unknown[-8:]],
                        "reason": f"{count} never-seen registered domains failed to resolve within {c.burst_window_s:.0f} s"}
            # Failing far more often than the other hosts do is a little more evidence.
            above_population = self._population_windows >= 10 and share >= 3 * max(self._population_share, 0.02)
            confidence = 0.45 + 0.3 * ramp(count, c.burst_min_domains, 4 * c.burst_min_domains) + (0.1 if above_population else 0.0)
            out.append(make_detection("dpi.dns.nx_burst", Category.DGA, confidence, Severity.MEDIUM,
                                      evidence=evidence, **common))  # type: ignore[arg-type]
        # Shapes cost (every DGA name is new to the word model): only when the report would not be throttled.
        if count >= c.lexical_min_domains and \
                self._throttle.would_allow(("dga_lexical", flow.agent_id, resolver), now_ns, interval):
            shapes = [self._words.shape(label) for _, label in unknown]
            made = [s for s in shapes if s.kind]
            share = len(made) / count
            if len(made) >= c.lexical_min_domains and share >= c.lexical_min_share and \
                    self._throttle.allow(("dga_lexical", flow.agent_id, resolver), now_ns, interval):
                out.append(self._lexical(made, share, count, c.lexical_min_domains, c.burst_window_s, common))
        return out

    @staticmethod
    def _lexical(made: list[LabelShape], share: float, count: int, minimum: int, window_s: float,
                 common: dict[str, object]) -> Detection:
        kinds = Counter(s.kind for s in made)
        lead = kinds.most_common(1)[0][0]
        word_shapes = [s for s in made if s.kind == "dictionary"]
        evidence = {"dga_like_domains": len(made), "unresolved_unknown_domains": count, "dga_like_share": round(share, 2),
                    "kinds": dict(kinds), "window_s": window_s,
                    "mean_word_count": round(sum(len(s.words) for s in word_shapes) / len(word_shapes), 2) if word_shapes else None,
                    "samples": [s.evidence() for s in made[-5:]],
                    "reason": f"{len(made)} unresolved names shaped like a {lead} DGA ({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))})"}
        confidence = 0.45 + 0.3 * ramp(len(made), minimum, 4 * minimum) + 0.15 * ramp(share, 0.5, 1.0)
        return make_detection("dpi.dns.dga_lexical", Category.DGA, confidence, Severity.HIGH,
                              evidence=evidence, **common)  # type: ignore[arg-type]
