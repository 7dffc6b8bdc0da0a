"""`python -m appliance.reprovision [--config FILE]`: refill /static from the release host, once.

Run as a oneshot unit before the server. When SENSOR_RELEASE_TOKEN is set and `release.url` is
configured, fetch `<release.url>/manifest.json` (Bearer token), then download every file whose
checksum or version differs from what the static directory holds, each verified against its
sha256 before an atomic rename, and record the release version in /static/manifest.json. An
up-to-date directory costs one manifest request and no write.

Best effort by contract: an unreachable host, a refused token, a bad manifest, a checksum
mismatch or a full disk logs one clear line and exits 0; files already good are never touched.
The release manifest has the shape of our own /static/manifest.json: {"version": ..., "files":
[{"name", "size", "sha256", "version"}]}, each file at `<release.url>/<name>`.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import json
import logging
import os
import re
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

from appliance.artifacts import CA_FILE, ArtifactError, ArtifactStore, ChecksumMismatch
from appliance.artifacts.store import check_name, check_version
from appliance.config import load_settings
from appliance.errors import ApplianceError

log = logging.getLogger("appliance.reprovision")

RELEASE_TOKEN_ENV = "SENSOR_RELEASE_TOKEN"
_MAX_MANIFEST_BYTES = 4 * 1024 * 1024
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ReprovisionError(ApplianceError):
    """Reprovisioning stopped; the message is the one line the operator reads."""


@dataclass(frozen=True)
class ReleaseFile:
    name: str
    size: int
    sha256: str
    version: str


@dataclass(frozen=True)
class Release:
    version: str
    files: tuple[ReleaseFile, ...]


@dataclass(frozen=True)
class Outcome:
    version: str
    fetched: tuple[str, ...]

    @property
    def up_to_date(self) -> bool:
        return not self.fetched


def parse_release(data: Any, max_file_bytes: int) -> Release:
    """Validate a release manifest; every problem found is named in one error."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ReprovisionError("release manifest is not an object with a files list")
    problems: list[str] = []
    version = data.get("version", "")
    if not isinstance(version, str):
        problems.append("version: not a string")
        version = ""
    files: list[ReleaseFile] = []
    seen: set[str] = set()
    for index, item in enumerate(data["files"]):
        where = f"files[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: not an object")
            continue
        name, size, sha, file_version = item.get("name"), item.get("size"), item.get("sha256"), item.get("version", "")
        try:
            check_name(str(name))
            check_version(str(file_version))
        except ArtifactError as err:
            problems.append(f"{where}: {str(name)[:80]!r}: {err}")
            continue
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= max_file_bytes:
            problems.append(f"{where}: size must be an integer from 0 to {max_file_bytes}")
            continue
        if not isinstance(sha, str) or not _SHA256.match(sha.lower()):
            problems.append(f"{where}: sha256 must be 64 hex characters")
            continue
        if name == CA_FILE:
            problems.append(f"{where}: {CA_FILE} is the appliance's own CA certificate")
            continue
        if name in seen:
            problems.append(f"{where}: {name} listed twice")
            continue
        seen.add(str(name))
        files.append(ReleaseFile(str(name), size, sha.lower(), str(file_version)))
    if problems:
        raise ReprovisionError("release manifest rejected: " + "; ".join(problems[:5]))
    return Release(version, tuple(files))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The Bearer token is for the release host only: a redirect elsewhere is an error, not followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {newurl} not followed", headers, fp)


