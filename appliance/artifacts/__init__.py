"""The agent payload under `paths.static_dir`: safe lookup for /static, atomic uploads, the manifest."""

from appliance.artifacts.store import (
    CA_FILE,
    ArtifactError,
    ArtifactStore,
    BadName,
    ChecksumMismatch,
    Manifest,
    ManifestEntry,
    NotServable,
    Staged,
    TooLarge,
)
from appliance.artifacts.upload import UploadPart, UploadRefused, publish_upload

__all__ = [
    "CA_FILE",
    "ArtifactError", "ArtifactStore", "BadName", "Staged", "ChecksumMismatch", "Manifest", "ManifestEntry", "NotServable", "TooLarge",
    "UploadPart", "UploadRefused", "publish_upload",
]
