"""The one error root of the appliance package; each subclass says what went wrong where."""

from __future__ import annotations


class ApplianceError(Exception):
    """Root of every error the appliance raises on purpose."""


class ConfigError(ApplianceError):
    """The configuration file or a value in it is invalid; the message names key and value."""


class ApiError(ApplianceError):
    """An error the REST layer renders as `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str, *, code: str | None = None, field: str | None = None,
                 fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.field = field
        self.fields = fields  # 422: every bad field and its message


class NotFound(ApiError):
    """The addressed resource does not exist."""

    def __init__(self, message: str = "Not found") -> None:
        super().__init__(404, message)


class Unprocessable(ApiError):
    """The request parsed but a field holds a bad value; the message names the field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(422, f"{field}: {reason}", field=field)
