"""dpi_loop (appliance/native/dpi_loop.h): the DPI layer's loop over a batch, with stand-ins for the parts it calls,
so that every path of the C loop is walked here (and under the sanitizers, test_sanitized.py). What it finds on real
flows against the analyzers flow by flow: tests/appliance/detection/test_dpi_layer.py."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from appliance.detection.dpi.layer import (
    LEAD_DGA, LEAD_DGA_OUT, LEAD_DNS, LEAD_DNS_OUT, LEAD_ICMP, LEAD_TCP, LEAD_TCP_DNS,
)
from appliance.native.dpi import dpi_loop

TCP, UDP, ICMP, OTHER = "tcp", "udp", "icmp", "other"


@dataclass(slots=True)
class Flow:
    name: str
    transport: str
    dns: list[Any] = field(default_factory=list)
    remote_port: int = 53


@dataclass(slots=True)
class Facts:
    tls: Any = None
    client_hello: Any = None
    http_requests: list[Any] = field(default_factory=list)


class Parts:
    """The loop's parts as stand-ins that log every call in order; `facts`, `gates`, `dns`, `dga` say what each
    answers per flow name (a BaseException instance is raised)."""

    def __init__(self, facts: dict[str, Facts] | None = None, gates: dict[str, Any] | None = None,
                 dns: dict[str, Any] | None = None, dga: dict[str, Any] | None = None,
                 leads: dict[tuple[str, int], Any] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.facts, self.gates, self.dns, self.dga = facts or {}, gates or {}, dns or {}, dga or {}
        self.leads = leads or {}
        self.state = ("gate state",)

    @staticmethod
    def _answer(table: dict[str, Any], flow: Flow, default: Any) -> Any:
        value = table.get(flow.name, default)
        if isinstance(value, BaseException):
            raise value
        return value

    def facts_of(self, flow: Flow) -> Facts:
        self.calls.append(("facts", flow.name))
        return self._answer(self.facts, flow, Facts())

    def tls_gate(self, flow: Flow, tls: Any, hello: Any, state: Any) -> Any:
        assert state is self.state
        self.calls.append(("gate", flow.name, tls, hello))
        return self._answer(self.gates, flow, None)

    def dns_scan(self, flow: Flow) -> Any:
        self.calls.append(("dns", flow.name))
        return self._answer(self.dns, flow, None)

    def dga_scan(self, flow: Flow) -> Any:
        self.calls.append(("dga", flow.name))
        return self._answer(self.dga, flow, None)

    def lead(self, kind: int, flow: Flow, a: Any, b: Any) -> Any:
        self.calls.append(("lead", kind, flow.name, a, b))
        answer = self.leads.get((flow.name, kind), [f"{flow.name}:{kind}"])
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def run(self, flows: list[Flow], failed: Any = None) -> list[tuple[int, Any]]:
        parts = (TCP, UDP, ICMP, self.facts_of, self.tls_gate, self.state, self.dns_scan, self.dga_scan)
        return dpi_loop(flows, failed, parts, self.lead)


def test_a_quiet_flow_costs_its_c_parts_and_no_lead() -> None:
    parts = Parts()
    flows = [Flow("t", TCP), Flow("u", UDP, dns=["m"]), Flow("mdns", UDP, dns=["m"], remote_port=5353),
             Flow("empty", UDP), Flow("x", OTHER)]
    assert parts.run(flows) == []
    assert parts.calls == [("facts", "t"), ("gate", "t", None, None), ("dns", "u"), ("dga", "u")]


def test_leads_come_at_once_in_the_python_loops_order() -> None:
    facts = Facts(tls="tls", client_hello="hello", http_requests=["GET /"])
    parts = Parts(facts={"t": facts, "h": Facts(http_requests=["POST /"])}, gates={"t": ("rare", 1, None)},
                  dns={"u": "scanned"}, dga={"u": "dga scanned", "g": "dga only"})
    flows = [Flow("t", TCP, dns=["over tcp"]), Flow("h", TCP), Flow("u", UDP, dns=["m"]), Flow("g", UDP, dns=["m"]),
             Flow("i", ICMP)]
    got = parts.run(flows)
    assert parts.calls == [
        ("lead", LEAD_TCP_DNS, "t", None, None), ("facts", "t"), ("gate", "t", "tls", "hello"),
        ("lead", LEAD_TCP, "t", facts, ("rare", 1, None)),
        ("facts", "h"), ("gate", "h", None, None), ("lead", LEAD_TCP, "h", Facts(http_requests=["POST /"]), None),
        ("dns", "u"), ("lead", LEAD_DNS, "u", "scanned", None), ("dga", "u"), ("lead", LEAD_DGA, "u", "dga scanned", None),
        ("dns", "g"), ("dga", "g"), ("lead", LEAD_DGA, "g", "dga only", None),
        ("lead", LEAD_ICMP, "i", None, None)]
    assert got == [(0, [f"t:{LEAD_TCP_DNS}", f"t:{LEAD_TCP}"]), (1, [f"h:{LEAD_TCP}"]),
                   (2, [f"u:{LEAD_DNS}", f"u:{LEAD_DGA}"]), (3, [f"g:{LEAD_DGA}"]), (4, [f"i:{LEAD_ICMP}"])]


def test_a_flows_findings_add_up_into_a_new_list_and_empty_ones_are_not_reported() -> None:
    first: list[str] = ["dns"]
    parts = Parts(dns={"u": "s"}, dga={"u": "s", "v": "s"}, leads={("u", LEAD_DNS): first, ("v", LEAD_DGA): [],
                                                                    ("i", LEAD_ICMP): None})
    got = parts.run([Flow("u", UDP, dns=["m"]), Flow("v", UDP, dns=["m"]), Flow("i", ICMP)])
    assert got == [(0, ["dns", f"u:{LEAD_DGA}"])]
    assert first == ["dns"]  # `found + judged`, never extended in place


def test_a_scan_out_of_range_is_led_as_such_and_the_loop_goes_on() -> None:
    parts = Parts(dns={"u": ValueError("timestamp")}, dga={"u": ValueError("timestamp")})
    got = parts.run([Flow("u", UDP, dns=["m"])])
    assert [c for c in parts.calls if c[0] == "lead"] == [("lead", LEAD_DNS_OUT, "u", None, None),
                                                           ("lead", LEAD_DGA_OUT, "u", None, None)]
    assert got == [(0, [f"u:{LEAD_DNS_OUT}", f"u:{LEAD_DGA_OUT}"])]


@pytest.mark.parametrize("where", ["facts", "gate", "dns", "dga", "lead", "transport"])
def test_a_flow_that_fails_anywhere_goes_to_failed_inside_its_exception_and_drops_its_findings(where: str) -> None:
    boom = RuntimeError(f"broken {where}")
    breaks = {"facts": ("t", "facts"), "gate": ("t", "gates"), "dns": ("u", "dns"), "dga": ("u", "dga")}
    tables: dict[str, Any] = {"dns": {"u": "s"}}
    if where in breaks:
        name, table = breaks[where]
        tables[table] = {name: boom}
    parts = Parts(**tables, leads={("i", LEAD_ICMP): boom} if where == "lead" else None)
    bad = {"facts": "t", "gate": "t", "dns": "u", "dga": "u", "lead": "i", "transport": "z"}[where]
    flows = [Flow("t", TCP), Flow("u", UDP, dns=["m"]), Flow("i", ICMP), Flow("ok", ICMP)]
    if where == "transport":
        flows.insert(0, object())  # type: ignore[arg-type]  # no transport at all
    handed: list[tuple[Any, BaseException | None]] = []
    got = parts.run(flows, lambda flow: handed.append((flow, sys.exc_info()[1])))
    assert len(handed) == 1
    flow, error = handed[0]
    assert getattr(flow, "name", "z") == bad
    assert error is boom if where != "transport" else isinstance(error, AttributeError)
    assert sys.exc_info() == (None, None, None)  # the handled exception restored after
    assert (len(flows) - 1, [f"ok:{LEAD_ICMP}"]) in got
    assert all(flows[i] is not flow for i, _ in got)  # the failing flow's partial findings are dropped
    with pytest.raises(type(handed[0][1])):
        parts.run(flows)  # no `failed`: the caller's


def test_what_is_not_an_exception_and_what_failed_raises_stop_the_loop() -> None:
    parts = Parts(leads={("i", LEAD_ICMP): KeyboardInterrupt()})
    handed: list[Any] = []
    with pytest.raises(KeyboardInterrupt):
        parts.run([Flow("i", ICMP), Flow("j", ICMP)], handed.append)
    assert handed == []
    parts = Parts(leads={("i", LEAD_ICMP): RuntimeError("judge")})

    def failing(flow: Any) -> None:
        raise OSError("the log is gone")

    with pytest.raises(OSError):
        parts.run([Flow("i", ICMP), Flow("j", ICMP)], failing)


def test_failed_may_shorten_the_list_under_the_loop() -> None:
    flows = [Flow("i", ICMP), Flow("j", ICMP), Flow("k", ICMP)]
    parts = Parts(leads={("i", LEAD_ICMP): RuntimeError("judge")})
    got = parts.run(flows, lambda flow: flows.clear())
    assert got == []


def test_its_arguments_are_checked() -> None:
    parts = Parts()
    with pytest.raises(TypeError):
        dpi_loop([], None, (TCP, UDP), parts.lead)
    with pytest.raises(TypeError):
        dpi_loop((), None, (TCP, UDP, ICMP, parts.facts_of, parts.tls_gate, parts.state, parts.dns_scan, parts.dga_scan),
                 parts.lead)
