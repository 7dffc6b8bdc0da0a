"""Where the analysis config is kept: one JSON row of the detection database, read once at start-up."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from appliance.config import describe_errors
from appliance.detection.analysis_config import AnalysisConfig, merge
from appliance.detection.database import DetectionDatabase
from appliance.errors import ConfigError

log = logging.getLogger(__name__)


class ConfigStore:
    """Persists the analysis config as one JSON row."""

    def __init__(self, db: DetectionDatabase) -> None:
        self._db = db.conn
        self._lock = db.lock

    def load(self) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM analysis_config WHERE id = 1").fetchone()
        return json.loads(row[0]) if row else None

    def save(self, config: AnalysisConfig) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO analysis_config (id, body) VALUES (1, ?)", (config.model_dump_json(),))


def load_analysis_config(store: ConfigStore, seed: dict[str, Any]) -> AnalysisConfig:
    """The persisted config if there is a valid one, else defaults overlaid with `analysis.detectors`."""
    saved = store.load()
    if saved is not None:
        try:
            return AnalysisConfig.model_validate(saved)
        except ValidationError as err:
            log.warning("persisted analysis config ignored: %s",
                                                describe_errors(err, "analysis_config").replace("\n", "; "))
    try:
        return AnalysisConfig.model_validate(merge(AnalysisConfig().model_dump(), seed))
    except ValidationError as err:
        raise ConfigError(describe_errors(err, "analysis.detectors")) from None
