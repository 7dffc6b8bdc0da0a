"""Schema-first routing: `Endpoint` declarations, the one Bottle plugin that enforces them, and OpenAPI 3.1 from the same models.

A route declares its access level and pydantic models for path params, query, body and response. The
`SchemaPlugin` authenticates, authorises, checks CSRF, validates every input in one pass (422 with all
field errors), calls the handler with a typed `Call`, and serialises the response through its model.
`openapi_document` renders the same declarations, so the documentation cannot drift from the checks.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Iterable, Mapping, Protocol

import bottle
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from concierge.errors import AuthenticationRequired, ConciergeError, Forbidden, ValidationFailed

log = logging.getLogger(__name__)


Email = Annotated[str, Field(pattern=r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$", min_length=3, max_length=254)]
Id = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


class Schema(BaseModel):
    """Base of every request model: camelCase on the wire, unknown body fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", str_strip_whitespace=True)


class QuerySchema(BaseModel):
    """Base of query-string models: camelCase, unknown parameters ignored (caches and trackers add some)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", str_strip_whitespace=True)


class OutSchema(BaseModel):
    """Base of response models: camelCase on the wire."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, from_attributes=True)


class ErrorOut(OutSchema):
    """The one error shape: `error` always; `code`, `details`, `from`/`to` when they apply."""

    model_config = ConfigDict(extra="allow")
    error: str
    code: str | None = None
    details: list[dict[str, Any]] | None = None


class Access(enum.Enum):
    """Access levels, lowest to highest; roles that pass each are in `ROLE_LEVELS`."""

    PUBLIC = "public"
    AUTH = "auth"  # any signed-in user
    GUEST = "guest"  # the guest role only
    STAFF = "staff"  # staff, manager, admin, owner
    ADMIN = "admin"  # admin, owner


ROLES = ("guest", "staff", "manager", "admin", "owner")
ROLE_LEVELS: dict[Access, frozenset[str]] = {
    Access.GUEST: frozenset({"guest"}),
    Access.STAFF: frozenset({"staff", "manager", "admin", "owner"}),
    Access.ADMIN: frozenset({"admin", "owner"}),
}
FORBIDDEN_MESSAGES = {
    Access.GUEST: "This action is for guests only",
    Access.STAFF: "Staff role required",
    Access.ADMIN: "Admin role required",
}


@dataclass(frozen=True)
class Endpoint:
    """One route's contract."""

    method: str
    path: str  # bottle syntax: /guests/<guest_id>
    summary: str
    access: Access = Access.AUTH
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    params: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    status: int = 200
    stream: bool = False  # text/event-stream; the handler returns an iterator
    csrf: bool = True  # cookie-authenticated state changes need X-CSRF-Token
    headers: tuple[tuple[str, bool, str], ...] = ()  # (name, required, description) documented request headers
    tag: str = ""


@dataclass
class Call:
    """What a handler receives: the validated inputs and the caller."""

    auth: Any  # AuthContext | None
    params: Any = None
    query: Any = None
    body: Any = None
    raw_body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str = ""


class Authenticator(Protocol):
    """What the plugin needs from the session layer (implemented by `sessions.SessionService`)."""

    def authenticate(self, request: bottle.BaseRequest) -> Any: ...
    def resolve_role(self, auth: Any) -> str | None: ...


def _field_errors(err: ValidationError, location: str) -> list[dict[str, Any]]:
    out = []
    for item in err.errors(include_url=False):
        loc = ".".join(str(p) for p in item.get("loc", ()))
        out.append({"location": location, "field": loc, "message": item.get("msg", "invalid"), "type": item.get("type", "")})
    return out


@dataclass(frozen=True)
class Encoded:
    """A response body a hot-path handler encoded itself from rows whose types the schema already fixes.

    Production sends it as is (validating 100 already-typed rows per request was a third of the guest
    list's cost); with `check_responses` on (the tests) the plugin holds it to the endpoint's model.
    """

    json: bytes


class ResponseContractError(Exception):
    """A handler's pre-encoded body does not match its endpoint's response model (a bug: answered as 500)."""


def _check_encoded(model: type[BaseModel], body: bytes) -> None:
    """Strict validation plus a round trip: the body must be exactly what the model would have produced."""
    try:
        parsed = model.model_validate_json(body, strict=True)
    except ValidationError as err:
        raise ResponseContractError(f"{model.__name__}: {err}") from err
    if json.loads(parsed.model_dump_json(by_alias=True)) != json.loads(body):
        raise ResponseContractError(f"{model.__name__}: the encoded body differs from the model's own serialisation")


