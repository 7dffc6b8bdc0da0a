"""`python -m appliance.capture --control-dir DIR`: the capture process."""

from __future__ import annotations

import sys

from appliance.capture.runner import main

sys.exit(main(sys.argv[1:]))
