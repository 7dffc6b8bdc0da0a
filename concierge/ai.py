"""AI concierge providers: an offline retrieval answerer over the hotel's own knowledge, and an
OpenAI-compatible chat-completions adapter (URL + key)."""

from __future__ import annotations

import json
import logging
import math
import re
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from concierge.errors import UpstreamError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Document:
    """One piece of hotel knowledge (FAQ entry, menu item, amenity, opening hours)."""

    kind: str
    title: str
    body: str


@dataclass(frozen=True)
class Answer:
    text: str
    sources: list[str]
    confident: bool  # False: the concierge should hand over to staff


class AiProvider(Protocol):
    name: str

    def answer(self, question: str, knowledge: list[Document]) -> Answer: ...


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the is are was be to of and or in on at for with do does i we you my me your it what when where how can there any have has time".split())


def _tokens(text: str) -> list[str]:
    out = []
    for w in _WORD.findall(text.lower()):
        if w in _STOP:
            continue
        out.append(w[:-1] if len(w) > 3 and w.endswith("s") else w)  # crude plural folding
    return out


class OfflineAi:
    """BM25 retrieval over the hotel's knowledge; answers with the best passages, no network."""

    name = "offline"

    def __init__(self, min_score: float = 1.0) -> None:
        self.min_score = min_score

    def answer(self, question: str, knowledge: list[Document]) -> Answer:
        query = _tokens(question)
        if not query or not knowledge:
            return Answer("I'm not sure about that one; I've asked the front desk to help you.", [], False)
        docs = [_tokens(f"{d.title} {d.title} {d.body}") for d in knowledge]
        avg = sum(map(len, docs)) / len(docs)
        df = Counter(t for d in docs for t in set(d))
        n = len(docs)
        scores = []
        for i, terms in enumerate(docs):
            tf = Counter(terms)
            score = 0.0
            for q in set(query):
                if q not in tf:
                    continue
                idf = math.log(1 + (n - df[q] + 0.5) / (df[q] + 0.5))
                score += idf * tf[q] * 2.2 / (tf[q] + 1.2 * (0.25 + 0.75 * len(terms) / avg))
            scores.append((score, i))
        scores.sort(reverse=True)
        best = [(s, i) for s, i in scores[:2] if s >= self.min_score]
        if not best:
            return Answer("I'm not sure about that one; I've asked the front desk to help you.", [], False)
        parts = [knowledge[i].body if knowledge[i].kind != "menu" else f"{knowledge[i].title}: {knowledge[i].body}" for _, i in best[:1]]
        if len(best) > 1 and best[1][0] >= 0.6 * best[0][0]:
            j = best[1][1]
            parts.append(knowledge[j].body if knowledge[j].kind != "menu" else f"{knowledge[j].title}: {knowledge[j].body}")
        return Answer(" ".join(parts), [knowledge[i].title for _, i in best], True)


class OpenAiCompatible:
    """POST {base_url}/chat/completions with the hotel knowledge as system context."""

    name = "openai"

    def __init__(self, base_url: str, api_key: str, model: str, timeout: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.timeout = timeout
        self.retriever = OfflineAi(min_score=0.0)

    def answer(self, question: str, knowledge: list[Document]) -> Answer:
        context = "\n".join(f"- [{d.kind}] {d.title}: {d.body}" for d in knowledge[:200])
        payload = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": "You are the hotel's concierge. Answer only from these facts; if they do not cover the question, say you will ask the front desk.\n" + context},
                {"role": "user", "content": question},
            ],
            "temperature": 0.2,
        }
        req = urllib.request.Request(f"{self.base_url}/chat/completions", data=json.dumps(payload).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise UpstreamError(f"AI endpoint failed: {err}") from err
        text = data["choices"][0]["message"]["content"].strip()
        return Answer(text, [], "front desk" not in text.lower())
