"""Scenario generator: packet streams (NetworkPacket, event time in the past) for benign office
traffic and for each attack the detection pipeline must find.

Every builder is deterministic for a given seed. Times are milliseconds since the epoch; the
tracker runs on event time, so half an hour of traffic streams in a second or two.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import os
import random
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from appliance.generated import sensor_pb2
from tests.appliance import wire
from tests.appliance.detection import dga_families

NetworkPacket = sensor_pb2.NetworkPacket
T0_MS = 1_700_000_000_000  # 2023-11-14: well in the past, so no timestamp is "from the future"
RESOLVER = "10.0.0.53"
SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10
BENIGN_SITES = [w for line in (Path(__file__).resolve().parents[3] / "appliance/detection/data/benign_domains.txt")
                .read_text().splitlines() if not line.startswith("#") for w in line.split()]


def address_of(name: str, prefix: int = 34) -> str:
    """A stable public address for a name (what a resolver would answer)."""
    h = hashlib.sha1(name.encode()).digest()
    return f"{prefix}.{h[0]}.{h[1]}.{max(h[2], 1)}"


def client_hello(sni: str = "", version: int = 0x0303) -> bytes:
    """A minimal but well-formed TLS ClientHello record."""
    ext = b""
    if sni:
        name = sni.encode()
        entry = b"\x00" + struct.pack("!H", len(name)) + name
        ext += struct.pack("!HH", 0, len(entry) + 2) + struct.pack("!H", len(entry)) + entry
    body = struct.pack("!H", version) + os.urandom(32) + b"\x00" + struct.pack("!H", 4) + b"\x13\x01\xc0\x2f" + b"\x01\x00"
    body += struct.pack("!H", len(ext)) + ext
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


@dataclass
class Stream:
    """The packets of one agent, kept sorted by time when read."""

    machine_id: str
    ip: str
    packets: list[NetworkPacket] = field(default_factory=list)
    _port: int = 30000

    def port(self) -> int:
        self._port = 30000 + (self._port - 29999) % 30000
        return self._port

    def add(self, pkt: NetworkPacket) -> None:
        self.packets.append(pkt)

    def sorted(self) -> list[NetworkPacket]:
        return sorted(self.packets, key=lambda p: p.timestamp)

    # -- protocol builders ----------------------------------------------------------------------
    def dns(self, t: int, name: str, qtype: int = 1, answers: list[str] | None = None, rcode: int = 0,
            sport: int | None = None, txt: str | None = None) -> list[str]:
        """A lookup and its answer; returns the addresses answered."""
        sport = sport or self.port()
        ident = random.getrandbits(16)
        self.add(wire.udp_out(self.ip, RESOLVER, sport, 53, wire.dns_query(name, qtype, ident), t))
        records: list[tuple[int, bytes]] = []
        if rcode == 0:
            if qtype == 1:
                answers = answers if answers is not None else [address_of(name)]
                records = [(1, bytes(int(x) for x in a.split("."))) for a in answers]
            elif qtype == 16:
                data = (txt or "ok").encode()[:255]
                records = [(16, bytes([len(data)]) + data)]
            elif qtype == 10:
                records = [(10, os.urandom(40))]
            elif qtype == 5:
                records = [(5, wire.dns_name("a" + name))]
        self.add(wire.udp_in(self.ip, RESOLVER, sport, 53, wire.dns_response(name, records, qtype, ident, rcode), t + 15))
        return answers or []

    def tcp(self, t: int, remote: str, rport: int, first_payload: bytes, bytes_up: int, bytes_down: int,
            reply: bytes = b"", rtt: int = 30, process: str = "") -> int:
        """A whole TCP connection: handshake, one request, the transfer, FIN both ways. Returns its end time."""
        sport = self.port()
        p = lambda ts, d, size=60, payload=b"", flags=ACK: self.add(wire.packet(  # noqa: E731
            self.ip, remote, sport, rport, 6, ts, d, size, payload, flags, 0, process))
        p(t, wire.OUTBOUND, 60, flags=SYN)
        p(t + rtt, wire.INBOUND, 60, flags=SYN | ACK)
        p(t + rtt + 1, wire.OUTBOUND, 52)
        p(t + rtt + 2, wire.OUTBOUND, 52 + len(first_payload), first_payload, PSH | ACK)
        ts = t + 2 * rtt
        p(ts, wire.INBOUND, 52 + len(reply) if reply else 1400, reply, PSH | ACK)
        up = max(bytes_up - len(first_payload), 0)
        down = max(bytes_down - 1400, 0)
        while up > 0 or down > 0:  # bulk transfer in 64 KB aggregates (sizes only, like a snapped capture)
            ts += 5
            if up > 0:
                chunk = min(up, 65000)
                p(ts, wire.OUTBOUND, chunk)
                up -= chunk
            if down > 0:
                chunk = min(down, 65000)
                p(ts, wire.INBOUND, chunk)
                down -= chunk
        ts += rtt
        p(ts, wire.OUTBOUND, 52, flags=FIN | ACK)
        p(ts + rtt, wire.INBOUND, 52, flags=FIN | ACK)
        return ts + rtt

    def tls(self, t: int, remote: str, sni: str, bytes_up: int = 2000, bytes_down: int = 40000, port: int = 443,
            version: int = 0x0303) -> int:
        return self.tcp(t, remote, port, client_hello(sni, version), bytes_up, bytes_down, b"\x16\x03\x03\x00\x50" + os.urandom(80))

    def http(self, t: int, remote: str, host: str, method: str = "GET", uri: str = "/", body: int = 0,
             down: int = 2000, headers: dict[str, str] | None = None, agent: str = "Mozilla/5.0") -> int:
        lines = [f"{method} {uri} HTTP/1.1", f"Host: {host}", f"User-Agent: {agent}", "Accept: */*"]
        if body:
            lines.append(f"Content-Length: {body}")
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        reply = f"HTTP/1.1 200 OK\r\nContent-Length: {down}\r\n\r\n".encode()
        return self.tcp(t, remote, 80, head, len(head) + body, down, reply)

    def ping(self, t: int, remote: str, count: int = 4, size: int = 56, interval_ms: int = 1000) -> None:
        ident = random.getrandbits(16)
        for seq in range(1, count + 1):
            ts = t + (seq - 1) * interval_ms
            stamp = struct.pack("<QQ", ts // 1000, (ts % 1000) * 1000)
            data = (stamp + bytes((0x10 + i) & 0xFF for i in range(max(size - 16, 0))))[:size]
            req = struct.pack("!BBHHH", 8, 0, 0, ident, seq) + data
            rep = struct.pack("!BBHHH", 0, 0, 0, ident, seq) + data
            self.add(wire.packet(self.ip, remote, 0, 0, 1, ts, wire.OUTBOUND, 28 + len(req), req))
            self.add(wire.packet(self.ip, remote, 0, 0, 1, ts + 20, wire.INBOUND, 28 + len(rep), rep))

    def ntp(self, t: int, server: str) -> None:
        data = b"\x23" + bytes(47)
        self.add(wire.udp_out(self.ip, server, 123, 123, data, t))
        self.add(wire.udp_in(self.ip, server, 123, 123, b"\x24" + bytes(47), t + 25))


def agent_ip(n: int) -> str:
    return f"10.0.1.{10 + n}"


# -- benign office traffic ---------------------------------------------------------------------------
def benign_office(n: int, minutes: float = 30.0, start_ms: int = T0_MS, seed: int = 0) -> Stream:
    """One office workstation: browsing (DNS then TLS), updates, NTP, ping, sometimes a video call."""
    rng = random.Random(seed * 1000 + n)
    random.seed(seed * 1000 + n)
    s = Stream(f"office-{n:02d}", agent_ip(n))
    end = start_ms + int(minutes * 60_000)
    t = start_ms + rng.randint(0, 20_000)
    while t < end:  # browsing
        site = rng.choice(BENIGN_SITES)
        tld = rng.choice(["com", "com", "com", "net", "org", "co.uk", "io"])
        names = [f"www.{site}.{tld}"] + [f"{sub}.{site}.{tld}" for sub in rng.sample(["static", "cdn", "api", "img", "login"], rng.randint(0, 2))]
        for name in names:
            if rng.random() < 0.02:
                s.dns(t, name.replace("www.", "wwww."), rcode=3)  # a typo
                continue
            address = s.dns(t, name)[0]
            for _ in range(rng.randint(1, 3)):
                s.tls(t + 40, address, name, rng.randint(800, 6000), rng.randint(5_000, 400_000))
            t += rng.randint(50, 800)
        t += rng.randint(15_000, 90_000)
    cdn_names = [  # what browsers and office suites really resolve: hashed CDN, video and telemetry names
        f"e{rng.randint(1000, 99999)}.dscb.akamaiedge.net", f"r{rng.randint(1, 9)}---sn-{rng.choice(['4g5e6nzz', 'ab5l6ne6', 'hgn7yn7d'])}.googlevideo.com",
        f"d{hashlib.md5(str(rng.random()).encode()).hexdigest()[:13]}.cloudfront.net", "v10.events.data.microsoft.com",
        f"prod-{rng.randint(10, 99)}-{hashlib.sha1(str(n).encode()).hexdigest()[:8]}.s3.us-east-1.amazonaws.com",
        "self.events.data.microsoft.com", "fonts.gstatic.com", "safebrowsing.googleapis.com",
        "outlook.office365.com", "login.microsoftonline.com", "graph.microsoft.com", "substrate.office.com",
    ]
    t = start_ms + rng.randint(0, 30_000)
    while t < end:
        name = rng.choice(cdn_names)
        address = s.dns(t, name)[0]
        s.tls(t + 30, address, name, rng.randint(600, 3000), rng.randint(2_000, 900_000))
        t += rng.randint(5_000, 60_000)
    if n % 5:  # a sync client long-polling its push service every minute, as most of the office runs it
        push = "bolt.dropbox.com"
        address = address_of(push)
        t = start_ms + rng.randint(0, 60_000)
        while t < end:
            s.dns(t, push)
            s.tls(t + 20, address, push, 700, 600)
            t += 60_000 + rng.randint(-500, 500)
    ntp_server = "162.159.200.1"
    t = start_ms + rng.randint(0, 64_000)
    while t < end:
        s.ntp(t, ntp_server)
        t += 64_000
    update_at = start_ms + rng.randint(0, int(minutes * 60_000) - 60_000)
    mirror = s.dns(update_at, "deb.debian.org")[0]
    for pkg in ("libssl3_3.0.15-1_amd64.deb", "openssl_3.0.15-1_amd64.deb", "tzdata_2024b-0_all.deb"):
        update_at = s.http(update_at + 200, mirror, "deb.debian.org", uri=f"/debian/pool/main/o/openssl/{pkg}",
                           down=rng.randint(200_000, 2_000_000), agent="Debian APT-HTTP/1.3 (2.6.1)")
    s.ping(start_ms + rng.randint(0, 600_000), "8.8.8.8", count=4)
    if n % 4 == 0:  # a video call: signalling over TLS, media over UDP at a steady rate
        call = start_ms + rng.randint(60_000, 300_000)
        server = s.dns(call, "zoom.us")[0]
        s.tls(call + 50, server, "zoom.us", 3000, 20000)
        media = address_of("media.zoom.us", 170)
        for i in range(int(8 * 60 * 5)):
            ts = call + 200 + i * 200
            s.add(wire.udp_out(s.ip, media, 50000 + n, 8801, os.urandom(16), ts))
            s.add(wire.udp_in(s.ip, media, 50000 + n, 8801, os.urandom(16), ts + 30))
    return s


# -- attacks ----------------------------------------------------------------------------------------
def _b32(data: bytes) -> str:
    return base64.b32encode(data).decode().rstrip("=").lower()


def _chunk_labels(text: str, size: int = 60) -> str:
    return ".".join(text[i : i + size] for i in range(0, len(text), size))


def iodine_tunnel(start_ms: int = T0_MS, seconds: int = 150) -> Stream:
    """iodine-like: base32 downstream requests in NULL queries under one domain, several per second."""
    s = Stream("victim-iodine", agent_ip(101))
    sport = 41000
    for i in range(seconds * 4):
        name = "p" + _chunk_labels(_b32(os.urandom(70))) + ".t.tunnel-example.net"
        s.dns(start_ms + i * 250, name, qtype=10, sport=sport)
    return s


def dnscat2_tunnel(start_ms: int = T0_MS, seconds: int = 200) -> Stream:
    """dnscat2-like: hex-encoded sessions in TXT/CNAME/MX queries under the attacker's domain."""
    s = Stream("victim-dnscat", agent_ip(102))
    session = os.urandom(2).hex()
    for i in range(seconds * 2):
        payload = session + os.urandom(2).hex() + os.urandom(rng_len(i)).hex()
        qtype = (16, 5, 15)[i % 3]
        s.dns(start_ms + i * 500, _chunk_labels(payload, 62) + ".c2-example.org", qtype=qtype,
              txt=os.urandom(30).hex(), sport=42000 + i % 4)
    return s


