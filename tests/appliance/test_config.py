import pytest

from appliance.config import Settings, load_settings, parse_settings, split_listen
from appliance.errors import ConfigError


def test_no_file_means_all_defaults():
    settings = load_settings(None)
    assert settings == Settings()
    assert settings.grpc.listen == "0.0.0.0:50051" and settings.rest.listen == "0.0.0.0:8080"
    assert settings.dashboard.listen == "0.0.0.0:3000"
    assert settings.grpc.tls and settings.rest.tls


def test_unknown_key_names_the_key(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("grpc:\n  listne: 1.2.3.4:5\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert "grpc.listne: unknown key" in str(err.value) and str(path) in str(err.value)


def test_bad_value_names_key_and_value_and_all_errors_are_reported():
    with pytest.raises(ConfigError) as err:
        parse_settings({"limits": {"max_flows": -5}, "rest": {"listen": "nowhere"}}, "c.yaml")
    text = str(err.value)
    assert "limits.max_flows" in text and "-5" in text
    assert "rest.listen" in text and "'nowhere'" in text


def test_unknown_section_and_non_mapping():
    with pytest.raises(ConfigError, match="bogus: unknown key"):
        parse_settings({"bogus": {}})
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        parse_settings(["a"])


def test_yaml_is_loaded_safely(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("grpc: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(path)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml")


def test_values_parse(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("grpc:\n  listen: '[::]:6000'\n  tls: false\nanalysis:\n  flow_timeouts:\n    udp_idle: 12\n")
    settings = load_settings(path)
    assert split_listen(settings.grpc.listen) == ("::", 6000)
    assert settings.analysis.flow_timeouts.udp_idle == 12 and not settings.grpc.tls
