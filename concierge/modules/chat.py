"""/chat: conversation threads holding guest, AI and staff messages; staff can take a thread over."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field

from concierge.api import Access, Call, Endpoint, Id, OutSchema, Schema
from concierge.clock import Clock, new_id
from concierge.database import Database, Row
from concierge.errors import BadRequest, Forbidden, NotFound, UpstreamError
from concierge.modules.ai_concierge import ConciergeAi
from concierge.sessions import AuthContext

log = logging.getLogger(__name__)

STAFF_ROLES = ("staff", "manager", "admin", "owner")
Author = Literal["guest", "ai", "staff"]


class ThreadIn(Schema):
    subject: str = Field(min_length=1, max_length=200)
    message: str = Field(min_length=1, max_length=4000)


class ThreadPatch(Schema):
    subject: str | None = Field(default=None, min_length=1, max_length=200)


class MessageIn(Schema):
    thread_id: Id
    body: str = Field(min_length=1, max_length=4000)


class ThreadAction(Schema):
    thread_id: Id


class MessageOut(OutSchema):
    id: str
    author: Author
    author_id: str | None
    body: str
    created_at: str


class ThreadSummary(OutSchema):
    id: str
    guest_user_id: str
    subject: str
    handled_by: Literal["ai", "staff"]
    staff_id: str | None
    created_at: str
    updated_at: str


class ThreadOut(ThreadSummary):
    messages: list[MessageOut]


class ThreadList(OutSchema):
    items: list[ThreadSummary]


class ThreadParams(Schema):
    thread_id: Id


class ChatService:
    """Threads and messages; while the AI handles a thread, each guest message gets an AI reply."""

    def __init__(self, db: Database, ai: ConciergeAi, clock: Clock, resolve_role: object) -> None:
        self.db = db
        self.ai = ai
        self.clock = clock
        self.resolve_role = resolve_role

    def is_staff(self, auth: AuthContext) -> bool:
        return self.resolve_role(auth) in STAFF_ROLES  # type: ignore[operator]

    def _thread(self, auth: AuthContext, thread_id: str) -> Row:
        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT * FROM chat_threads WHERE id = ? AND organization_id = ?", (thread_id, auth.organization_id))
        if row is None or (not self.is_staff(auth) and row["guest_user_id"] != auth.user_id):
            raise NotFound("Thread not found")
        return row

    def get(self, auth: AuthContext, thread_id: str) -> ThreadOut:
        row = self._thread(auth, thread_id)
        with self.db.transaction(write=False) as tx:
            msgs = tx.all("SELECT * FROM chat_messages WHERE thread_id = ? ORDER BY seq", (thread_id,))
        return ThreadOut(**row, messages=[MessageOut(**m) for m in msgs])

    def list(self, auth: AuthContext) -> list[Row]:
        with self.db.transaction(write=False) as tx:
            if self.is_staff(auth):
                return tx.all("SELECT * FROM chat_threads WHERE organization_id = ? ORDER BY updated_at DESC, id", (auth.organization_id,))
            return tx.all("SELECT * FROM chat_threads WHERE organization_id = ? AND guest_user_id = ? ORDER BY updated_at DESC, id", (auth.organization_id, auth.user_id))

    def _append(self, thread_id: str, author: str, author_id: str | None, body: str) -> None:
        now = self.clock.iso()
        with self.db.transaction() as tx:
            row = tx.one("SELECT COALESCE(MAX(seq), 0) AS n FROM chat_messages WHERE thread_id = ?", (thread_id,))
            seq = int(row["n"]) + 1 if row else 1
            tx.execute(
                "INSERT INTO chat_messages (id, thread_id, author, author_id, body, created_at, seq) VALUES (?,?,?,?,?,?,?)",
                (new_id("msg"), thread_id, author, author_id, body, now, seq),
            )
            tx.execute("UPDATE chat_threads SET updated_at = ? WHERE id = ?", (now, thread_id))

    def _ai_reply(self, auth: AuthContext, thread_id: str, question: str) -> None:
        try:
            answer = self.ai.ask(auth.organization_id or "", question)
        except UpstreamError:
            log.warning("ai provider failed; thread left for staff thread=%s", thread_id, exc_info=True)
            self._append(thread_id, "ai", None, "I'm having trouble answering right now; a member of staff will reply shortly.")
            return
        self._append(thread_id, "ai", None, answer.text)

    def open(self, auth: AuthContext, body: ThreadIn) -> ThreadOut:
        if self.is_staff(auth):
            raise BadRequest("Threads are opened by guests; staff reply in them")
        if auth.organization_id is None:
            raise BadRequest("Join a hotel before starting a conversation")
        tid = new_id("thr")
        now = self.clock.iso()
        with self.db.transaction() as tx:
            tx.execute(
                "INSERT INTO chat_threads (id, organization_id, guest_user_id, subject, handled_by, created_at, updated_at) VALUES (?,?,?,?,?,?,?)",
                (tid, auth.organization_id, auth.user_id, body.subject, "ai", now, now),
            )
        self._append(tid, "guest", auth.user_id, body.message)
        self._ai_reply(auth, tid, body.message)
        return self.get(auth, tid)

    def post(self, auth: AuthContext, body: MessageIn) -> ThreadOut:
        thread = self._thread(auth, body.thread_id)
        if self.is_staff(auth):
            if thread["handled_by"] != "staff":
                raise BadRequest("Take over the thread before replying as staff")
            self._append(thread["id"], "staff", auth.user_id, body.body)
        else:
            self._append(thread["id"], "guest", auth.user_id, body.body)
            if thread["handled_by"] == "ai":
                self._ai_reply(auth, thread["id"], body.body)
        return self.get(auth, thread["id"])

    def hand(self, auth: AuthContext, thread_id: str, to: str) -> ThreadOut:
        if not self.is_staff(auth):
            raise Forbidden("Staff role required")
        self._thread(auth, thread_id)
        with self.db.transaction() as tx:
            tx.execute("UPDATE chat_threads SET handled_by = ?, staff_id = ?, updated_at = ? WHERE id = ?", (to, auth.user_id if to == "staff" else None, self.clock.iso(), thread_id))
        log.info("chat thread handed thread=%s to=%s by=%s", thread_id, to, auth.user_id)
        return self.get(auth, thread_id)

    def rename(self, auth: AuthContext, thread_id: str, subject: str | None) -> ThreadOut:
        self._thread(auth, thread_id)
        if subject:
            with self.db.transaction() as tx:
                tx.execute("UPDATE chat_threads SET subject = ?, updated_at = ? WHERE id = ?", (subject, self.clock.iso(), thread_id))
        return self.get(auth, thread_id)

    def delete(self, auth: AuthContext, thread_id: str) -> None:
        self._thread(auth, thread_id)
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM chat_threads WHERE id = ?", (thread_id,))


def routes(service: ChatService) -> list:
    A, S, P = Access.AUTH, Access.STAFF, ThreadParams
    return [
        (Endpoint("GET", "/threads", "Conversations (guests: their own)", A, response=ThreadList), lambda c: ThreadList(items=[ThreadSummary(**r) for r in service.list(c.auth)])),
        (Endpoint("GET", "/threads/<thread_id>", "A conversation with its messages", A, params=P, response=ThreadOut), lambda c: service.get(c.auth, c.params.thread_id)),
        (Endpoint("POST", "/threads", "Guest opens a conversation; the AI concierge answers first", A, body=ThreadIn, response=ThreadOut, status=201), lambda c: service.open(c.auth, c.body)),
        (Endpoint("PATCH", "/threads/<thread_id>", "Rename a conversation", A, params=P, body=ThreadPatch, response=ThreadOut), lambda c: service.rename(c.auth, c.params.thread_id, c.body.subject)),
        (Endpoint("DELETE", "/threads/<thread_id>", "Delete a conversation", S, params=P, status=204), lambda c: service.delete(c.auth, c.params.thread_id)),
        (Endpoint("POST", "/messages", "Post a message (guest, or staff after take-over)", A, body=MessageIn, response=ThreadOut, status=201), lambda c: service.post(c.auth, c.body)),
        (Endpoint("POST", "/threads/take-over", "Staff take over a thread from the AI", S, body=ThreadAction, response=ThreadOut), lambda c: service.hand(c.auth, c.body.thread_id, "staff")),
        (Endpoint("POST", "/threads/hand-back", "Give a thread back to the AI concierge", S, body=ThreadAction, response=ThreadOut), lambda c: service.hand(c.auth, c.body.thread_id, "ai")),
    ]