def rng_len(i: int) -> int:
    return 20 + (i * 7) % 40


def dga_malware(start_ms: int = T0_MS) -> Stream:
    """A host running three published DGAs: Cryptolocker, Locky and Ramnit; only one domain resolves."""
    s = Stream("victim-dga", agent_ip(103))
    day = dt.date(2024, 5, 1)
    domains = dga_families.cryptolocker(day, 30) + dga_families.locky(day, 30) + dga_families.ramnit(0x4F2A12, 30)
    t = start_ms
    for i, name in enumerate(domains):
        live = i == len(domains) - 1
        s.dns(t, name, rcode=0 if live else 3)
        t += 2_500
    return s


def dns_flood(start_ms: int = T0_MS) -> Stream:
    """Six minutes of ordinary lookups (the baseline), then 30 s at 300 queries/s."""
    s = Stream("victim-flood", agent_ip(104))
    rng = random.Random(4)
    t = start_ms
    while t < start_ms + 360_000:
        s.dns(t, f"www.{rng.choice(BENIGN_SITES)}.com")
        t += rng.randint(3_000, 12_000)
    for i in range(9000):
        name = f"{rng.choice(['www', 'mail', 'x' + str(rng.randint(0, 9999))])}.{rng.choice(['victim-shop.com', 'example.org'])}"
        s.dns(t + i * 3 + 10_000, name, sport=43000 + i % 16, rcode=rng.choice([0, 3]))
    return s


