"""The console's `config` store on the appliance side: general, capture, detection, storage.

Persisted in the detection database; `PUT /api/v1/settings` merges partial sections, validates the
whole, then applies what has an effect here: detection.sensitivityLevel sets the correlation's
minimum confidence, detection.enabledLayers filters detections by layer, storage drives retention.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from appliance.detection.analysis_config_holder import AnalysisConfigHolder
from appliance.detection.database import DetectionDatabase
from appliance.detection.layers import LAYER_OF_CATEGORY, LAYERS
from appliance.model import Detection

log = logging.getLogger(__name__)

# Correlation's min_confidence per sensitivity: higher sensitivity raises alerts on weaker evidence.
SENSITIVITY_MIN_CONFIDENCE = {"low": 0.8, "medium": 0.6, "high": 0.4}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GeneralSettings(_Section):
    autoStart: bool = True
    notifications: bool = True
    darkMode: bool = True


class CaptureSettings(_Section):
    maxPacketSize: Annotated[int, Field(ge=64, le=65535)] = 65535
    promiscuousMode: bool = False
    bufferSize: Annotated[int, Field(ge=1, le=4096)] = 64  # MiB


Layer = Literal["network", "dns", "http", "tls", "behavioral"]


def _all_layers() -> list[Layer]:
    return list(get_args(Layer))


assert get_args(Layer) == LAYERS, "the settings' layers are the layers table's"


class DetectionSettings(_Section):
    sensitivityLevel: Literal["low", "medium", "high"] = "medium"
    enabledLayers: list[Layer] = Field(default_factory=_all_layers, max_length=len(LAYERS))
    autoBlock: bool = False

    @field_validator("autoBlock")
    @classmethod
    def _no_blocking(cls, value: bool) -> bool:
        if value:
            raise ValueError("the appliance has no blocking back end yet; autoBlock must be false")
        return value


class StorageSettings(_Section):
    retentionDays: Annotated[int, Field(ge=1, le=3650)] = 30
    maxStorageGb: Annotated[float, Field(ge=0.1, le=10000)] = 10.0
    exportFormat: Literal["csv", "json"] = "csv"


class ConsoleSettings(_Section):
    """The whole document (GET/PUT /api/v1/settings)."""

    general: GeneralSettings = GeneralSettings()
    capture: CaptureSettings = CaptureSettings()
    detection: DetectionSettings = DetectionSettings()
    storage: StorageSettings = StorageSettings()


class ConsoleSettingsStore:
    """Holds the settings in force, persists them, and tells listeners when they change."""

    def __init__(self, db: DetectionDatabase, analysis: AnalysisConfigHolder) -> None:
        self._db = db
        self._analysis = analysis
        self._listeners: list[Callable[[ConsoleSettings], None]] = []
        self.current = ConsoleSettings()
        self.reload()

    def reload(self) -> None:
        """Read the stored settings (at start, and in the analysis process after a REST change)."""
        with self._db.lock:
            row = self._db.conn.execute("SELECT body FROM console_settings WHERE id = 1").fetchone()
        current = ConsoleSettings()
        if row:
            try:
                current = ConsoleSettings.model_validate(json.loads(row[0]))
            except ValueError:
                log.error("stored console settings are invalid; using the defaults")
        self.current = current
        self._enabled = frozenset(current.detection.enabledLayers)

    def merged(self, partial: dict[str, Any]) -> dict[str, Any]:
        """The current document with each given section's keys laid over it (not validated)."""
        out = self.current.model_dump(mode="json")
        for section, values in partial.items():
            if isinstance(values, dict) and isinstance(out.get(section), dict):
                out[section] = {**out[section], **values}
            else:
                out[section] = values
        return out

    def replace(self, new: ConsoleSettings) -> None:
        old = self.current
        with self._db.lock, self._db.conn:
            self._db.conn.execute("INSERT OR REPLACE INTO console_settings (id, body) VALUES (1, ?)", (new.model_dump_json(),))
        self.current = new
        self._enabled = frozenset(new.detection.enabledLayers)
        if new.detection.sensitivityLevel != old.detection.sensitivityLevel:
            analysis = self._analysis.current
            correlation = analysis.correlation.model_copy(
                update={"min_confidence": SENSITIVITY_MIN_CONFIDENCE[new.detection.sensitivityLevel]})
            self._analysis.replace(analysis.model_copy(update={"correlation": correlation}))
        for listener in self._listeners:
            listener(new)

    def on_change(self, listener: Callable[[ConsoleSettings], None]) -> None:
        self._listeners.append(listener)

    def allows(self, detection: Detection) -> bool:
        """The pipeline's layer filter: False drops a detection whose layer is disabled."""
        category = detection.category.value if hasattr(detection.category, "value") else str(detection.category)
        return LAYER_OF_CATEGORY.get(category, "network") in self._enabled
