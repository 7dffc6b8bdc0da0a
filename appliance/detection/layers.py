"""The console's detection layers: every alert category belongs to exactly one.

The console's `threats` store speaks of DetectionLayer (network, dns, http, tls, behavioral); this
table is the one place the categories map onto them (the settings' `enabledLayers` filter uses it).
"""

from __future__ import annotations

from appliance.model import Category

LAYERS = ("network", "dns", "http", "tls", "behavioral")

LAYER_OF_CATEGORY: dict[str, str] = {
    Category.DNS_TUNNELING.value: "dns",
    Category.DGA.value: "dns",
    Category.DNS_FLOOD.value: "dns",
    Category.RAW_IP_TLS.value: "tls",
    Category.ICMP_COVERT_CHANNEL.value: "network",
    Category.HTTP_EXFILTRATION.value: "http",
    Category.HTTP_COVERT_CHANNEL.value: "http",
    Category.BEACONING.value: "behavioral",
    Category.VOLUME_ANOMALY.value: "behavioral",
}
assert set(LAYER_OF_CATEGORY) == {c.value for c in Category}, "every category needs a layer"
