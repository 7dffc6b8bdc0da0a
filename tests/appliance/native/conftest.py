import pytest

# The comparison helpers assert outside test modules; let pytest explain their failures too.
pytest.register_assert_rewrite("tests.appliance.native.flow_scenarios", "tests.appliance.native.oracle")
