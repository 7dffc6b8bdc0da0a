import uuid

from appliance.ingest.identity import AGENT_NAMESPACE, AgentIdentity, agent_id_for, clean_meta, peer_address


def test_metadata_cleaning_drops_control_characters_and_bounds_length():
    assert clean_meta("web\x07-01\n") == "web-01"
    assert clean_meta(None) == ""
    assert len(clean_meta("x" * 1000)) == 255


def test_peer_address_forms():
    assert peer_address("ipv4:10.1.2.3:5555") == "10.1.2.3"
    assert peer_address("ipv6:[::1]:5555") == "::1"


def test_agent_id_is_uuid5_of_machine_id_else_peer():
    assert agent_id_for("abc", "10.0.0.1") == str(uuid.uuid5(AGENT_NAMESPACE, "machine:abc"))
    assert agent_id_for("", "10.0.0.1") == str(uuid.uuid5(AGENT_NAMESPACE, "peer:10.0.0.1"))
    assert agent_id_for("abc", "10.0.0.1") == agent_id_for("abc", "10.9.9.9")  # roaming keeps the id


def test_identity_from_metadata():
    ident = AgentIdentity.from_metadata({"x-machine-id": "m1", "x-agent-os": "windows"}, "ipv4:1.2.3.4:9")
    assert ident.os == "windows" and ident.remote_address == "1.2.3.4" and ident.agent_id == agent_id_for("m1", "")
