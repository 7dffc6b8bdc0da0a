"""OpenAPI 3.1 document generated from the route table (the same table that serves requests)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from appliance import __version__
from appliance.rest.api import Declared, ErrorReply, Media, Param, RouteSpec

_PARAM = re.compile(r"<([a-zA-Z_][a-zA-Z0-9_]*)(?::[^>]*)?>")


class _Components:
    """The shared schemas: each model once, under its class name, with its nested models beside it."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def ref(self, model: type[BaseModel], mode: str) -> dict[str, Any]:
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}", mode=mode)  # type: ignore[arg-type]
        for name, sub in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, sub)
        self.schemas.setdefault(model.__name__, schema)
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def content(self, declared: Declared, mode: str) -> dict[str, Any]:
        if not isinstance(declared, Media):
            return {"application/json": {"schema": self.ref(declared, mode)}}
        text: dict[str, Any] = {"type": "string", "description": declared.description}
        out: dict[str, Any] = {}
        for media in declared.types:
            out[media] = {"schema": {**text, "contentMediaType": media} if declared.binary else text}
        if declared.json is not None:
            out["application/json"] = {"schema": self.ref(declared.json, mode)}
        return out


def operation_id(method: str, path: str) -> str:
    return f"{method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', path).strip('_')}"


def build_openapi(routes: list[RouteSpec], title: str = "Sensor appliance API") -> dict[str, Any]:
    components = _Components()
    error = {"content": {"application/json": {"schema": components.ref(ErrorReply, "serialization")}}}
    paths: dict[str, Any] = {}
    for spec in routes:
        path = _PARAM.sub(r"{\1}", spec.path)
        op: dict[str, Any] = {"summary": spec.summary, "tags": [spec.tag], "operationId": operation_id(spec.method, path)}
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(spec.path)
        ]
        params += [
            {"name": name, "in": "query", "required": False, "description": p.description, "schema": p.schema()}
            if isinstance(p, Param) else
            {"name": name, "in": "query", "required": False, "description": p, "schema": {"type": "string"}}
            for name, p in spec.query.items()
        ]
        if params:
            op["parameters"] = params
        if spec.body is not None:
            op["requestBody"] = {"required": not spec.body_optional, "content": components.content(spec.body, "validation")}
        assert spec.reply is not None  # Api.add refuses a route without one
        responses: dict[str, Any] = {
            str(spec.status): {"description": "Success", "content": components.content(spec.reply, "serialization")},
        }
        if not spec.public and spec.auth != "none":
            responses["401"] = {"description": "Authentication required", **error}
        if isinstance(spec.body, type) or any(isinstance(p, Param) for p in spec.query.values()):
            responses["422"] = {"description": "A field or parameter holds a bad value (`field`, `fields` name them)", **error}
        responses["default"] = {"description": "Error (the one error shape)", **error}
        op["responses"] = responses
        if not spec.public and spec.auth != "none":
            op["security"] = [{"deployToken" if spec.auth == "deploy" else "adminToken": []}]
        paths.setdefault(path, {})[spec.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components.schemas,
            "securitySchemes": {
                "adminToken": {"type": "http", "scheme": "bearer", "description": "SENSOR_ADMIN_TOKEN or <state_dir>/admin.token"},
                "deployToken": {"type": "http", "scheme": "bearer", "description": "SENSOR_DEPLOY_TOKEN"},
            },
        },
    }
