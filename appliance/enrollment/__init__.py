"""Agent enrollment: single-use tokens, per-agent certificates, install scripts, certificate binding."""

from appliance.enrollment.service import (
    AGENT_BINARIES,
    DRIVER_FILES,
    Endpoints,
    EnrollmentScript,
    EnrollmentService,
    NewToken,
    PayloadMissing,
    StreamGate,
    default_endpoints,
    request_host,
)
from appliance.enrollment.store import EnrollmentError, EnrollmentStore, TokenRefused

__all__ = [
    "AGENT_BINARIES", "DRIVER_FILES", "Endpoints", "EnrollmentError", "EnrollmentScript", "EnrollmentService",
    "EnrollmentStore", "NewToken", "PayloadMissing", "StreamGate", "TokenRefused", "default_endpoints",
    "request_host",
]
