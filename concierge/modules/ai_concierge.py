"""/ai: ask the AI concierge, and manage the hotel knowledge it answers from (FAQ, amenities, hours)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from concierge.ai import AiProvider, Answer, Document
from concierge.api import Access, Call, Endpoint, Id, OutSchema, QuerySchema, Schema
from concierge.database import Database
from concierge.records import RecordStore

Kind = Literal["faq", "amenity", "hours", "policy"]


class AskIn(Schema):
    question: str = Field(min_length=1, max_length=1000)


class AnswerOut(OutSchema):
    answer: str
    sources: list[str]
    confident: bool
    provider: str


class KnowledgeIn(Schema):
    kind: Kind
    title: str = Field(min_length=1, max_length=200)
    body: str = Field(min_length=1, max_length=4000)


class KnowledgePatch(Schema):
    kind: Kind | None = None
    title: str | None = Field(default=None, min_length=1, max_length=200)
    body: str | None = Field(default=None, min_length=1, max_length=4000)


class KnowledgeOut(OutSchema):
    id: str
    kind: Kind
    title: str
    body: str
    created_at: str


class KnowledgeList(OutSchema):
    items: list[KnowledgeOut]


class KnowledgeQuery(QuerySchema):
    kind: Kind | None = None


class KnowledgeParams(Schema):
    entry_id: Id


class ConciergeAi:
    """Gathers the organization's knowledge (entries + available menu) and asks the provider."""

    def __init__(self, db: Database, provider: AiProvider) -> None:
        self.db = db
        self.provider = provider

    def knowledge(self, org_id: str) -> list[Document]:
        with self.db.transaction(write=False) as tx:
            entries = tx.all("SELECT kind, title, body FROM knowledge WHERE organization_id = ? ORDER BY created_at, id", (org_id,))
            menu = tx.all("SELECT name, description, price_cents, currency FROM menu_items WHERE organization_id = ? AND available = 1", (org_id,))
        docs = [Document(r["kind"], r["title"], r["body"]) for r in entries]
        docs += [Document("menu", m["name"], f"{m['description']} ({m['price_cents'] / 100:.2f} {m['currency']}, room service)") for m in menu]
        return docs

    def ask(self, org_id: str, question: str) -> Answer:
        return self.provider.answer(question, self.knowledge(org_id))


def routes(ai: ConciergeAi, store: RecordStore) -> list:
    def org(c: Call) -> str:
        return c.auth.organization_id

    def ask(c: Call) -> AnswerOut:
        a = ai.ask(org(c) or "", c.body.question)
        return AnswerOut(answer=a.text, sources=a.sources, confident=a.confident, provider=ai.provider.name)

    A, S, P = Access.AUTH, Access.STAFF, KnowledgeParams
    return [
        (Endpoint("POST", "/ask", "Ask the AI concierge a question about the hotel", A, body=AskIn, response=AnswerOut), ask),
        (Endpoint("GET", "/knowledge", "Knowledge entries the AI answers from", S, query=KnowledgeQuery, response=KnowledgeList), lambda c: KnowledgeList(items=[KnowledgeOut(**r) for r in store.list(org(c), {"kind": c.query.kind})])),
        (Endpoint("GET", "/knowledge/<entry_id>", "One knowledge entry", S, params=P, response=KnowledgeOut), lambda c: KnowledgeOut(**store.get(org(c), c.params.entry_id))),
        (Endpoint("POST", "/knowledge", "Add a knowledge entry", S, body=KnowledgeIn, response=KnowledgeOut, status=201), lambda c: KnowledgeOut(**store.insert(org(c), c.body.model_dump()))),
        (Endpoint("PUT", "/knowledge/<entry_id>", "Replace a knowledge entry", S, params=P, body=KnowledgeIn, response=KnowledgeOut), lambda c: KnowledgeOut(**store.update(org(c), c.params.entry_id, c.body.model_dump()))),
        (Endpoint("PATCH", "/knowledge/<entry_id>", "Change a knowledge entry", S, params=P, body=KnowledgePatch, response=KnowledgeOut), lambda c: KnowledgeOut(**store.update(org(c), c.params.entry_id, c.body.model_dump(exclude_unset=True, exclude_none=True)))),
        (Endpoint("DELETE", "/knowledge/<entry_id>", "Delete a knowledge entry", S, params=P, status=204), lambda c: store.delete(org(c), c.params.entry_id)),
    ]