def raw_ip_tls(start_ms: int = T0_MS) -> Stream:
    """TLS to an address never resolved: no SNI, then an SNI that no lookup backs."""
    s = Stream("victim-rawtls", agent_ip(105))
    server = "185.220.101.47"
    s.tls(start_ms, server, "", 1500, 9000)
    s.tls(start_ms + 47_000, server, "", 1800, 7000)
    s.tls(start_ms + 131_000, server, "update-check.example-cdn.com", 1600, 8000)
    return s


def icmp_tunnel(start_ms: int = T0_MS, kind: str = "ptunnel") -> Stream:
    """ptunnel-like (magic header, random data, replies not echoing) or icmpsh-like (text both ways)."""
    s = Stream(f"victim-{kind}", agent_ip(106 if kind == "ptunnel" else 107))
    peer = "203.0.113.66"
    ident = 0x4242
    for seq in range(1, 600):
        ts = start_ms + seq * 100
        if kind == "ptunnel":
            req = b"\xd5\x20\x08\x80" + os.urandom(20) + os.urandom(random.randint(100, 1000))
            rep = b"\xd5\x20\x08\x80" + os.urandom(20) + os.urandom(random.randint(50, 1200))
        else:
            req = f"C:\\Users\\bob> dir /s {seq}\r\n volume serial {random.getrandbits(32):08x} files {seq * 7}".encode()
            rep = f"cmd /c type secrets-{seq}.txt & whoami /all & net user".encode()
        head_req = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        head_rep = struct.pack("!BBHHH", 0, 0, 0, ident, seq)
        s.add(wire.packet(s.ip, peer, 0, 0, 1, ts, wire.OUTBOUND, 28 + 8 + len(req), head_req + req))
        s.add(wire.packet(s.ip, peer, 0, 0, 1, ts + 30, wire.INBOUND, 28 + 8 + len(rep), head_rep + rep))
    return s


