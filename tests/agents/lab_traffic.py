"""Traffic for the namespace lab, run inside a namespace with `ip netns exec`.

    lab_traffic.py serve ADDR CERT KEY     HTTP on ADDR:8080 and TLS on ADDR:8443 until killed
    lab_traffic.py dns SERVER NAME         one UDP A query; prints what was sent and received
    lab_traffic.py icmp PEER COUNT         echo requests of 56 data bytes over a raw socket
    lab_traffic.py http PEER               GET / on PEER:8080
    lab_traffic.py tls PEER                a TLS session with PEER:8443 held open for a second
    lab_traffic.py burst PEER PORT COUNT   COUNT UDP datagrams of 100 bytes as fast as possible

Every client prints one JSON line describing what it did, so tests can compute exact expectations.
Standard library only: it runs in whatever Python the test uses.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def serve(addr: str, cert: str, key: str) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b"lab says hello\n" * 20
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer((addr, 8080), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server((addr, 8443))
    while True:
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True) as tls:
                data = tls.recv(1024)
                tls.sendall(b"tls-echo:" + data)
                tls.recv(1024)  # until the client closes
        except (OSError, ssl.SSLError):
            pass


def dns(server: str, name: str) -> dict[str, object]:
    query = struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.connect((server, 53))
        sock.send(query)
        answer = sock.recv(4096)
        return {"local": sock.getsockname(), "query": len(query), "answer": len(answer),
                "rcode": answer[3] & 15, "answers": struct.unpack("!H", answer[6:8])[0]}


def icmp(peer: str, count: int) -> dict[str, object]:
    ident = os.getpid() & 0xFFFF
    replies = 0
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        sock.settimeout(2)
        for seq in range(count):
            data = bytes(range(56))
            head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            message = struct.pack("!BBHHH", 8, 0, checksum(head + data), ident, seq) + data
            sock.sendto(message, (peer, 0))
            while True:
                packet = sock.recv(2048)
                ihl = (packet[0] & 15) * 4
                kind, _, _, rid, rseq = struct.unpack("!BBHHH", packet[ihl : ihl + 8])
                if kind == 0 and rid == ident and rseq == seq:
                    replies += 1
                    break
    return {"sent": count, "replies": replies, "size": 20 + 8 + 56}


def http_get(peer: str) -> dict[str, object]:
    with socket.create_connection((peer, 8080), timeout=5) as sock:
        request = f"GET / HTTP/1.1\r\nHost: {peer}\r\nConnection: close\r\n\r\n".encode()
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return {"local": sock.getsockname(), "request": len(request), "response": len(received), "pid": os.getpid()}


def tls(peer: str) -> dict[str, object]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((peer, 8443), timeout=5) as raw:
        local = raw.getsockname()
        with context.wrap_socket(raw, server_hostname="lab.test") as sock:
            sock.sendall(b"ping")
            echo = sock.recv(1024)
            time.sleep(1.0)  # hold the socket so the agent can attribute it to this process
    return {"local": local, "echo": echo.decode(), "pid": os.getpid()}


def burst(peer: str, port: int, count: int) -> dict[str, object]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((peer, port))
        payload = b"b" * 100
        started = time.perf_counter()
        sent = 0
        for _ in range(count):
            try:
                sock.send(payload)
                sent += 1
            except OSError:
                pass  # ECONNREFUSED from an earlier ICMP unreachable: the datagram still left
        elapsed = time.perf_counter() - started
        return {"local": sock.getsockname(), "sent": sent, "seconds": elapsed}


def main(argv: list[str]) -> int:
    kind = argv[0]
    if kind == "serve":
        serve(argv[1], argv[2], argv[3])
        return 0
    handlers = {
        "dns": lambda: dns(argv[1], argv[2]),
        "icmp": lambda: icmp(argv[1], int(argv[2])),
        "http": lambda: http_get(argv[1]),
        "tls": lambda: tls(argv[1]),
        "burst": lambda: burst(argv[1], int(argv[2]), int(argv[3])),
    }
    print(json.dumps(handlers[kind]()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
