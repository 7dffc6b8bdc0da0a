"""The concierge's one error root; the HTTP layer renders every subclass into the documented JSON shape."""

from __future__ import annotations

from typing import Any


class ConciergeError(Exception):
    """Root of every error the concierge raises on purpose."""

    status = 500
    message = "Internal server error"

    def __init__(self, message: str | None = None, **extra: Any) -> None:
        super().__init__(message or self.message)
        self.message = message or self.message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The JSON body sent to the client."""
        return {"error": self.message, **self.extra}


class AuthenticationRequired(ConciergeError):
    """No valid session: 401."""

    status = 401
    message = "Authentication required"


class Forbidden(ConciergeError):
    """Authenticated but not allowed (role, organization, CSRF): 403."""

    status = 403
    message = "Forbidden"


class NotFound(ConciergeError):
    """The resource does not exist in the caller's organization: 404."""

    status = 404
    message = "Not found"


class InvalidTransition(ConciergeError):
    """A state change not allowed from the current state: 400 with code INVALID_TRANSITION."""

    status = 400

    def __init__(self, machine: str, current: str, target: str) -> None:
        super().__init__(
            f"Cannot move {machine} from '{current}' to '{target}'",
            code="INVALID_TRANSITION",
            machine=machine,
            **{"from": current, "to": target},
        )


class BadRequest(ConciergeError):
    """A well-formed request the business rules refuse (not a state machine case): 400."""

    status = 400
    message = "Bad request"


class ValidationFailed(ConciergeError):
    """Body, query or path parameters do not match the route's schema: 422 with per-field details."""

    status = 422
    message = "Validation failed"

    def __init__(self, details: list[dict[str, Any]], message: str | None = None) -> None:
        super().__init__(message or self.message, details=details)


class Conflict(ConciergeError):
    """A concurrent or duplicate operation (idempotency key in flight, email taken): 409."""

    status = 409
    message = "Conflict"


class ServiceUnavailable(ConciergeError):
    """Capacity reached (stream caps): 503 with Retry-After."""

    status = 503
    message = "Service unavailable"

    def __init__(self, message: str | None = None, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UpstreamError(ConciergeError):
    """An external provider (PMS, payments, LLM) failed; callers decide whether to retry."""

    status = 502
    message = "Upstream provider failed"


class ConfigError(ConciergeError):
    """A configuration value is missing or malformed; names the key and the bad value."""
