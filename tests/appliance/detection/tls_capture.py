"""Records the first bytes a real TLS client sends, inside a network-namespace pair (tests/agents/netns.py).

The peer namespace runs a listener that keeps what the client sends until its ClientHello record is
whole; the client (curl, or Python's ssl) runs in the agent namespace and connects to the peer's
lab-private address. Nothing leaves the namespaces.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from tests.agents.netns import Lab

PORT = 8443
_LISTENER = textwrap.dedent("""
    import socket, sys
    out, port = sys.argv[1], int(sys.argv[2])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    server.settimeout(20)
    conn, _ = server.accept()
    conn.settimeout(5)
    data = b""
    while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    open(out, "wb").write(data)
    conn.close()
""")
_PYTHON_CLIENT = textwrap.dedent("""
    import socket, ssl, sys
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as sock:
            context.wrap_socket(sock, server_hostname="files.example-exfil.net")
    except (OSError, ssl.SSLError):
        pass  # the listener closes after the hello: the handshake is meant to fail
""")


def capture_client_hello(tmp: Path, client: str) -> bytes:
    """The bytes `client` ("curl" or "python") sent as its first flight to a TLS server."""
    lab = Lab.create()
    try:
        _, peer = lab.link
        out = tmp / f"hello-{client}.bin"
        listener = tmp / "listener.py"
        listener.write_text(_LISTENER)
        proc = lab.spawn(lab.peer_ns, sys.executable, str(listener), str(out), str(PORT))
        lab.wait_port(lab.peer_ns, PORT)
        if client == "curl":
            lab.ns(lab.agent_ns, "curl", "-s", "-k", "--max-time", "5", "--resolve", f"files.example-exfil.net:{PORT}:{peer}",
                   f"https://files.example-exfil.net:{PORT}/", check=False)
        else:
            script = tmp / "client.py"
            script.write_text(_PYTHON_CLIENT)
            lab.ns(lab.agent_ns, sys.executable, str(script), peer, str(PORT), check=False)
        proc.wait(15)
        return out.read_bytes()
    finally:
        lab.close()
