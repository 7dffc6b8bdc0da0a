"""OpenAPI 3.1 document generated from the route table (the same table that serves requests)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from appliance import __version__
from appliance.rest.api import RouteSpec

_PARAM = re.compile(r"<([a-zA-Z_][a-zA-Z0-9_]*)(?::[^>]*)?>")
_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "code": {"type": "string"},
        "field": {"type": "string"},
    },
}


def _schema_ref(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in schema.pop("$defs", {}).items():
        components[name] = sub
    components[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def build_openapi(routes: list[RouteSpec], title: str = "Sensor appliance API") -> dict[str, Any]:
    components: dict[str, Any] = {"Error": _ERROR_SCHEMA}
    paths: dict[str, Any] = {}
    for spec in routes:
        path = _PARAM.sub(r"{\1}", spec.path)
        op: dict[str, Any] = {
            "summary": spec.summary,
            "tags": [spec.tag],
            "operationId": f"{spec.method.lower()}_{re.sub(r'[^a-zA-Z0-9]+', '_', path).strip('_')}",
            "responses": {},
        }
        params = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(spec.path)
        ]
        params += [
            {"name": name, "in": "query", "required": False, "description": text, "schema": {"type": "string"}}
            for name, text in spec.query.items()
        ]
        if params:
            op["parameters"] = params
        if spec.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": _schema_ref(spec.body, components)}},
            }
        ok: dict[str, Any] = {"description": "Success"}
        if spec.reply is not None:
            ok["content"] = {"application/json": {"schema": _schema_ref(spec.reply, components)}}
        else:
            ok["content"] = {"application/json": {"schema": {}}}
        op["responses"]["200"] = ok
        error = {"description": "Error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        op["responses"]["default"] = error
        if not spec.public and spec.auth != "none":
            op["security"] = [{"deployToken" if spec.auth == "deploy" else "adminToken": []}]
        paths.setdefault(path, {})[spec.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "adminToken": {"type": "http", "scheme": "bearer", "description": "SENSOR_ADMIN_TOKEN or <state_dir>/admin.token"},
                "deployToken": {"type": "http", "scheme": "bearer", "description": "SENSOR_DEPLOY_TOKEN"},
            },
        },
    }