def _dump(model: type[BaseModel], result: Any, check: bool = False) -> str | bytes:
    """The response body as JSON, serialised by pydantic-core (no intermediate dicts) unless pre-encoded."""
    if isinstance(result, Encoded):
        if check:
            _check_encoded(model, result.json)
        return result.json
    if not isinstance(result, model):
        result = model.model_validate(result)
    return result.model_dump_json(by_alias=True)


class SchemaPlugin:
    """Bottle plugin (api 2): applies an `Endpoint` found in the route's config under `endpoint`."""

    name = "schema"
    api = 2

    def __init__(self, authenticator: Authenticator, check_responses: bool = False) -> None:
        self.authenticator = authenticator
        self.check_responses = check_responses

    def apply(self, callback: Callable[..., Any], route: bottle.Route) -> Callable[..., Any]:
        endpoint: Endpoint | None = route.config.get("endpoint")
        if endpoint is None:
            return callback

        def wrapper(**url_args: str) -> Any:
            request = bottle.request
            auth = self.authenticator.authenticate(request)
            self._authorise(endpoint, auth, request)
            call = self._validate(endpoint, url_args, request)
            call.auth = auth
            result = callback(call)
            bottle.response.status = endpoint.status
            if endpoint.stream:
                return result
            if endpoint.response is None:
                return ""
            bottle.response.content_type = "application/json"
            return _dump(endpoint.response, result, self.check_responses)

        return wrapper

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def _default_query(model: type[BaseModel]) -> BaseModel:
        """The query model with every default (no query string): validated once per model, then shared;
        handlers read queries and never change them."""
        return model.model_validate({})

    def _authorise(self, endpoint: Endpoint, auth: Any, request: bottle.BaseRequest) -> None:
        if endpoint.access is Access.PUBLIC:
            return
        if auth is None:
            raise AuthenticationRequired()
        if endpoint.access in ROLE_LEVELS:
            role = self.authenticator.resolve_role(auth)
            if role not in ROLE_LEVELS[endpoint.access]:
                raise Forbidden(FORBIDDEN_MESSAGES[endpoint.access])
        if endpoint.csrf and request.method in ("POST", "PUT", "PATCH", "DELETE") and auth.via_cookie:
            if not auth.csrf_matches(request.headers.get("X-CSRF-Token", "")):
                raise Forbidden("Missing or invalid CSRF token (send the X-CSRF-Token header)")

    def _validate(self, endpoint: Endpoint, url_args: Mapping[str, str], request: bottle.BaseRequest) -> Call:
        details: list[dict[str, Any]] = []
        call = Call(auth=None, headers=request.headers, request_id=request.environ.get("concierge.request_id", ""))
        if endpoint.params is not None:
            try:
                call.params = endpoint.params.model_validate(dict(url_args))
            except ValidationError as err:
                details += _field_errors(err, "path")
        if endpoint.query is not None:
            try:
                raw_query = request.environ.get("QUERY_STRING", "")
                call.query = self._default_query(endpoint.query) if not raw_query else endpoint.query.model_validate(dict(request.query.decode().items()))
            except ValidationError as err:
                details += _field_errors(err, "query")
        if endpoint.body is not None:
            raw = request.body.read()
            call.raw_body = raw
            try:
                call.body = endpoint.body.model_validate_json(raw or b"{}")
            except ValidationError as err:
                details += _field_errors(err, "body")
        if details:
            raise ValidationFailed(details)
        return call


class Api:
    """Collects the endpoints of every module, mounts them on one Bottle app, and documents them."""

    def __init__(self, app: bottle.Bottle) -> None:
        self.app = app
        self.endpoints: list[Endpoint] = []

    def route(self, endpoint: Endpoint) -> Callable[[Callable[[Call], Any]], Callable[[Call], Any]]:
        def register(handler: Callable[[Call], Any]) -> Callable[[Call], Any]:
            self.app.route(endpoint.path, method=endpoint.method, callback=handler, endpoint=endpoint)
            self.endpoints.append(endpoint)
            return handler

        return register

    def mount(self, prefix: str, tag: str, routes: Iterable[tuple[Endpoint, Callable[[Call], Any]]]) -> None:
        """Mount a module's (endpoint, handler) pairs under its prefix, tagged for the docs."""
        for endpoint, handler in routes:
            full = Endpoint(**{**endpoint.__dict__, "path": prefix + endpoint.path, "tag": tag})
            self.route(full)(handler)


