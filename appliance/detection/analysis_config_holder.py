"""The analysis config in force: swapped whole, so the worker reads one consistent snapshot per flow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.analysis_config_store import ConfigStore, load_analysis_config


class AnalysisConfigHolder:
    """The config in force; `replace` validates nothing (callers pass a validated object)."""

    # Slots: the layers read `current` once per flow (the behaviour layer's C reads the slot where it is).
    __slots__ = ("current", "_store", "_listeners")

    def __init__(self, config: AnalysisConfig, store: ConfigStore | None = None) -> None:
        self.current = config
        self._store = store
        self._listeners: list[Callable[[AnalysisConfig], None]] = []

    def replace(self, config: AnalysisConfig) -> None:
        if self._store is not None:
            self._store.save(config)
        self.current = config
        for listener in self._listeners:
            listener(config)

    def reload(self, seed: dict[str, Any]) -> None:
        """Take the config another process saved (the analysis process after a REST change): nothing is written."""
        if self._store is None:
            return
        self.current = load_analysis_config(self._store, seed)
        for listener in self._listeners:
            listener(self.current)

    def on_change(self, listener: Callable[[AnalysisConfig], None]) -> None:
        self._listeners.append(listener)
