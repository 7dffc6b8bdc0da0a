"""The console's settings (general, capture, detection, storage): GET the document, PUT partial sections."""

from __future__ import annotations

from typing import Any

from appliance.console_settings import ConsoleSettings, ConsoleSettingsStore
from appliance.detection.layers import LAYER_OF_CATEGORY
from appliance.errors import ApiError
from appliance.rest.api import Api, parse_model, read_json


def install(api: Api, *, settings: ConsoleSettingsStore) -> None:
    """Declare the settings routes on `api`."""

    def document() -> dict[str, Any]:
        return {**settings.current.model_dump(mode="json"), "layerOfCategory": LAYER_OF_CATEGORY}

    @api.route("GET", "/api/v1/settings", "The console settings and the category -> layer map", tag="console")
    def get_settings() -> dict[str, Any]:
        return document()

    @api.route("PUT", "/api/v1/settings",
               "Change console settings: any subset of sections, each partial (validated whole, persisted, applied)",
               tag="console", body=ConsoleSettings)
    def put_settings() -> dict[str, Any]:
        data = read_json(api.max_body_bytes)
        if not isinstance(data, dict):
            raise ApiError(422, "body: must be an object of sections", field="body", fields={"body": "must be an object"})
        data.pop("layerOfCategory", None)  # read-only; a client may send back what it read
        unknown = [k for k in data if k not in ConsoleSettings.model_fields]
        if unknown:
            raise ApiError(422, f"{unknown[0][:64]}: unknown section", field=unknown[0][:64],
                           fields={k[:64]: "unknown section" for k in unknown[:20]})
        settings.replace(parse_model(ConsoleSettings, settings.merged(data)))
        return document()
