"""Agent identity: who is on the other end of a stream."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

# Fixed namespace of ours: agent ids are UUIDv5 of the machine id within it.
AGENT_NAMESPACE = uuid.UUID("5b0e4a8e-3c1f-5d7a-9e61-2f4c8b9a7d10")

_MAX_META = 255


def clean_meta(value: str | None) -> str:
    """An agent-supplied metadata value made safe to store and log: printable, bounded."""
    if not value:
        return ""
    return "".join(ch for ch in value[:_MAX_META] if ch.isprintable())


def peer_address(peer: str) -> str:
    """The address part of a gRPC peer string ("ipv4:10.0.0.1:5000", "ipv6:[::1]:5000")."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1 : rest.find("]")]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return rest or peer


def agent_id_for(machine_id: str, peer_ip: str) -> str:
    """UUIDv5 of the machine id; of the peer address when the agent sent no machine id.

    Never derived from an enrollment token: two machines enrolled with one token keep
    distinct ids because their machine ids differ.
    """
    if machine_id:
        return str(uuid.uuid5(AGENT_NAMESPACE, "machine:" + machine_id))
    return str(uuid.uuid5(AGENT_NAMESPACE, "peer:" + peer_ip))


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """What a stream says about its agent, parsed once at stream start."""

    agent_id: str
    machine_id: str
    hostname: str
    os: str
    version: str
    remote_address: str
    cert_fingerprint: str = ""  # SHA-256 of the client certificate under mTLS
    reported_dropped: int = 0  # packets the agent says it dropped while it could not reach us

    @classmethod
    def from_metadata(cls, metadata: dict[str, str], peer: str, cert_fingerprint: str = "") -> AgentIdentity:
        machine_id = clean_meta(metadata.get("x-machine-id"))
        remote = peer_address(peer)
        return cls(
            agent_id=agent_id_for(machine_id, remote),
            machine_id=machine_id,
            hostname=clean_meta(metadata.get("x-agent-hostname")),
            os=clean_meta(metadata.get("x-agent-os")),
            version=clean_meta(metadata.get("x-agent-version")),
            remote_address=remote,
            cert_fingerprint=cert_fingerprint,
            reported_dropped=_count(metadata.get("x-agent-dropped")),
        )


def _count(value: str | None) -> int:
    """A non-negative counter from metadata; anything else counts as 0."""
    if not value or not value.isdigit() or len(value) > 18:
        return 0
    return int(value)
