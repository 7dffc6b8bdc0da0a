"""The local channel between the server process and its analysis process: frames over a socketpair.

A frame is one kind byte, a 4-byte big-endian length and the payload. Towards analysis: flow record
batches and DNS batches (proto/flow_record.proto) and control messages (JSON); back: the analysis
process's counters (JSON). The socket's own buffer is the channel's bound: a sender that outruns the
analysis process blocks in `send`, never the gRPC streams (the server queues in front of it, fairly,
and drops what does not fit).
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
from typing import Any

from appliance.errors import ApplianceError

FLOWS = b"F"  # FlowRecordBatch
DNS = b"D"  # DnsBatch
CONTROL = b"C"  # {"op": "reload" | "drain" | "stop", "seq": n}
STATS = b"S"  # the analysis process's counters, {"drained": seq} after a drain

MAX_FRAME = 64 << 20
# The server's send buffer: a whole flow batch (up to ~1 MB of DNS-heavy records) fits, so `send` is one copy and
# the analysis process can read the frame at once. With the default (~208 KB) a large frame went in parts, and the
# server's sending thread had to be scheduled again for each part on the busy ingestion core while the analysis
# process waited for the rest: 1-4 ms per large frame at the end of the bench corpus, 3% of its run. The kernel
# caps it at net.core.wmem_max (the package raises that to this size: packaging/deb/sysctl.conf).
SEND_BUFFER = 4 << 20
_WHOLE_MAX = 8 << 20  # frames up to this size are read in one call (their bytes allocated before they arrive)
_HEAD = struct.Struct("!cI")


class ChannelClosed(ApplianceError):
    """The other end went away (the analysis process exited or the server closed the channel)."""


class Channel:
    """One end of the socketpair. Frames are written whole, one at a time, from any thread; `recv` runs on one
    thread (beside the writers)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        # Between frames the reading thread waits in poll() for data, not in recv(). A thread asleep in recv() sleeps
        # on the socket's one wait queue, and the kernel wakes that queue whenever the peer's reads free send space
        # here (unix_write_space), whatever the sleeper waits for. So the server's receiving thread woke up on the
        # ingestion CPU for every frame the analysis process read, about 45 times a pass of the bench corpus, each a
        # reschedule interrupt and a preempted gRPC handler. A poll() for POLLIN is woken only for data. On the 2-core
        # bench machine (2026-11-29, noted in docs/figures.md), ingestion with the analysis process went from 714,000
        # to 814,000 packets/s (medians of 6 passes, interleaved).
        self._readable = select.poll()
        self._readable.register(sock.fileno(), select.POLLIN)
        # A frame is written whole: the server's sender and a stop() from another thread never interleave their
        # bytes (a large frame is several writes when the buffer fills). close() waits for the frame being written.
        self._write_lock = threading.Lock()

    @classmethod
    def pair(cls) -> tuple[Channel, socket.socket]:
        """This side's channel and the socket to hand to the child (inheritable)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)  # capped, never refused
        theirs.set_inheritable(True)
        return cls(ours), theirs

    def send_buffer(self) -> int:
        """The bytes this end may have in flight before `send` waits (what the kernel granted of SEND_BUFFER)."""
        try:
            return int(self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        except OSError:  # closed
            return 0

    def send(self, kind: bytes, payload: bytes) -> None:
        with self._write_lock:
            try:
                self.sock.sendall(_HEAD.pack(kind, len(payload)) + payload)
            except OSError as err:
                raise ChannelClosed(str(err)) from None

    def send_json(self, kind: bytes, body: dict[str, Any]) -> None:
        self.send(kind, json.dumps(body, separators=(",", ":")).encode())

    def _exactly(self, size: int) -> bytes:
        if size <= _WHOLE_MAX and self.sock.gettimeout() is None:
            # One call, one copy from the kernel into the frame's bytes: reading 1 MiB chunks into a bytearray and
            # copying it out cost the analysis process 2.8-3.3 ms of CPU per corpus run, this 1.1 ms. (Only without
            # a timeout: MSG_WAITALL would wait in the kernel past it.)
            try:
                data = self.sock.recv(size, socket.MSG_WAITALL)
            except OSError as err:
                raise ChannelClosed(str(err)) from None
            if len(data) == size:
                return data
            if not data:
                raise ChannelClosed("end of stream")
            chunks = bytearray(data)  # a signal or the end of the stream cut it short: read on, the loop says which
        else:
            chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self.sock.recv(min(size - len(chunks), 1 << 20))
            except OSError as err:
                raise ChannelClosed(str(err)) from None
            if not chunk:
                raise ChannelClosed("end of stream")
            chunks += chunk
        return bytes(chunks)

    def waiting(self) -> bool:
        """Whether the next frame's first bytes are here already (recv would not wait)."""
        return bool(self._readable.poll(0))

    def recv(self) -> tuple[bytes, bytes]:
        """The next frame (kind, payload); ChannelClosed at the end."""
        if self.sock.gettimeout() is None:  # with a timeout, recv itself polls for data first
            try:
                self._readable.poll()  # returns for data, the end of the stream, an error or a closed descriptor
            except OSError as err:
                raise ChannelClosed(str(err)) from None
        kind, size = _HEAD.unpack(self._exactly(_HEAD.size))
        if size > MAX_FRAME:
            raise ChannelClosed(f"frame of {size} bytes is over the {MAX_FRAME} limit")
        return kind, self._exactly(size) if size else b""

    def close(self) -> None:
        try:  # first: a write blocked on a full buffer ends (EPIPE) and lets go of the lock
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self._write_lock:  # never close the descriptor under a write (its number could be reused meanwhile)
            self.sock.close()
