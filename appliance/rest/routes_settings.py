"""The console's settings (general, capture, detection, storage): GET the document, PUT partial sections."""

from __future__ import annotations

from typing import Any

from appliance.console_settings import ConsoleSettings, ConsoleSettingsStore
from appliance.detection.layers import LAYER_OF_CATEGORY
from appliance.rest.api import Api, parse_model


class SettingsReply(ConsoleSettings):
    layerOfCategory: dict[str, str]  # read-only: the detection layer each alert category belongs to


class SettingsPatch(ConsoleSettings):
    """Any subset of sections, each partial: every settings key has a default, so only what was sent is applied."""

    layerOfCategory: dict[str, str] | None = None  # read-only and ignored: a client may send back what it read


def install(api: Api, *, settings: ConsoleSettingsStore) -> None:
    """Declare the settings routes on `api`."""

    def document() -> dict[str, Any]:
        return {**settings.current.model_dump(mode="json"), "layerOfCategory": LAYER_OF_CATEGORY}

    @api.route("GET", "/api/v1/settings", "The console settings and the category -> layer map", tag="console",
               reply=SettingsReply)
    def get_settings() -> dict[str, Any]:
        return document()

    @api.route("PUT", "/api/v1/settings",
               "Change console settings: any subset of sections, each partial (validated whole, persisted, applied)",
               tag="console", body=SettingsPatch, reply=SettingsReply)
    def put_settings(body: SettingsPatch) -> dict[str, Any]:
        sent = body.model_dump(mode="json", exclude_unset=True, exclude={"layerOfCategory"})
        settings.replace(parse_model(ConsoleSettings, settings.merged(sent)))
        return document()
