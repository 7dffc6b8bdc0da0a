"""A flow's TLS handshake metadata: the hellos read from its payload samples and their fingerprints.

Samples are the first payload-bearing packets of the flow, in order. A hello larger than one TCP
segment (Chrome's, with post-quantum key shares, is about 1.8 KB) spans several samples of the same
direction, so each direction's samples are joined from the first one that opens a handshake record.

The samples are walked, joined and read in one C call (`native_dpi.sample_facts`, called by
appliance/detection/facts.py, which also takes its HTTP candidates from it) that makes the metadata with the
SlotMakers below, the fingerprints from a FingerprintMemo. `tls_metadata_reference` is the same in Python
(the reference parsers and hashlib, nothing remembered), what the tests hold the C path to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.detection.dpi.tls_cert import CertificateInfo, read_certificate
from appliance.detection.dpi.tls_fingerprint import ja3_reference, ja4_reference, ja4s_reference
from appliance.detection.dpi.tls_parse import (MAX_HANDSHAKE_BYTES, ClientHello, ServerHello, certificate_chain,
                                               parse_client_hello_reference, parse_server_hello_reference, version_name)
from appliance.model import FlowRecord, Packet
from appliance import native
from appliance.native import dpi as native_dpi

_OUTBOUND, _INBOUND = 1, 2


@dataclass(slots=True)
class TlsMetadata:
    """What the handshake of one flow says; empty strings where a side was not seen."""

    client_hello: ClientHello | None
    server_hello: ServerHello | None
    ja4: str = ""
    ja4s: str = ""
    ja3: str = ""
    certificates: list[CertificateInfo] = field(default_factory=list)  # the server's chain, leaf first (TLS <= 1.2)
    chain_complete: bool = True  # False when the Certificate message ran past the samples
    certificates_unreadable: int = 0  # certificates `cryptography` could not read (skipped)

    @property
    def sni(self) -> str:
        return self.client_hello.sni if self.client_hello is not None else ""

    @property
    def alpn(self) -> str:
        """The first protocol the client offered (what it wants to speak)."""
        if self.client_hello is None or not self.client_hello.alpn:
            return ""
        return self.client_hello.alpn[0].decode("ascii", "replace")

    @property
    def complete(self) -> bool:
        client, server = self.client_hello, self.server_hello
        return self.chain_complete and (client is None or client.complete) and (server is None or server.complete)

    def view(self) -> dict[str, Any]:
        """The REST flow view's `tls` object."""
        server = self.server_hello
        return {
            "ja4": self.ja4, "ja4s": self.ja4s, "ja3": self.ja3, "sni": self.sni, "alpn": self.alpn,
            "client_version": self.client_hello.version if self.client_hello is not None else "",
            "server_version": version_name(server.version) if server is not None else "",
            "cipher": f"{server.cipher:04x}" if server is not None else "",
            "complete": self.complete,
            "certificate": self.certificates[0].view() if self.certificates else None,
            "chain_length": len(self.certificates),
        }


def _joined(samples: list[Packet], direction: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    for pkt in samples:
        if pkt.direction != direction:
            continue
        payload = pkt.payload
        if not parts and payload[:1] != b"\x16":
            continue
        parts.append(payload)
        size += len(payload)
        if size >= MAX_HANDSHAKE_BYTES:
            break
    return b"".join(parts)


def opens_handshake(flow: FlowRecord) -> bool:
    """True when an outbound or inbound sample starts a TLS handshake record (cheap pre-check)."""
    return any(p.payload[:1] == b"\x16" for p in flow.samples)


def slot_maker(cls: type) -> Any:
    """A `native_dpi.SlotMaker` of a slotted dataclass whose __init__ only assigns its fields (no
    __post_init__): what sample_facts makes with it equals cls(*values)."""
    return native.slot_maker(native_dpi.SlotMaker, cls)


# How `native_dpi.sample_facts` makes the hellos and the metadata (constants of the classes; facts.py adds Facts).
METADATA_MAKERS = (slot_maker(ClientHello), slot_maker(ServerHello), slot_maker(TlsMetadata))


def read_chain(meta: TlsMetadata, chain: tuple[list[bytes], bool]) -> None:
    """The server's certificates (DER, leaf first, as `sample_facts` cut them out) read into `meta`."""
    ders, meta.chain_complete = chain
    for der in ders:
        info = read_certificate(der)
        if info is None:
            meta.certificates_unreadable += 1
        else:
            meta.certificates.append(info)


def tls_metadata_reference(flow: FlowRecord) -> TlsMetadata | None:
    """`facts.tls_metadata` in Python (reference parsers, hashlib each time): what the C path must give."""
    client = parse_client_hello_reference(_joined(flow.samples, _OUTBOUND))
    inbound = _joined(flow.samples, _INBOUND)
    server = parse_server_hello_reference(inbound)
    if client is None and server is None:
        return None
    meta = TlsMetadata(client, server)
    if client is not None:
        meta.ja4, meta.ja3 = ja4_reference(client), ja3_reference(client)
    if server is not None:
        meta.ja4s = ja4s_reference(server)
        chain = certificate_chain(inbound)
        if chain is not None:
            read_chain(meta, chain)
    return meta
