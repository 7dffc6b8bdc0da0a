"""The REST framework of the appliance: one Bottle app, one route table, one error shape.

Routes are declared with `Api.route(...)`: method, path, summary, whether they are public, and
the pydantic models of their body and reply. The same table drives authentication, request
parsing, error rendering and the OpenAPI document, so none of them can drift from the others.

Errors: every failure answers `{"error": message}` (plus `code` or `field` where one applies)
with a fitting status. Nothing renders an HTML page or a stack trace.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import bottle
from pydantic import BaseModel, ValidationError

from appliance.errors import ApiError, Unprocessable

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

_REASONS = {
    400: "Bad request",
    401: "Authentication required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    411: "Length required",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Unprocessable entity",
    500: "Internal server error",
}


@dataclass(frozen=True)
class RouteSpec:
    """One REST route as documented and enforced."""

    method: str
    path: str  # bottle syntax, e.g. /api/v1/flows/<flow_id>
    summary: str
    handler: Callable[..., Any]
    public: bool = False
    tag: str = "appliance"
    body: type[BaseModel] | None = None
    reply: type[BaseModel] | None = None
    query: dict[str, str] = field(default_factory=dict)  # name -> description
    auth: str = "admin"  # admin | deploy | none


def error_body(status: int, message: str, code: str | None = None, field_name: str | None = None,
               fields: dict[str, str] | None = None) -> str:
    payload: dict[str, Any] = {"error": message}
    if code:
        payload["code"] = code
    if field_name:
        payload["field"] = field_name
    if fields:
        payload["fields"] = fields
    return json.dumps(payload)


def json_response(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> bottle.HTTPResponse:
    response = bottle.HTTPResponse(json.dumps(payload, default=str), status=status)
    response.content_type = "application/json"
    for key, value in (headers or {}).items():
        response.set_header(key, value)
    return response


def tokens_equal(presented: str, expected: str) -> bool:
    """Constant-time comparison of two secrets (length leaks, content does not)."""
    return hmac.compare_digest(presented.encode("utf-8", "surrogateescape"), expected.encode("utf-8"))


def bearer_token() -> str:
    # Straight from the WSGI environ (a latin-1 str): Bottle's header accessor decodes and raises
    # on bytes that are not UTF-8, which must be a 401 like any other bad token, not a 500.
    header = bottle.request.environ.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


class Api:
    """Owns the Bottle app and the route table; renders every error in the one JSON shape."""

    def __init__(self, admin_token: str, max_body_bytes: int = 1024 * 1024) -> None:
        self._admin_token = admin_token
        self.max_body_bytes = max_body_bytes
        self.routes: list[RouteSpec] = []
        self.app = bottle.Bottle(catchall=True)
        self.app.config["json.enable"] = False
        self.app.default_error_handler = self._render_bottle_error  # type: ignore[method-assign]
        self.extra_auth: dict[str, Callable[[], bool]] = {}

    # -- declaration ----------------------------------------------------------------------
    def route(self, method: str, path: str, summary: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
            self.add(RouteSpec(method=method, path=path, summary=summary, handler=handler, **options))
            return handler

        return decorate

    def add(self, spec: RouteSpec) -> None:
        self.routes.append(spec)
        self.app.route(spec.path, method=spec.method, callback=self._wrap(spec))

    # -- per request --------------------------------------------------------------------
    def _authorised(self, spec: RouteSpec) -> bool:
        if spec.public or spec.auth == "none":
            return True
        if spec.auth in self.extra_auth:
            return self.extra_auth[spec.auth]()
        token = bearer_token()
        return bool(token) and tokens_equal(token, self._admin_token)

    def _wrap(self, spec: RouteSpec) -> Callable[..., Any]:
        def callback(**url_args: Any) -> Any:
            try:
                if not self._authorised(spec):
                    raise ApiError(401, "Authentication required")
                result = spec.handler(**url_args)
            except ApiError as err:
                return json_response_error(err)
            except bottle.HTTPResponse:
                raise
            except Exception:  # one error shape; the traceback goes to the log only
                log.exception("unhandled error in %s %s", spec.method, spec.path)
                return json_response_error(ApiError(500, "Internal server error"))
            if isinstance(result, bottle.HTTPResponse):
                return result
            if isinstance(result, BaseModel):
                result = result.model_dump(mode="json")
            return json_response(result)

        return callback

    def _render_bottle_error(self, res: bottle.HTTPError) -> str:
        """Errors Bottle raises itself (404 no route, 405 wrong method, 500 from catchall)."""
        bottle.response.content_type = "application/json"
        status = res.status_code
        if status >= 500 and res.exception is not None:
            log.error("unhandled error: %r", res.exception)
        message = _REASONS.get(status, "Error")
        return error_body(status, message)


def json_response_error(err: ApiError) -> bottle.HTTPResponse:
    response = bottle.HTTPResponse(error_body(err.status, err.message, err.code, err.field, err.fields), status=err.status)
    response.content_type = "application/json"
    return response


# -- request parsing helpers used by route modules --------------------------------------------
def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def read_json(max_bytes: int) -> Any:
    """The request body as JSON; 415 unless it says it is JSON, 413 beyond `max_bytes`, 400 when it is not JSON.

    A form post (`text/plain`, `application/x-www-form-urlencoded`) is a "simple" request a browser
    sends cross-site without asking first; requiring the JSON media type keeps such pages out.
    """
    if not _is_json(bottle.request.environ.get("CONTENT_TYPE", "")):
        raise ApiError(415, "Send the body as application/json")
    length = bottle.request.content_length
    if length > max_bytes:
        raise ApiError(413, f"Request body too large (limit {max_bytes} bytes)")
    raw = bottle.request.body.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ApiError(413, f"Request body too large (limit {max_bytes} bytes)")
    if not raw:
        raise ApiError(400, "Request body must be JSON")
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "Request body is not valid JSON") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is too large")
    return value


def _reject_constant(name: str) -> Any:
    """NaN and Infinity are not JSON; Python's parser accepts them unless told otherwise."""
    raise ValueError(f"{name} is not a JSON value")


def parse_model(model: type[M], data: Any) -> M:
    """Validate `data` into `model`; 422 naming the first bad field (all listed in the message)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = []
        fields: dict[str, str] = {}
        first = None
        for e in err.errors():
            name = ".".join(str(p) for p in e["loc"]) or "body"
            first = first or name
            reason = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
            problems.append(f"{name}: {reason}")
            fields.setdefault(name, reason)
        raise ApiError(422, "; ".join(problems), field=first, fields=fields) from None


def read_body(model: type[M], max_bytes: int) -> M:
    return parse_model(model, read_json(max_bytes))


def query_int(name: str, default: int, low: int, high: int) -> int:
    raw = bottle.request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Unprocessable(name, f"must be an integer (got {raw[:40]!r})") from None
    if not low <= value <= high:
        raise Unprocessable(name, f"must be between {low} and {high} (got {value})")
    return value


def query_str(name: str, max_len: int = 256) -> str | None:
    raw = bottle.request.query.getunicode(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_len:
        raise Unprocessable(name, f"longer than {max_len} characters")
    return raw


def query_choice(name: str, choices: set[str]) -> str | None:
    raw = query_str(name)
    if raw is not None and raw not in choices:
        raise Unprocessable(name, f"must be one of {', '.join(sorted(choices))} (got {raw[:40]!r})")
    return raw