class ReleaseClient:
    """Talks to the release host: the manifest and the files, authenticated with the release token."""

    def __init__(self, url: str, token: str, *, timeout: float, ca_file: str = "") -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ReprovisionError(f"release.url {url!r} is not an http(s) URL")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ReprovisionError(f"release.url {url!r}: plain http is only allowed to this machine; use https")
        self.base = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        context = ssl.create_default_context(cafile=ca_file or None)
        self._opener = urllib.request.build_opener(_NoRedirect(), urllib.request.HTTPSHandler(context=context))

    def _open(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.base}/{path}", headers={
            "Authorization": f"Bearer {self._token}", "User-Agent": "sensor-appliance-reprovision"})
        try:
            return self._opener.open(request, timeout=self._timeout)
        except urllib.error.HTTPError as err:
            hint = " (the release token was refused)" if err.code in (401, 403) else ""
            raise ReprovisionError(f"release host answered {err.code} for /{path}{hint}") from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ReprovisionError(f"release host {self.base} unreachable: {reason}") from None

    def manifest(self, max_file_bytes: int) -> Release:
        with self._open("manifest.json") as reply:
            raw = reply.read(_MAX_MANIFEST_BYTES + 1)
        if len(raw) > _MAX_MANIFEST_BYTES:
            raise ReprovisionError(f"release manifest larger than {_MAX_MANIFEST_BYTES} bytes")
        try:
            data = json.loads(raw)
        except ValueError:
            raise ReprovisionError("release manifest is not JSON") from None
        return parse_release(data, max_file_bytes)

    def open_file(self, name: str) -> BinaryIO:
        return self._open(quote(name))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Reprovisioner:
    """Brings the static directory to the release's content; never touches files already right."""

    def __init__(self, store: ArtifactStore, client: ReleaseClient) -> None:
        self._store = store
        self._client = client

    def run(self) -> Outcome:
        release = self._client.manifest(self._store.max_bytes)
        local = self._store.scan()  # hashes only files whose size or mtime changed
        stale = [f for f in release.files
                 if (entry := local.files.get(f.name)) is None or entry.sha256 != f.sha256 or entry.version != f.version]
        if not stale and local.version == release.version:
            return Outcome(release.version, ())
        fetched: list[str] = []
        for item in stale:
            try:
                with self._client.open_file(item.name) as stream:
                    self._store.put(item.name, stream, sha256=item.sha256, version=item.version, size=item.size)
            except ChecksumMismatch as err:
                raise ReprovisionError(f"checksum mismatch, {err}; kept the file already there") from None
            except ArtifactError as err:
                raise ReprovisionError(f"cannot take {item.name}: {err}") from None
            except OSError as err:
                what = "disk full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else (err.strerror or str(err))
                raise ReprovisionError(f"cannot write {item.name} into {self._store.root}: {what}") from None
            fetched.append(item.name)
        self._store.refresh(version=release.version)
        return Outcome(release.version, tuple(fetched))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="appliance.reprovision",
                                     description="Refill the static directory from the release host (oneshot).")
    parser.add_argument("--config", help="path to config.yaml (all defaults apply when omitted)")
    parser.add_argument("--log-level", default=os.environ.get("SENSOR_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings(args.config)
    except ApplianceError as err:
        print(f"appliance.reprovision: {err}", file=sys.stderr)
        return 2
    token = os.environ.get(RELEASE_TOKEN_ENV, "").strip()
    if not token:
        log.info("reprovision: %s is not set; nothing to do", RELEASE_TOKEN_ENV)
        return 0
    if not settings.release.url:
        log.info("reprovision: release.url is not configured; nothing to do")
        return 0
    try:
        store = ArtifactStore(settings.paths.static_dir, settings.artifacts.max_upload_bytes)
        client = ReleaseClient(settings.release.url, token, timeout=settings.release.timeout,
                               ca_file=settings.release.ca_file)
        outcome = Reprovisioner(store, client).run()
    except ReprovisionError as err:
        log.error("reprovision: %s; /static keeps what it had", err)
        return 0
    except OSError as err:  # the static directory itself cannot be created or read
        log.error("reprovision: static directory %s unusable: %s; nothing changed", settings.paths.static_dir,
                  err.strerror or err)
        return 0
    if outcome.up_to_date:
        log.info("reprovision: /static already holds release %s", outcome.version or "-")
    else:
        log.info("reprovision: fetched %d file(s) of release %s: %s", len(outcome.fetched), outcome.version or "-",
                 ", ".join(outcome.fetched))
    return 0


if __name__ == "__main__":
    sys.exit(main())
