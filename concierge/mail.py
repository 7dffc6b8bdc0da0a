"""Outgoing email behind one interface: a maildir-style spool (default) or SMTP."""

from __future__ import annotations

import logging
import smtplib
import threading
from email.message import EmailMessage
from pathlib import Path
from typing import Protocol

from concierge.clock import new_id

log = logging.getLogger(__name__)


class Mailer(Protocol):
    def send(self, to: str, subject: str, body: str) -> None: ...


class SpoolMailer:
    """Writes each message as an .eml file under the state directory (development; tests read them)."""

    def __init__(self, directory: Path, sender: str) -> None:
        self.directory = directory
        self.sender = sender
        self._lock = threading.Lock()

    def send(self, to: str, subject: str, body: str) -> None:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = self.sender, to, subject
        msg.set_content(body)
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            (self.directory / f"{new_id('mail')}.eml").write_bytes(bytes(msg))
        log.info("mail spooled to=%s subject=%r", to, subject)

    def messages(self) -> list[EmailMessage]:
        import email
        from email import policy

        return [email.message_from_bytes(p.read_bytes(), policy=policy.default) for p in sorted(self.directory.glob("*.eml"))]  # type: ignore[misc]


class SmtpMailer:
    """Sends through an SMTP relay (host:port)."""

    def __init__(self, host: str, port: int, sender: str) -> None:
        self.host, self.port, self.sender = host, port, sender

    def send(self, to: str, subject: str, body: str) -> None:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = self.sender, to, subject
        msg.set_content(body)
        with smtplib.SMTP(self.host, self.port, timeout=15) as smtp:
            smtp.send_message(msg)
