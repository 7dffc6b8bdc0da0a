"""The 29 matchable fields: name -> (kind, protocols it exists in, description).

A flow yields records per rule protocol: one per DNS message (dns), one per ClientHello (tls),
one per HTTP request (http), one per ICMP echo sample (icmp), one for the flow (tcp, udp). Flow
fields exist in every record. A rule matches a flow when one record satisfies all its conditions.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("dns", "tls", "http", "icmp", "tcp", "udp")
_ANY = frozenset(PROTOCOLS)


@dataclass(frozen=True)
class FieldSpec:
    name: str
    kind: str  # str | int | ip
    protocols: frozenset[str]
    description: str
    example: str


FIELDS: dict[str, FieldSpec] = {f.name: f for f in (
    FieldSpec("transport", "str", _ANY, "tcp, udp, icmp or other", "equals: udp"),
    FieldSpec("remote_ip", "ip", _ANY, "the peer's address", "cidr: 203.0.113.0/24"),
    FieldSpec("remote_port", "int", _ANY, "the peer's port (0 for ICMP)", "in: [4444, 31337]"),
    FieldSpec("bytes_out", "int", _ANY, "bytes the agent sent in the flow", "gt: 10000000"),
    FieldSpec("bytes_in", "int", _ANY, "bytes the agent received in the flow", "lt: 1000"),
    FieldSpec("duration_s", "int", _ANY, "seconds between the flow's first and last packet", "gt: 3600"),
    FieldSpec("process_name", "str", _ANY, "the owning process, when the agent knows it", "in: [powershell.exe, certutil.exe]"),
    FieldSpec("dns.qname", "str", frozenset({"dns"}), "the question name, lower case, no trailing dot", "endswith: .duckdns.org"),
    FieldSpec("dns.qname_length", "int", frozenset({"dns"}), "length of the question name", "gt: 100"),
    FieldSpec("dns.qtype", "str", frozenset({"dns"}), "question type name (A, AAAA, TXT, NULL, CNAME, MX, ...)", "equals: TXT"),
    FieldSpec("dns.rcode", "str", frozenset({"dns"}), "response code name of responses (NOERROR, NXDOMAIN, ...); empty for queries", "equals: NXDOMAIN"),
    FieldSpec("tls.sni", "str", frozenset({"tls"}), "ClientHello server name; empty when absent", "exists: false"),
    FieldSpec("tls.version", "str", frozenset({"tls"}), "highest version offered (SSLv3, TLSv1.0 ... TLSv1.3)", "in: [SSLv3, TLSv1.0]"),
    FieldSpec("tls.ja4", "str", frozenset({"tls"}), "JA4 of the ClientHello (FoxIO); empty without one", "in_list: known_bad_ja4"),
    FieldSpec("tls.ja4s", "str", frozenset({"tls"}), "JA4S of the ServerHello; empty when it was not seen", "in_list: known_bad_ja4s"),
    FieldSpec("tls.ja3", "str", frozenset({"tls"}), "JA3 (MD5) of the ClientHello, for older intelligence", "equals: 72a589da586844d7f0818ce684948eea"),
    FieldSpec("tls.alpn", "str", frozenset({"tls"}), "first ALPN protocol the client offered; empty when none", "exists: false"),
    FieldSpec("tls.cert.subject", "str", frozenset({"tls"}), "server leaf certificate subject (RFC 4514; TLS 1.2 and earlier); empty when not seen", "contains: cn=localhost"),
    FieldSpec("tls.cert.issuer", "str", frozenset({"tls"}), "server leaf certificate issuer (RFC 4514); empty when not seen", "contains: o=fortinet"),
    FieldSpec("tls.cert.self_signed", "int", frozenset({"tls"}), "1 when the leaf certificate signed itself, else 0", "equals: 1"),
    FieldSpec("tls.cert.validity_days", "int", frozenset({"tls"}), "leaf certificate validity in whole days; 0 when not seen", "gt: 825"),
    FieldSpec("tls.cert.key_bits", "int", frozenset({"tls"}), "leaf certificate key size in bits; 0 when not seen", "lt: 2048"),
    FieldSpec("http.method", "str", frozenset({"http"}), "request method", "equals: POST"),
    FieldSpec("http.host", "str", frozenset({"http"}), "Host header without port", "regex: '^\\d+\\.\\d+\\.\\d+\\.\\d+$'"),
    FieldSpec("http.uri", "str", frozenset({"http"}), "request target as sent", "contains: /gate.php"),
    FieldSpec("http.user_agent", "str", frozenset({"http"}), "User-Agent header; empty when absent", "startswith: python-requests"),
    FieldSpec("http.content_length", "int", frozenset({"http"}), "Content-Length of the request (0 when absent)", "gt: 1000000"),
    FieldSpec("icmp.type", "int", frozenset({"icmp"}), "ICMP type (8 echo request, 0 echo reply)", "equals: 8"),
    FieldSpec("icmp.payload_size", "int", frozenset({"icmp"}), "echo data bytes after identifier and sequence", "gt: 1000"),
)}

QTYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 10: "NULL", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
          33: "SRV", 35: "NAPTR", 43: "DS", 48: "DNSKEY", 64: "SVCB", 65: "HTTPS", 255: "ANY"}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
