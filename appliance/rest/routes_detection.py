"""Detection routes: alerts and triage, exclusions (whitelist), signatures, analysis config."""

from __future__ import annotations

import datetime as dt
import csv
import io
import json
import re
from typing import Annotated, Any, Literal

import bottle
from pydantic import BaseModel, ConfigDict, Field

from appliance.detection.alert_query import FILTER_NAMES, AlertFilter, QueryError, parse_filter, parse_order
from appliance.detection.alerts import Alert, AlertStore, InvalidTransition
from appliance.detection.analysis_config import AnalysisConfig, AnalysisConfigHolder
from appliance.detection.exclusions import SCOPES, BlanketExclusion, Exclusion, ExclusionStore
from appliance.detection.signatures.engine import SignatureEngine
from appliance.detection.signatures.rules import Rule, RuleError
from appliance.errors import ApiError, NotFound, Unprocessable
from appliance.model import Category, Severity
from appliance.rest.api import Api, json_response, parse_model, query_choice, query_int, query_str, read_body, read_json


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_view(alert: Alert) -> dict[str, Any]:
    return {
        "id": alert.id, "category": alert.category, "confidence": alert.confidence,
        "severity": Severity(alert.severity).label, "summary": alert.summary, "status": alert.status,
        "agent_id": alert.agent_id, "indicator": alert.indicator, "first_seen": _iso(alert.first_ns),
        "last_seen": _iso(alert.last_ns), "detection_count": alert.detection_count,
        "detections": [{"detector": d["detector"], "category": d["category"], "confidence": d["confidence"],
                        "severity": d.get("severity"), "evidence": d["evidence"], "flow_ids": d.get("flow_ids", []),
                        "first_seen": _iso(d["first_ns"]), "last_seen": _iso(d["last_ns"])} for d in alert.detections],
    }


def detail_view(alert: Alert, history: list[dict[str, Any]]) -> dict[str, Any]:
    """alert_view plus the triage history and the ids of every flow its detections cite."""
    flows = list(dict.fromkeys(f for d in alert.detections for f in d.get("flow_ids", [])))
    changes = [{**h, "at": dt.datetime.fromtimestamp(h["at"], dt.timezone.utc).isoformat(timespec="milliseconds")
                .replace("+00:00", "Z")} for h in history]
    return {**alert_view(alert), "history": changes, "flows": flows[:200]}


def exclusion_view(e: Exclusion, blanket: bool = False) -> dict[str, Any]:
    return {"id": e.id, "value": e.value, "kind": e.kind, "protocol": e.protocol, "agent_id": e.agent_id,
            "blanket": blanket,
            "comment": e.comment, "created_at": dt.datetime.fromtimestamp(e.created_at, dt.timezone.utc).isoformat(timespec="seconds")}


Status = Literal["New", "Acknowledged", "Investigating", "Resolved", "FalsePositive"]


class StatusBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Status
    note: str = Field(default="", max_length=1000)


class BulkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filter: dict[Literal[FILTER_NAMES], Annotated[str, Field(max_length=4096)]] = Field(default_factory=dict)  # type: ignore[valid-type]
    status: Status
    note: str = Field(default="", max_length=1000)
    all: bool = False  # required to act on every alert with an empty filter


FILTER_DOCS = {
    "status": "comma-separated triage statuses", "severity": "Low, Medium, High, Critical (comma-separated)",
    "category": "comma-separated categories", "agent_id": "comma-separated agent ids",
    "indicator": "comma-separated indicators", "not_status": "exclude these statuses",
    "not_severity": "exclude these severities", "not_category": "exclude these categories",
    "not_agent_id": "exclude these agents", "not_indicator": "exclude these indicators",
    "since": "last seen at or after: ISO 8601 or relative (-15m, -24h, -7d)", "until": "last seen at or before",
}
EXPORT_CAP = 100_000
EXPORT_COLUMNS = ("id", "first_seen", "last_seen", "severity", "category", "status", "agent_id", "indicator",
                  "confidence", "detection_count", "summary")