def http_exfiltration(start_ms: int = T0_MS) -> Stream:
    """Ten 2 MB POSTs to one resolved host within three minutes, tiny answers."""
    s = Stream("victim-exfil", agent_ip(108))
    host = "upload.exfil-example.com"
    server = s.dns(start_ms, host)[0]
    t = start_ms + 100
    for i in range(10):
        s.http(t, server, host, "POST", f"/api/v2/upload?part={i}", body=2_000_000, down=120,
               agent="python-requests/2.31.0", headers={"Content-Type": "application/octet-stream"})
        t += 18_000
    return s


def http_covert(start_ms: int = T0_MS, minutes: int = 10) -> Stream:
    """An implant polling every 30 s (±10%) with base64 data in the URI and a cookie."""
    s = Stream("victim-httpc2", agent_ip(109))
    rng = random.Random(9)
    host = "cdn-metrics.example-analytics.net"
    server = s.dns(start_ms, host)[0]
    t = start_ms + 500
    while t < start_ms + minutes * 60_000:
        token = base64.urlsafe_b64encode(os.urandom(60)).decode()
        cookie = base64.b64encode(os.urandom(72)).decode()
        s.http(t, server, host, "GET", f"/pixel.gif?d={token}", down=400, headers={"Cookie": f"sid={cookie}"})
        t += int(30_000 * rng.uniform(0.9, 1.1))
    return s


