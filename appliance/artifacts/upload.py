"""One upload of several files as one change: the form's rules, then stage every file, then commit them together.

The REST route only reads the multipart body; which form fields go with which file, and what may be
uploaded at all, is decided here, before a byte is staged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from appliance.artifacts.store import CA_FILE, ArtifactError, ArtifactStore, BadName, ManifestEntry, Staged

FILE_FIELD = "file"  # every file part has this name; its filename is the target path


class UploadRefused(ArtifactError):
    """The upload's form breaks a rule; `field` names the form field, `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class UploadPart:
    """One file part: the form field it came in, its target path (the part's filename), its content."""

    field: str
    name: str
    stream: BinaryIO


def _checked(parts: Sequence[UploadPart], fields: Mapping[str, str]) -> None:
    if not parts:
        raise UploadRefused(FILE_FIELD, "no file part in the upload")
    if any(part.field != FILE_FIELD for part in parts):
        raise UploadRefused(FILE_FIELD, f"file parts must be named '{FILE_FIELD}' (the target path is their filename)")
    names = [part.name for part in parts]
    if CA_FILE in names:
        raise UploadRefused(FILE_FIELD, f"{CA_FILE} is the appliance's own CA certificate")
    if len(set(names)) != len(names):
        raise UploadRefused(FILE_FIELD, "the same target name appears twice")
    known = {"sha256", "version"} | {f"{k}:{n}" for n in names for k in ("sha256", "version")}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise UploadRefused(unknown[0], "unknown field (sha256:<name> and version:<name> must name an uploaded file)")
    if len(parts) > 1 and "sha256" in fields:
        raise UploadRefused("sha256", "with several files give sha256:<name> for each")


def publish_upload(store: ArtifactStore, parts: Sequence[UploadPart], fields: Mapping[str, str]) -> list[ManifestEntry]:
    """Check the form, stage every part (sha256/version from `<key>:<name>`, or `<key>` for a single file or every
    file's version), then commit them all; on any failure nothing is committed. Raises UploadRefused for a form that
    breaks a rule, BadName (as UploadRefused), ChecksumMismatch, TooLarge or ArtifactError for a file."""
    _checked(parts, fields)
    staged: list[Staged] = []
    try:
        for part in parts:
            sha = fields.get(f"sha256:{part.name}") or (fields.get("sha256") if len(parts) == 1 else None)
            version = fields.get(f"version:{part.name}", fields.get("version", ""))
            try:
                staged.append(store.stage(part.name, part.stream, sha256=sha, version=version))
            except BadName as err:
                raise UploadRefused(FILE_FIELD, f"{part.name[:80]!r}: {err}") from None
        return store.commit(staged)
    except BaseException:
        store.discard(staged)
        raise