CONSOLE_USER = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def csv_cell(value: Any) -> Any:
    """Spreadsheet formula injection: a text cell that starts like a formula is prefixed with a quote."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def console_actor() -> str:
    """Who triages: the console user the dashboard names (only admin-token requests get here), else the token."""
    raw = bottle.request.environ.get("HTTP_X_CONSOLE_USER", "")
    if not raw:
        return "admin-token"
    if not CONSOLE_USER.match(raw):
        raise Unprocessable("X-Console-User", "must be 1-64 letters, digits, dot, underscore or hyphen")
    return raw


class ExclusionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: str = Field(min_length=1, max_length=253)
    protocol: Literal["dns", "http", "tls", "icmp", "tcp", "udp", "any"] = "any"
    agent_id: str | None = Field(default=None, max_length=64)
    comment: str = Field(default="", max_length=1000)
    # Required (true) for a blanket entry such as 0.0.0.0/0, ::/0 or a public suffix.
    confirm_blanket: bool = False


class ToggleBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool | None = None


def rule_view(rule: Rule) -> dict[str, Any]:
    return {**rule.to_dict(), "file": rule.source}


def install(api: Api, *, alerts: AlertStore, exclusions: ExclusionStore, signatures: SignatureEngine,
            config: AnalysisConfigHolder) -> None:
    """Declare the detection routes on `api`."""
    severities = {s.label for s in Severity}

    def parsed_filter(get: Any) -> AlertFilter:
        try:
            return parse_filter(get)
        except QueryError as err:
            raise Unprocessable(err.field, err.reason) from err

    def query_filter() -> AlertFilter:
        return parsed_filter(lambda name: query_str(name, 4096))

    @api.route("GET", "/api/v1/alerts", "Alerts matching a filter, one page in the chosen order", tag="detection",
               query={**FILTER_DOCS, "sort": "-last_seen (default), last_seen, -severity, severity, -first_seen, first_seen",
                      "cursor": "next_cursor of the previous page", "limit": "1-1000, default 100"})
    def list_alerts() -> dict[str, Any]:
        flt = query_filter()
        try:
            order = parse_order(query_str("sort", 32), query_str("cursor", 1024))
        except QueryError as err:
            raise Unprocessable(err.field, err.reason) from err
        limit = query_int("limit", 100, 1, 1000)
        items, next_cursor, total = alerts.search(flt, order, limit)
        return {"alerts": [alert_view(a) for a in items], "count": len(items), "total": total, "next_cursor": next_cursor}

    @api.route("GET", "/api/v1/alerts/groups", "Matching alerts grouped by category + agent + indicator", tag="detection",
               query={**FILTER_DOCS, "limit": "groups, 1-1000, default 100"})
    def alert_groups() -> dict[str, Any]:
        flt = query_filter()
        limit = query_int("limit", 100, 1, 1000)
        groups = [{"key": f"{g['category']}|{g['agent_id']}|{g['indicator']}", "category": g["category"],
                   "agent_id": g["agent_id"], "indicator": g["indicator"], "count": g["count"],
                   "first_seen": _iso(g["first_ns"]), "last_seen": _iso(g["last_ns"]),
                   "severity": Severity(g["severity"]).label, "statuses": g["statuses"], "alert_ids": g["alert_ids"]}
                  for g in alerts.groups(flt, limit)]
        return {"groups": groups, "count": len(groups)}

    @api.route("GET", "/api/v1/alerts/export", "Every matching alert as a CSV or JSON attachment", tag="detection",
               query={**FILTER_DOCS, "format": "csv (default) or json"})
    def export_alerts() -> bottle.HTTPResponse:
        fmt = query_choice("format", {"csv", "json"}) or "csv"
        items = alerts.matching(query_filter(), EXPORT_CAP)
        if fmt == "json":
            body = json.dumps({"alerts": [alert_view(a) for a in items], "count": len(items)})
            ctype = "application/json"
        else:
            out = io.StringIO()
            writer = csv.writer(out)
            writer.writerow(EXPORT_COLUMNS)
            for a in items:
                view = alert_view(a)
                writer.writerow([csv_cell(view[c]) for c in EXPORT_COLUMNS])
            body, ctype = out.getvalue(), "text/csv; charset=utf-8"
        response = bottle.HTTPResponse(body, status=200)
        response.content_type = ctype
        response.set_header("Content-Disposition", f'attachment; filename="alerts.{fmt}"')
        response.set_header("X-Content-Type-Options", "nosniff")
        return response

    @api.route("POST", "/api/v1/alerts/bulk", "Move every alert the filter matches (not only a page) to a status",
               tag="detection", body=BulkBody)
    def bulk_status() -> dict[str, Any]:
        body = read_body(BulkBody, api.max_body_bytes)
        flt = parsed_filter(lambda name: body.filter.get(name))
        if flt.empty and not body.all:
            raise ApiError(422, "filter: empty; send \"all\": true to change every alert", field="filter",
                           fields={"filter": "empty; send all: true to change every alert"})
        return alerts.bulk_status(flt, body.status, actor=console_actor(), note=body.note)

    @api.route("GET", "/api/v1/alerts/<alert_id>", "One alert with its detections, flows and triage history", tag="detection")
    def get_alert(alert_id: str) -> dict[str, Any]:
        alert = alerts.get(alert_id)
        if alert is None:
            raise NotFound(f"No alert with id {alert_id[:64]!r}")
        return detail_view(alert, alerts.history(alert.id))

    @api.route("DELETE", "/api/v1/alerts/<alert_id>", "Delete an alert", tag="detection")
    def delete_alert(alert_id: str) -> dict[str, Any]:
        if not alerts.delete(alert_id):
            raise NotFound(f"No alert with id {alert_id[:64]!r}")
        return {"deleted": alert_id}

    @api.route("POST", "/api/v1/alerts/<alert_id>/status", "Move an alert through triage", tag="detection", body=StatusBody)
    def alert_status(alert_id: str) -> dict[str, Any]:
        body = read_body(StatusBody, api.max_body_bytes)
        try:
            alert = alerts.set_status(alert_id, body.status, actor=console_actor(), note=body.note)
        except InvalidTransition as err:
            raise ApiError(400, str(err), code="INVALID_TRANSITION") from err
        if alert is None:
            raise NotFound(f"No alert with id {alert_id[:64]!r}")
        return detail_view(alert, alerts.history(alert.id))

    @api.route("GET", "/api/v1/whitelist", "Exclusions", tag="detection")
    def list_exclusions() -> dict[str, Any]:
        items = [exclusion_view(e, exclusions.is_blanket(e)) for e in exclusions.all()]
        return {"entries": items, "count": len(items), "scopes": list(SCOPES)}

    @api.route("POST", "/api/v1/whitelist", "Add an exclusion (IP, CIDR or domain; a domain covers its subdomains)",
               tag="detection", body=ExclusionBody)
    def add_exclusion() -> bottle.HTTPResponse | dict[str, Any]:
        body = read_body(ExclusionBody, api.max_body_bytes)
        try:
            entry = exclusions.add(body.value, body.protocol, body.agent_id, body.comment,
                                   confirm_blanket=body.confirm_blanket)
        except BlanketExclusion as err:
            raise ApiError(422, f"value: {err}", code="BLANKET_EXCLUSION", field="value") from err
        except ValueError as err:
            raise ApiError(422, f"value: {err}", field="value") from err
        return json_response(exclusion_view(entry, exclusions.is_blanket(entry)), status=201)

    @api.route("DELETE", "/api/v1/whitelist/<entry_id>", "Remove an exclusion", tag="detection")
    def delete_exclusion(entry_id: str) -> dict[str, Any]:
        if not exclusions.delete(entry_id):
            raise NotFound(f"No exclusion with id {entry_id[:64]!r}")
        return {"deleted": entry_id}

    def signatures_state() -> dict[str, Any]:
        return {"rules": [rule_view(r) for r in signatures.ruleset.rules], "loaded": signatures.loaded,
                "directory": str(signatures.directory), "last_error": signatures.last_error,
                "reloads": signatures.reloads, "reload_failures": signatures.reload_failures,
                "last_reload_at": signatures.last_reload_at}

    @api.route("GET", "/api/v1/signatures", "Loaded rules and the outcome of the last reload", tag="detection")
    def list_signatures() -> dict[str, Any]:
        return signatures_state()

    def rule_errors(err: RuleError) -> ApiError:
        return ApiError(422, "; ".join(err.problems), code="INVALID_RULE",
                        field=err.problems[0].split(": ")[1] if err.problems and err.problems[0].count(": ") >= 2 else None)

    @api.route("POST", "/api/v1/signatures", "Create or update a rule (validated, written atomically, reloaded)", tag="detection")
    def save_signature() -> dict[str, Any]:
        data = read_json(api.max_body_bytes)
        try:
            rule = signatures.save(data)
        except RuleError as err:
            raise rule_errors(err) from err
        return {"rule": rule_view(rule), "loaded": signatures.loaded}

    @api.route("POST", "/api/v1/signatures/validate", "Validate a rule without writing it", tag="detection")
    def validate_signature() -> dict[str, Any]:
        data = read_json(api.max_body_bytes)
        try:
            rule = signatures.validate(data)
        except RuleError as err:
            raise rule_errors(err) from err
        return {"valid": True, "rule": rule.to_dict()}

    @api.route("POST", "/api/v1/signatures/<rule_id>/toggle", "Enable or disable a rule (persisted in its file)",
               tag="detection")
    def toggle_signature(rule_id: str) -> dict[str, Any]:
        enabled = None
        if bottle.request.content_length:
            enabled = parse_model(ToggleBody, read_json(api.max_body_bytes)).enabled
        try:
            rule = signatures.toggle(rule_id, enabled)
        except RuleError as err:
            raise rule_errors(err) from err
        if rule is None:
            raise NotFound(f"No rule with id {rule_id[:64]!r}")
        return {"rule": rule_view(rule)}

    @api.route("POST", "/api/v1/signatures/reload", "Reload the signatures directory now", tag="detection")
    def reload_signatures() -> dict[str, Any]:
        signatures.reload()
        return signatures_state()

    @api.route("GET", "/api/v1/config", "The analysis config in force", tag="detection")
    def get_config() -> dict[str, Any]:
        return config.current.model_dump(mode="json")

    @api.route("POST", "/api/v1/config", "Replace the analysis config (validated, persisted, used for the next flows)",
               tag="detection", body=AnalysisConfig)
    def set_config() -> dict[str, Any]:
        new = read_body(AnalysisConfig, api.max_body_bytes)
        config.replace(new)
        return new.model_dump(mode="json")