def beaconing(start_ms: int = T0_MS, minutes: int = 20) -> Stream:
    """HTTPS beacon every 60 s with 10% jitter and one missed beat, to a resolved domain."""
    s = Stream("victim-beacon", agent_ip(110))
    rng = random.Random(10)
    host = "telemetry.beacon-example.com"
    server = s.dns(start_ms, host)[0]
    t = start_ms + 1000
    beat = 0
    while t < start_ms + minutes * 60_000:
        if beat != 7:  # one missed beat
            s.dns(t - 30, host)
            s.tls(t, server, host, 900, 1300)
        beat += 1
        t += int(60_000 * rng.uniform(0.9, 1.1))
    return s


# -- streaming -----------------------------------------------------------------------------------------
def batches(packets: Iterable[NetworkPacket], size: int = 500) -> Iterator[sensor_pb2.PacketBatch]:
    chunk: list[NetworkPacket] = []
    for pkt in packets:
        chunk.append(pkt)
        if len(chunk) >= size:
            yield sensor_pb2.PacketBatch(packets=chunk)
            chunk = []
    if chunk:
        yield sensor_pb2.PacketBatch(packets=chunk)


def time_slices(streams: list[Stream], slice_ms: int = 60_000) -> Iterator[list[list[NetworkPacket]]]:
    """Each agent's packets cut into consecutive slices of event time, every agent's in step."""
    ordered = [st.sorted() for st in streams]
    cursor = [0] * len(streams)
    t = min(p[0].timestamp for p in ordered if p)
    last = max(p[-1].timestamp for p in ordered if p)
    while t <= last:
        t += slice_ms
        chunks = []
        for i, packets in enumerate(ordered):
            j = cursor[i]
            while j < len(packets) and packets[j].timestamp < t:
                j += 1
            chunks.append(packets[cursor[i] : j])
            cursor[i] = j
        yield chunks


def stream_together(running: object, streams: list[Stream], slice_ms: int = 60_000) -> int:
    """Stream several agents at once, one open gRPC stream each, advancing event time in step.

    Each slice of event time is fully ingested for every agent before the next is sent, as when
    agents stream live side by side; returns the packets accepted.
    """
    import queue
    import threading
    import time

    app = running.app  # type: ignore[attr-defined]
    # One certificate per agent, as enrolled agents have: streams are capped per certificate.
    stubs = [running.stub() for _ in streams]  # type: ignore[attr-defined]
    queues: list[queue.Queue[object]] = [queue.Queue() for _ in streams]
    replies: list[object] = [None] * len(streams)

    def run(i: int) -> None:
        replies[i] = stubs[i].StreamPacketBatches(iter(queues[i].get, None), metadata=[("x-machine-id", streams[i].machine_id)])

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(streams))]
    for thread in threads:
        thread.start()
    expected = app.ingest.packets_received
    for chunks in time_slices(streams, slice_ms):
        for i, chunk in enumerate(chunks):
            for batch in batches(chunk):
                queues[i].put(batch)
            expected += len(chunk)
        deadline = time.time() + 30
        while app.ingest.packets_received < expected and time.time() < deadline:
            time.sleep(0.002)
        # In step means in step: a slice still in flight when the next is sent would mix the agents' event times.
        assert app.ingest.packets_received >= expected, (app.ingest.packets_received, expected)
    for q in queues:
        q.put(None)
    for thread in threads:
        thread.join(30)
    return sum(int(r.packets_received) for r in replies)  # type: ignore[attr-defined]


def stream(stub: object, s: Stream, packets: list[NetworkPacket] | None = None) -> int:
    """Send one agent's packets over a real gRPC stream; the stream's end flushes its flows."""
    reply = stub.StreamPacketBatches(batches(packets if packets is not None else s.sorted()),  # type: ignore[attr-defined]
                                     metadata=[("x-machine-id", s.machine_id)])
    return int(reply.packets_received)


def volume_spike(start_ms: int = T0_MS) -> Stream:
    """25 minutes of ordinary browsing uploads, then 300 MB sent in one flow to a non-web port."""
    s = Stream("victim-volume", agent_ip(111))
    rng = random.Random(11)
    t = start_ms
    while t < start_ms + 25 * 60_000:
        name = f"www.{rng.choice(BENIGN_SITES)}.com"
        address = s.dns(t, name)[0]
        s.tls(t + 40, address, name, rng.randint(50_000, 400_000), rng.randint(100_000, 2_000_000))
        t += rng.randint(10_000, 40_000)
    s.tcp(t, "198.51.100.20", 9000, b"\x00" * 64, 300_000_000, 20_000)
    return s
