"""Configuration read once from the environment into one typed object (the only place env is read)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from concierge.errors import ConfigError


def _bool(key: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{key}: expected true/false, got {raw!r}")


@dataclass(frozen=True)
class Settings:
    """Every knob of the concierge; `from_env` maps CONCIERGE_* and the issue's names onto it."""

    environment: str = "development"  # development | production
    host: str = "127.0.0.1"
    port: int = 8090  # beside the appliance (REST 8080, gRPC 50051, dashboard 3000) as shipped
    state_dir: Path = Path("var/concierge")
    database_url: str = ""  # empty: SQLite file under state_dir
    pubsub_url: str = ""  # empty: in-process; redis://host:port/db for several instances
    cors_origins: tuple[str, ...] = ()
    openapi_enabled: bool = False  # production only; development always serves /openapi
    trust_proxy: bool = False  # honour X-Forwarded-Proto / X-Forwarded-For from the reverse proxy
    session_idle_seconds: int = 2 * 3600
    session_absolute_seconds: int = 7 * 24 * 3600
    kdf_n: int = 2**14  # scrypt cost (memory = 128 * n * r bytes = 16 MiB)
    sse_heartbeat_seconds: float = 15.0
    sse_max_streams_per_user: int = 5
    sse_max_streams_total: int = 256
    sse_replay_size: int = 100
    request_threads: int = 24  # threads left for ordinary requests on top of the stream cap
    pms_adapter: str = "simulated"  # simulated | apaleo
    apaleo_client_id: str = ""
    apaleo_client_secret: str = ""
    apaleo_property_id: str = ""
    apaleo_base_url: str = "https://api.apaleo.com"
    apaleo_identity_url: str = "https://identity.apaleo.com"
    outbox_interval_seconds: float = 5.0
    payment_provider: str = "sandbox"  # sandbox | stripe
    stripe_api_key: str = ""
    stripe_base_url: str = "https://api.stripe.com"
    payment_webhook_secret: str = "whsec_sandbox"
    ai_provider: str = "offline"  # offline | openai
    ai_base_url: str = ""
    ai_api_key: str = ""
    ai_model: str = "gpt-4o-mini"
    check_responses: bool = False  # hold pre-encoded hot-path bodies to their response models (tests turn it on)
    invitation_ttl_seconds: int = 7 * 24 * 3600
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def production(self) -> bool:
        return self.environment == "production"

    @property
    def sqlite_path(self) -> Path:
        return self.state_dir / "concierge.sqlite3"

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed (tests, the demo)."""
        return replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Parse the environment; every bad value is reported at once, naming the key."""
        env = os.environ if env is None else env
        names = {
            "CONCIERGE_ENV": "environment",
            "HOST": "host",
            "PORT": "port",
            "CONCIERGE_STATE_DIR": "state_dir",
            "DATABASE_URL": "database_url",
            "PUBSUB_URL": "pubsub_url",
            "CORS_ORIGIN": "cors_origins",
            "OPENAPI_ENABLED": "openapi_enabled",
            "TRUST_PROXY": "trust_proxy",
            "SESSION_IDLE_SECONDS": "session_idle_seconds",
            "SESSION_ABSOLUTE_SECONDS": "session_absolute_seconds",
            "SSE_HEARTBEAT_SECONDS": "sse_heartbeat_seconds",
            "SSE_MAX_STREAMS_PER_USER": "sse_max_streams_per_user",
            "SSE_MAX_STREAMS_TOTAL": "sse_max_streams_total",
            "REQUEST_THREADS": "request_threads",
            "PMS_ADAPTER": "pms_adapter",
            "APALEO_CLIENT_ID": "apaleo_client_id",
            "APALEO_CLIENT_SECRET": "apaleo_client_secret",
            "APALEO_PROPERTY_ID": "apaleo_property_id",
            "PAYMENT_PROVIDER": "payment_provider",
            "STRIPE_API_KEY": "stripe_api_key",
            "PAYMENT_WEBHOOK_SECRET": "payment_webhook_secret",
            "AI_PROVIDER": "ai_provider",
            "AI_BASE_URL": "ai_base_url",
            "AI_API_KEY": "ai_api_key",
            "AI_MODEL": "ai_model",
            "CHECK_RESPONSES": "check_responses",
            "INVITATION_TTL_SECONDS": "invitation_ttl_seconds",
        }
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        problems: list[str] = []
        for key, attr in names.items():
            if key not in env:
                continue
            raw = env[key]
            kind = types[attr]
            try:
                if attr == "cors_origins":
                    values[attr] = tuple(o.strip().rstrip("/") for o in raw.split(",") if o.strip())
                elif kind == "bool":
                    values[attr] = _bool(key, raw)
                elif kind == "int":
                    values[attr] = int(raw)
                elif kind == "float":
                    values[attr] = float(raw)
                elif kind == "Path":
                    values[attr] = Path(raw)
                else:
                    values[attr] = raw
            except (ValueError, ConfigError) as err:
                problems.append(f"{key}={raw!r}: {err}")
        settings = cls(**values)
        problems.extend(settings.problems())
        if problems:
            raise ConfigError("invalid configuration: " + "; ".join(problems))
        return settings

    def problems(self) -> list[str]:
        """Cross-field checks, all reported together."""
        out = []
        if self.environment not in ("development", "production"):
            out.append(f"CONCIERGE_ENV={self.environment!r}: expected development or production")
        if self.database_url and not self.database_url.startswith(("postgresql://", "postgres://")):
            out.append(f"DATABASE_URL={self.database_url!r}: expected postgresql://...")
        if self.pubsub_url and not self.pubsub_url.startswith("redis://"):
            out.append(f"PUBSUB_URL={self.pubsub_url!r}: expected redis://...")
        if "*" in self.cors_origins:
            out.append("CORS_ORIGIN='*': list exact origins (credentials are allowed, so '*' is refused)")
        if self.pms_adapter not in ("simulated", "apaleo"):
            out.append(f"PMS_ADAPTER={self.pms_adapter!r}: expected simulated or apaleo")
        if self.payment_provider not in ("sandbox", "stripe"):
            out.append(f"PAYMENT_PROVIDER={self.payment_provider!r}: expected sandbox or stripe")
        if self.payment_provider == "stripe" and not self.stripe_api_key:
            out.append("STRIPE_API_KEY is required when PAYMENT_PROVIDER=stripe")
        if self.ai_provider not in ("offline", "openai"):
            out.append(f"AI_PROVIDER={self.ai_provider!r}: expected offline or openai")
        if self.ai_provider == "openai" and not self.ai_base_url:
            out.append("AI_BASE_URL is required when AI_PROVIDER=openai")
        if self.invitation_ttl_seconds < 60:
            out.append(f"INVITATION_TTL_SECONDS={self.invitation_ttl_seconds}: must be at least 60")
        if self.sse_max_streams_total < 1 or self.sse_max_streams_per_user < 1:
            out.append("SSE_MAX_STREAMS_*: must be at least 1")
        return out
