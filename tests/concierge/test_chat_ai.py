"""The AI concierge answers from the hotel's knowledge offline; staff can take a chat thread over."""

from __future__ import annotations

from concierge.ai import Document, OfflineAi
from tests.concierge.conftest import Hotel

KNOWLEDGE = [
    Document("hours", "Breakfast hours", "Breakfast is served from 6:30 to 10:30 in the Aurora Restaurant."),
    Document("hours", "Pool hours", "The rooftop pool is open from 7:00 to 21:00."),
    Document("faq", "Parking", "Underground parking costs 25 EUR per night."),
]


def test_offline_ai_retrieves_the_right_fact() -> None:
    ai = OfflineAi()
    answer = ai.answer("When is breakfast served?", KNOWLEDGE)
    assert answer.confident and "6:30" in answer.text and answer.sources[0] == "Breakfast hours"
    assert "25 EUR" in ai.answer("how much is parking", KNOWLEDGE).text
    unknown = ai.answer("Can I land a helicopter on the roof?", KNOWLEDGE)
    assert not unknown.confident and "front desk" in unknown.text


def test_chat_thread_ai_then_staff_takeover(hotel: Hotel) -> None:
    staff = hotel.client("staff")
    staff.post("/ai/knowledge", {"kind": "hours", "title": "Breakfast hours", "body": "Breakfast is served from 6:30 to 10:30."})
    staff.post("/menu/items", {"name": "Club sandwich", "category": "mains", "priceCents": 2200, "description": "Chicken, bacon, fries"})
    _, guest = hotel.guest_with_account("Talk")
    thread = guest.post("/chat/threads", {"subject": "Hungry", "message": "What time is breakfast?"}).json()
    assert [m["author"] for m in thread["messages"]] == ["guest", "ai"]
    assert "6:30" in thread["messages"][1]["body"]
    asked = guest.post("/ai/ask", {"question": "do you have a club sandwich?"}).json()
    assert "Club sandwich" in asked["answer"] and asked["provider"] == "offline"
    assert staff.post("/chat/messages", {"threadId": thread["id"], "body": "Hello!"}).status_code == 400  # take over first
    taken = staff.post("/chat/threads/take-over", {"threadId": thread["id"]}).json()
    assert taken["handledBy"] == "staff" and taken["staffId"] == staff.me["user"]["id"]
    staff.post("/chat/messages", {"threadId": thread["id"], "body": "I'll bring you a coffee."})
    after = guest.post("/chat/messages", {"threadId": thread["id"], "body": "Thanks!"}).json()
    assert [m["author"] for m in after["messages"]] == ["guest", "ai", "staff", "guest"]  # no AI reply once staff handle it
    _, other = hotel.guest_with_account("Nosy")
    assert other.get(f"/chat/threads/{thread['id']}").status_code == 404
