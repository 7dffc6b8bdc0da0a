"""A mirror port for the capture tests: the lab's captured link copied (tc mirred) onto the root-side veth.

    root ns (appliance)        agent ns ("inside" host)              peer ns ("outside")
    lab<k>r  <---- mirror ---- eth0      eth1 10.99.X+1.1 <--------> eth0 10.99.X+1.2

Every frame that eth1 sends or receives is copied out of the agent namespace's eth0 and arrives
at `lab<k>r` in the root namespace, addressed to other hosts' MACs, as on a switch's SPAN port.
"""

from __future__ import annotations

from tests.agents.netns import Lab


def mirror_link_onto_uplink(lab: Lab) -> None:
    """clsact + a catch-all u32 filter on both directions of eth1, mirrored to eth0's egress."""
    lab.ns(lab.agent_ns, "tc", "qdisc", "add", "dev", "eth1", "clsact")
    for hook in ("ingress", "egress"):
        lab.ns(lab.agent_ns, "tc", "filter", "add", "dev", "eth1", hook, "protocol", "all", "u32", "match", "u32", "0",
               "0", "action", "mirred", "egress", "mirror", "dev", "eth0")


def snmp(lab: Lab) -> dict[str, int]:
    """IPv4 protocol counters of both lab namespaces summed (/proc/net/snmp is per namespace)."""
    total: dict[str, int] = {}
    for ns in (lab.agent_ns, lab.peer_ns):
        lines = lab.ns(ns, "cat", "/proc/net/snmp").stdout.splitlines()
        for head, values in zip(lines[::2], lines[1::2]):
            prefix = head.split(":")[0]
            for key, value in zip(head.split()[1:], values.split()[1:]):
                total[f"{prefix}.{key}"] = total.get(f"{prefix}.{key}", 0) + int(value)
    return total


def sent_by_protocol(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Packets both namespaces put on the captured link, per transport, between two snapshots."""
    def delta(key: str) -> int:
        return after[key] - before[key]

    return {"TCP": delta("Tcp.OutSegs") + delta("Tcp.RetransSegs"), "UDP": delta("Udp.OutDatagrams"),
            "ICMP": delta("Icmp.OutMsgs")}
