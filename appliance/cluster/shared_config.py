"""What steers analysis, shared from the manager to every analyzer through Redis.

Standalone, the server and its analysis process share one SQLite database, and a change made over REST
reaches analysis by a reload message. In a cluster the analyzers keep their own databases, possibly on other
machines, so the manager writes the three documents that steer analysis -- the analysis config in force, the
exclusions, the console settings -- into the hash `cluster:config` and bumps `cluster:config_version`, at
start and after every change. Each analyzer reads the version once per loop (one GET) and, when it moved,
checks the documents, writes them into its own database and uses them, as the analysis process does after a
reload. A document that does not parse is refused whole, counted and logged; the analyzer keeps what it had.

Triage is the manager's too: every status an analyst sets there (one alert or in bulk) goes to the stream
`cluster:triage`, and each analyzer sets the same status on its copy of the alert, so that, as standalone, a
closed alert is never updated again and new detections open a new one.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from appliance.cluster.bus import ClusterError
from appliance.console_settings import ConsoleSettings
from appliance.detection.alert_query import STATUSES
from appliance.detection.analysis_config import AnalysisConfig
from appliance.detection.exclusions import SCOPES, Exclusion, classify

CONFIG = "cluster:config"
VERSION = "cluster:config_version"
FIELDS = ("analysis_config", "console_settings", "exclusions")
MAX_DOCUMENT_BYTES = 8 << 20  # far above any real config; a bigger one is refused before it is parsed
MAX_EXCLUSIONS = 100_000
TRIAGE = "cluster:triage"  # stream of {"i": alert id, "s": status}, one entry per triage change on the manager
TRIAGE_CURSOR = "cluster:triage_rowid"  # the last alert_history row of the manager's database sent to TRIAGE
TRIAGE_MAXLEN = 100_000  # an analyzer started later replays what is left of it


class ConfigRefused(ClusterError):
    """Shared documents an analyzer will not use (they do not parse, or are not what the manager writes)."""


def documents(stores: Any) -> dict[str, str]:
    """The manager's documents: the config and settings in force, every exclusion."""
    return {
        "analysis_config": stores.config.current.model_dump_json(),
        "console_settings": stores.console_settings.current.model_dump_json(),
        "exclusions": json.dumps([asdict(e) for e in stores.exclusions.all()]),
    }


def publish(client: Any, stores: Any) -> int:
    """Write the manager's documents and bump the version in one transaction; the new version."""
    pipe = client.pipeline(transaction=True)
    pipe.hset(CONFIG, mapping=documents(stores))
    pipe.incr(VERSION)
    return int(pipe.execute()[1])


def publish_triage(client: Any, alerts: Any) -> int:
    """Send the triage changes recorded since the last call (at most 1,000 a call); how many were sent."""
    cursor = client.get(TRIAGE_CURSOR)
    rows = alerts.triage_after(int(cursor) if cursor is not None and cursor.isdigit() else 0)
    if not rows:
        return 0
    pipe = client.pipeline(transaction=True)
    for _, alert_id, status in rows:
        pipe.xadd(TRIAGE, {"i": alert_id, "s": status}, maxlen=TRIAGE_MAXLEN, approximate=True)
    pipe.set(TRIAGE_CURSOR, rows[-1][0])
    pipe.execute()
    return len(rows)


def parse_triage(fields: dict[bytes, bytes]) -> tuple[str, str]:
    """(alert id, status) of a `cluster:triage` entry; ConfigRefused when it is not one."""
    alert_id, status = fields.get(b"i", b""), fields.get(b"s", b"")
    try:
        alert_id_text, status_text = alert_id.decode(), status.decode()
    except UnicodeDecodeError:
        raise ConfigRefused("a triage entry is not UTF-8") from None
    if not 0 < len(alert_id_text) <= 64 or status_text not in STATUSES:
        raise ConfigRefused(f"a triage entry is not an alert id and a status: {alert_id[:70]!r} {status[:30]!r}")
    return alert_id_text, status_text


def parse(fields: dict[bytes, bytes]) -> tuple[AnalysisConfig, ConsoleSettings, list[Exclusion]]:
    """The three documents of `cluster:config` as read by redis-py, checked; ConfigRefused when any is bad."""
    docs: dict[str, bytes] = {}
    for name in FIELDS:
        raw = fields.get(name.encode())
        if raw is None:
            raise ConfigRefused(f"{name} is missing")
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise ConfigRefused(f"{name} is {len(raw)} bytes (at most {MAX_DOCUMENT_BYTES})")
        docs[name] = raw
    try:
        config = AnalysisConfig.model_validate_json(docs["analysis_config"])
        console = ConsoleSettings.model_validate_json(docs["console_settings"])
        rows = json.loads(docs["exclusions"])
    except (ValidationError, ValueError) as err:
        raise ConfigRefused(f"a document does not parse: {str(err)[:300]}") from None
    if not isinstance(rows, list) or len(rows) > MAX_EXCLUSIONS:
        raise ConfigRefused(f"exclusions must be a list of at most {MAX_EXCLUSIONS} entries")
    return config, console, [_exclusion(row) for row in rows]


def _exclusion(row: Any) -> Exclusion:
    if not isinstance(row, dict) or set(row) != {"id", "value", "kind", "protocol", "agent_id", "comment", "created_at"}:
        raise ConfigRefused(f"an exclusion is not one: {str(row)[:200]}")
    strings = ("id", "value", "kind", "protocol", "comment")
    if not all(isinstance(row[k], str) for k in strings) or not (row["agent_id"] is None or isinstance(row["agent_id"], str)) \
            or isinstance(row["created_at"], bool) or not isinstance(row["created_at"], (int, float)):
        raise ConfigRefused(f"an exclusion has a field of the wrong type: {str(row)[:200]}")
    if row["protocol"] not in SCOPES:
        raise ConfigRefused(f"an exclusion's protocol is not one of {', '.join(SCOPES)}: {row['protocol'][:50]!r}")
    try:
        normalised = classify(row["value"])
    except ValueError as err:
        raise ConfigRefused(f"an exclusion's value does not parse: {err}") from None
    if normalised != (row["kind"], row["value"]):  # the manager stores values as classify() normalised them
        raise ConfigRefused(f"an exclusion's value is not in its normal form: {row['value'][:100]!r}")
    return Exclusion(**row)


def apply(stores: Any, config: AnalysisConfig, console: ConsoleSettings, exclusions: list[Exclusion]) -> None:
    """Use the documents on this analyzer: into its database and its stores (the console settings first: a new
    sensitivity moves the config's min_confidence, and the manager's config already holds that move)."""
    stores.console_settings.replace(console)
    stores.config.replace(config)
    stores.exclusions.replace_all(exclusions)
