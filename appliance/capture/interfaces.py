"""Network interfaces of this host, read from netlink (pyroute2) and, for the link speed, sysfs."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from appliance.capture.model import CaptureInterface, InterfaceAddress

IFF_UP = 0x1
IFF_PROMISC = 0x100
_SYSFS = Path("/sys/class/net")


def _speed(name: str) -> int | None:
    # rtnetlink carries no link speed; the driver's ethtool answer is exposed in sysfs (-1 or an
    # error when it has none, as veth and loopback do).
    try:
        value = int((_SYSFS / name / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value > 0 else None


class InterfaceCatalog:
    """Lists the links this process can capture on."""

    def list(self) -> list[CaptureInterface]:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            links = ipr.get_links()
            addresses: dict[int, list[InterfaceAddress]] = {}
            for addr in ipr.get_addr():
                family: Literal["ipv4", "ipv6"] = "ipv4" if addr["family"] == socket.AF_INET else "ipv6"
                value = addr.get_attr("IFA_LOCAL") or addr.get_attr("IFA_ADDRESS")
                if value:
                    addresses.setdefault(addr["index"], []).append(
                        InterfaceAddress(family=family, address=value, prefixlen=addr["prefixlen"]))
        found = []
        for link in links:
            name = link.get_attr("IFLA_IFNAME")
            flags = int(link["flags"])
            # A packet socket's promiscuous membership raises the promiscuity count but not the
            # IFF_PROMISC flag that netlink reports (that one is only the administrator's setting).
            promiscuous = bool(flags & IFF_PROMISC) or int(link.get_attr("IFLA_PROMISCUITY") or 0) > 0
            found.append(CaptureInterface(
                name=name, index=link["index"], state=str(link.get_attr("IFLA_OPERSTATE") or "UNKNOWN").lower(),
                up=bool(flags & IFF_UP), mac=link.get_attr("IFLA_ADDRESS"), addresses=addresses.get(link["index"], []),
                speed=_speed(name), promiscuous=promiscuous, mtu=link.get_attr("IFLA_MTU"),
            ))
        return sorted(found, key=lambda i: i.index)

    def find(self, name: str) -> CaptureInterface | None:
        return next((i for i in self.list() if i.name == name), None)
