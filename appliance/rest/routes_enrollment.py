"""Enrollment routes: tokens, enrollment scripts, revocation, artifact upload and /static."""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Callable
from typing import Annotated, Any

import bottle
from pydantic import BaseModel, ConfigDict, Field

from appliance.artifacts import (
    CA_FILE,
    ArtifactError,
    ArtifactStore,
    BadName,
    ChecksumMismatch,
    NotServable,
    Staged,
    TooLarge,
)
from appliance.artifacts.store import content_type
from appliance.enrollment import EnrollmentService, PayloadMissing, TokenRefused, request_host
from appliance.enrollment.service import iso
from appliance.errors import ApiError, NotFound, Unprocessable
from appliance.rest.api import Api, bearer_token, parse_model, read_json, tokens_equal

log = logging.getLogger(__name__)

# The one route whose body may exceed rest.max_body_bytes (artifacts.max_upload_bytes).
ARTIFACTS_PATH = "/api/v1/artifacts"

DEPLOY_TOKEN_ENV = "SENSOR_DEPLOY_TOKEN"
_SCRIPT_TYPES = {"windows": "text/plain; charset=utf-8", "linux": "text/x-shellscript; charset=utf-8",
                 "macos": "text/x-shellscript; charset=utf-8"}
_REFUSED = "Invalid, expired or already used enrollment token"


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl_hours: Annotated[float, Field(gt=0, le=24 * 365)] | None = None


class TokenReply(BaseModel):
    token: str
    command: str
    command_unix: str
    expires_at: str
    base_url: str
    warning: str | None = None  # the commands use a loopback address: other machines cannot use them


class RevokeReply(BaseModel):
    id: str
    revoked: int
    already_revoked: int


class CertificateReply(BaseModel):
    fingerprint: str
    serial: str
    common_name: str
    enrolled: bool
    os: str | None
    token_prefix: str | None
    issued_at: str | None
    not_after: str | None
    machine_id: str | None
    agent_id: str | None
    bound_at: str | None
    revoked_at: str | None
    revoke_reason: str | None


class CertificateList(BaseModel):
    certificates: list[CertificateReply]
    count: int


class ArtifactReply(BaseModel):
    name: str
    size: int
    sha256: str
    version: str


class UploadReply(BaseModel):
    files: list[ArtifactReply]
    count: int


def _source() -> str:
    # REMOTE_ADDR, not bottle's remote_addr: that one believes X-Forwarded-For.
    return str(bottle.request.environ.get("REMOTE_ADDR", "?"))


def _host() -> str:
    """The Host header the client used (host[:port]), when plain; the enrollment commands' address by default."""
    return request_host(bottle.request.environ.get("HTTP_HOST"))


def _iso(ts: float | None) -> str | None:
    return iso(ts) if ts is not None else None


def deploy_auth(deploy_token: str) -> Callable[[], bool]:
    """Auth for `auth="deploy"` routes: 403 while SENSOR_DEPLOY_TOKEN is unset, else a constant-time compare."""

    def check() -> bool:
        if not deploy_token:
            raise ApiError(403, f"Artifact upload is disabled: {DEPLOY_TOKEN_ENV} is not set on the appliance")
        presented = bearer_token()
        return bool(presented) and tokens_equal(presented, deploy_token)

    return check