def _openapi_path(path: str) -> str:
    import re

    return re.sub(r"<(\w+)(?::[^>]*)?>", r"{\1}", path)


class _Components:
    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def ref(self, model: type[BaseModel], mode: str) -> dict[str, str]:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}", mode=mode)  # type: ignore[arg-type]
        for name, sub in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, sub)
        self.schemas.setdefault(model.__name__, schema)
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def parameters(self, model: type[BaseModel], where: str) -> list[dict[str, Any]]:
        # path parameters keep the route's own names ({guest_id}); query parameters are camelCase on the wire
        schema = model.model_json_schema(by_alias=where != "path", ref_template="#/components/schemas/{model}", mode="validation")
        for name, sub in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, sub)
        required = set(schema.get("required", ()))
        out = []
        for name, prop in schema.get("properties", {}).items():
            param: dict[str, Any] = {"name": name, "in": where, "required": where == "path" or name in required, "schema": prop}
            if "description" in prop:
                param["description"] = prop["description"]
            out.append(param)
        return out


def openapi_document(endpoints: Iterable[Endpoint], title: str, version: str, description: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 document for the given endpoints, generated from their pydantic models."""
    comps = _Components()
    error_ref = comps.ref(ErrorOut, "serialization")
    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        op: dict[str, Any] = {"summary": ep.summary, "operationId": f"{ep.method.lower()}{_openapi_path(ep.path).replace('/', '_').replace('{', '').replace('}', '').replace('-', '_')}"}
        if ep.tag:
            op["tags"] = [ep.tag]
        params: list[dict[str, Any]] = []
        if ep.params is not None:
            params += comps.parameters(ep.params, "path")
        if ep.query is not None:
            params += comps.parameters(ep.query, "query")
        for name, required, desc in ep.headers:
            params.append({"name": name, "in": "header", "required": required, "description": desc, "schema": {"type": "string", "minLength": 1, "maxLength": 255}})
        if params:
            op["parameters"] = params
        if ep.body is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": comps.ref(ep.body, "validation")}}}
        responses: dict[str, Any] = {}
        if ep.stream:
            event = {
                "type": "object",
                "description": "One server-sent event: `ready` ({\"connected\": true}) first, then `status` events with increasing ids",
                "properties": {"event": {"enum": ["ready", "status"]}, "data": {"type": "string", "contentMediaType": "application/json"}, "id": {"type": "string"}},
                "required": ["event", "data"],
            }
            responses[str(ep.status)] = {"description": "Server-sent events", "content": {"text/event-stream": {"schema": event}}}
        elif ep.response is None:
            responses[str(ep.status)] = {"description": "No content"}
        else:
            responses[str(ep.status)] = {"description": "OK", "content": {"application/json": {"schema": comps.ref(ep.response, "serialization")}}}
        err = {"content": {"application/json": {"schema": error_ref}}}
        if ep.access is not Access.PUBLIC:
            responses["401"] = {"description": "Authentication required", **err}
        if ep.access in ROLE_LEVELS or (ep.access is not Access.PUBLIC and ep.method != "GET"):
            responses["403"] = {"description": "Role not allowed, or CSRF token missing", **err}
        if ep.params is not None or ep.query is not None or ep.body is not None:
            responses["422"] = {"description": "Validation failed (per-field details)", **err}
        responses["default"] = {"description": "Error (400 INVALID_TRANSITION, 404, 409, 503, 500)", **err}
        op["responses"] = responses
        if ep.access is not Access.PUBLIC:
            op["security"] = [{"sessionCookie": [], "csrfHeader": []}] if ep.method != "GET" else [{"sessionCookie": []}]
        paths.setdefault(_openapi_path(ep.path), {})[ep.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "paths": paths,
        "components": {
            "schemas": comps.schemas,
            "securitySchemes": {
                "sessionCookie": {"type": "apiKey", "in": "cookie", "name": "concierge_session"},
                "csrfHeader": {"type": "apiKey", "in": "header", "name": "X-CSRF-Token"},
            },
        },
    }


def error_json(err: ConciergeError) -> str:
    return json.dumps(err.body(), separators=(",", ":"))
