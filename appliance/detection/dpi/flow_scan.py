"""ScannedAnalyzer: a DNS analyzer whose loop over a flow's messages is one C call (a scanner of dns_windows.h).

DnsAnalyzer and DgaSignals each keep their judges in Python and their accounting in a scanner, configured from
the config in force; a scanner refuses a flow with a timestamp out of range before it changes anything, and the
analyzer counts and skips it. The DPI layer's loop calls `scan_function` itself, without `scan`'s frame.
"""

from __future__ import annotations

import logging
from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.model import FlowRecord

_log = logging.getLogger(__name__)


class ScannedAnalyzer:
    """The scanner's configuration, its call and the flows it refused (`out_of_range_flows`)."""

    _scanner: Any  # DnsScanner, DgaScanner
    _skipped_event = "flow_skipped"  # the log event of the first flow refused

    def __init__(self) -> None:
        self._configured: AnalysisConfig | None = None
        self.out_of_range_flows = 0  # flows with a timestamp outside [0, 2**62): skipped, never seen by ingestion

    def configure(self, config: AnalysisConfig) -> None:
        """The scanner set from `config` (nothing to do while it is the config in force)."""
        if config is not self._configured:
            self._configure_scanner(config)
            self._configured = config

    def _configure_scanner(self, config: AnalysisConfig) -> None:
        raise NotImplementedError

    @property
    def scan_function(self) -> Any:
        """`scan` without its Python frame, for a loop over many flows (the DPI layer's): the scanner's own method,
        which raises ValueError where `scan` counts and skips (call `out_of_range` then)."""
        return self._scanner.scan

    def scan(self, flow: FlowRecord) -> Any:
        """The flow's messages into the analyzer's state, under the config `configure` was last given: what its judges
        need, or None when none is due (most flows)."""
        try:
            return self._scanner.scan(flow)
        except ValueError:
            return self.out_of_range(flow)

    def out_of_range(self, flow: FlowRecord) -> None:
        """Ingestion replaces timestamps from the future and keeps first_ns <= last_ns: a record from elsewhere.
        Counted and skipped (the scan checked it before any state changed)."""
        self.out_of_range_flows += 1
        if self.out_of_range_flows == 1:
            _log.warning("%s reason=timestamp_out_of_range flow_id=%s", self._skipped_event, flow.flow_id)


class ScannedInPython(ScannedAnalyzer):
    """For a reference twin (dns_reference, dga_signals_reference): its `_scan(flow, config)` loop in Python in place
    of the scanner, under the config given last. Put first among the bases: `class Twin(ScannedInPython, Analyzer)`."""

    def _configure_scanner(self, config: AnalysisConfig) -> None:
        self._config_in_force = config

    def scan(self, flow: FlowRecord) -> Any:
        return self._scan(flow, self._config_in_force)

    @property
    def scan_function(self) -> Any:
        return self.scan

    def _scan(self, flow: FlowRecord, config: AnalysisConfig) -> Any:
        raise NotImplementedError