def install(
    api: Api,
    *,
    enrollment: EnrollmentService,
    artifacts: ArtifactStore,
    deploy_token: str,
    scripts_over_tls: bool,
) -> None:
    """Declare the enrollment, artifact and /static routes on `api`."""
    api.extra_auth["deploy"] = deploy_auth(deploy_token)

    @api.route("POST", "/api/v1/agent/tokens", "Create a single-use enrollment token and the commands that use it",
               body=TokenRequest, reply=TokenReply, tag="enrollment")
    def create_token() -> dict[str, Any]:
        request = TokenRequest()
        # The body is optional: `curl -X POST` without data sends none (and no Content-Length).
        if bottle.request.get_header("Transfer-Encoding"):
            raise ApiError(411, "Send the body with a Content-Length (chunked bodies are not accepted)")
        if bottle.request.content_length > 0:
            request = parse_model(TokenRequest, read_json(api.max_body_bytes))
        new = enrollment.create_token(request.ttl_hours * 3600 if request.ttl_hours else None, _host())
        return {"token": new.token, "command": new.command, "command_unix": new.command_unix,
                "expires_at": iso(new.expires_at), "base_url": new.base_url, "warning": new.warning or None}

    def enroll(os_kind: str) -> bottle.HTTPResponse:
        if not scripts_over_tls:
            raise ApiError(503, "Enrollment needs HTTPS: the script carries a private key (set rest.tls: true)")
        raw = bottle.request.query.getunicode("token")
        source = _source()
        try:
            script = enrollment.enroll(raw, os_kind, source, _host())
        except TokenRefused as err:
            prefix = re.sub(r"[^0-9a-fA-F-]", "?", (raw or "")[:6])  # nothing an attacker sends reaches the log raw
            log.warning("enrollment refused os=%s token=%s reason=%s source=%s", os_kind, prefix or "-", err.reason,
                        source)
            raise ApiError(403, _REFUSED, code="token_refused") from None
        except PayloadMissing as err:
            raise ApiError(409, str(err), code="payload_missing") from None
        response = bottle.HTTPResponse(script.text, status=200)
        response.content_type = _SCRIPT_TYPES[os_kind]
        response.set_header("Cache-Control", "no-store")
        response.set_header("X-Content-Type-Options", "nosniff")
        return response

    for os_kind, label in (("windows", "PowerShell"), ("linux", "POSIX sh"), ("macos", "POSIX sh")):
        api.route("GET", f"/api/v1/enroll/{os_kind}", f"Redeem a token: the {label} enrollment script for {os_kind}",
                  auth="none", tag="enrollment", query={"token": "the enrollment token (single use)"})(
            lambda os_kind=os_kind: enroll(os_kind))

    @api.route("GET", "/api/v1/agent/certificates", "Agent certificates: issue, binding and revocation state",
               reply=CertificateList, tag="enrollment")
    def certificates() -> dict[str, Any]:
        items = [{
            "fingerprint": c.fingerprint, "serial": c.serial, "common_name": c.common_name, "enrolled": c.enrolled,
            "os": c.os, "token_prefix": c.token_prefix, "issued_at": _iso(c.issued_at), "not_after": _iso(c.not_after),
            "machine_id": c.machine_id, "agent_id": c.agent_id, "bound_at": _iso(c.bound_at),
            "revoked_at": _iso(c.revoked_at), "revoke_reason": c.revoke_reason,
        } for c in enrollment.certificates()]
        return {"certificates": items, "count": len(items)}

    @api.route("POST", "/api/v1/agents/<agent_id>/revoke",
               "Revoke the agent's certificates (an agent id, or one certificate's SHA-256 fingerprint)",
               reply=RevokeReply, tag="enrollment")
    def revoke(agent_id: str) -> dict[str, Any]:
        if len(agent_id) > 64:
            raise Unprocessable("agent_id", "longer than 64 characters")
        matched, revoked = enrollment.revoke(agent_id)
        if matched == 0:
            raise NotFound(f"No certificate is bound to agent {agent_id[:64]!r}")
        return {"id": agent_id, "revoked": revoked, "already_revoked": matched - revoked}

    @api.route("POST", ARTIFACTS_PATH,
               "Push files into /static (multipart: `file` parts named by their target path; optional `sha256`, "
               "`version`, or `sha256:<name>`/`version:<name>` per file)", auth="deploy", reply=UploadReply,
               tag="artifacts")
    def upload() -> dict[str, Any]:
        length = bottle.request.content_length
        if length < 0 or "chunked" in bottle.request.environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            raise ApiError(411, "Content-Length is required")
        if length > artifacts.max_bytes:
            raise ApiError(413, f"Upload larger than artifacts.max_upload_bytes ({artifacts.max_bytes} bytes)")
        if not bottle.request.content_type.startswith("multipart/form-data"):
            raise ApiError(415, "Send multipart/form-data")
        try:
            form = bottle.request.POST
        except bottle.HTTPError as err:
            raise ApiError(400, f"Malformed multipart body: {err.body}") from None
        except ValueError:  # bottle refuses control characters in part headers: a NUL in a file name
            raise ApiError(400, "Malformed multipart body: a part header (a file name) contains a control "
                                "character such as NUL") from None
        files = [(key, value) for key, value in form.allitems() if isinstance(value, bottle.FileUpload)]
        if not files:
            raise Unprocessable("file", "no file part in the upload")
        if any(key != "file" for key, _ in files):
            raise Unprocessable("file", "file parts must be named 'file' (the target path is their filename)")
        names = [upload.raw_filename for _, upload in files]
        if CA_FILE in names:
            raise Unprocessable("file", f"{CA_FILE} is the appliance's own CA certificate")
        if len(set(names)) != len(names):
            raise Unprocessable("file", "the same target name appears twice")
        fields = {key: value for key, value in form.allitems() if isinstance(value, str)}
        known = {"sha256", "version"} | {f"{k}:{n}" for n in names for k in ("sha256", "version")}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise Unprocessable(unknown[0], "unknown field (sha256:<name> and version:<name> must name an uploaded file)")
        if len(files) > 1 and "sha256" in fields:
            raise Unprocessable("sha256", "with several files give sha256:<name> for each")
        staged: list[Staged] = []
        try:
            for name, (_, part) in zip(names, files):
                sha = fields.get(f"sha256:{name}") or (fields.get("sha256") if len(files) == 1 else None)
                version = fields.get(f"version:{name}", fields.get("version", ""))
                try:
                    staged.append(artifacts.stage(name, part.file, sha256=sha, version=version))
                except BadName as err:
                    raise Unprocessable("file", f"{name[:80]!r}: {err}") from None
                except ChecksumMismatch as err:
                    raise ApiError(422, str(err), field="sha256", code="checksum_mismatch") from None
                except TooLarge as err:
                    raise ApiError(413, str(err)) from None
                except ArtifactError as err:
                    raise ApiError(422, str(err)) from None
            entries = artifacts.commit(staged)
        except BaseException:
            artifacts.discard(staged)
            raise
        items = [{"name": e.name, "size": e.size, "sha256": e.sha256, "version": e.version} for e in entries]
        return {"files": items, "count": len(items)}

    @api.route("GET", "/static/<path:path>", "The agent payload: executables, driver, CA certificate, manifest.json",
               auth="none", tag="static")
    def static(path: str) -> bottle.HTTPResponse:
        try:
            real = artifacts.resolve(path)
        except NotServable:
            raise NotFound("No such file") from None
        stat = real.stat()
        etag = '"' + hashlib.sha256(f"{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_size}".encode()).hexdigest()[:32] + '"'
        return bottle.static_file(
            os.path.basename(real), root=str(real.parent), mimetype=content_type(real.name), etag=etag,
            headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
        )
