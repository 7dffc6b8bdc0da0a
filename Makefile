# Two commands matter: `make run` and `make test`. Everything they need is set up here.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip on these machines warns about every absent local index; keep the output readable.
PIPQUIET := 2>&1 | { grep -v '^WARNING: Location' || true; }
# The venv's interpreter: Debian's python3, the one the package and the image run the appliance on
# (packaging/deb/build.sh), so that `make run`, the tests and the benches run what users run. Another python3 on
# the PATH (pyenv's 3.11.7, built without profile-guided optimisation) cost the analysis process 22% more CPU on the
# pipeline bench's corpus. A venv made with another interpreter is made again (INTERPRETER below).
PYTHON ?= /usr/bin/python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
INTERPRETER := $(VENV)/.interpreter
# What the tests and benches add (requirements-test.txt and the concierge's own requirements).
TEST_STAMP := $(VENV)/.installed-test
GEN := appliance/generated/sensor_pb2.py
AGENTS_GEN := agents/generated/sensor_pb2.py
# The C extensions (appliance/native/: fastpath.c for ingestion, dpi.c for analysis), compiled in place by the editable install.
NATIVE := appliance/native/.built
# Debian packages, split by purpose: `make run` installs RUN_APT_PACKAGES only; `make test` adds TEST_APT_PACKAGES.
# Running: systemd-python builds against libsystemd; the C fast path compiles at install (gcc); binutils for PyInstaller.
RUN_APT_PACKAGES := pkg-config libsystemd-dev gcc binutils
# Debian's interpreter, its venv module and its headers (the C extensions and systemd-python compile against them).
RUN_APT_PACKAGES += python3 python3-venv python3-dev
# TLS certificate checks trust the system's roots (paths.tls_trust_anchors).
RUN_APT_PACKAGES += ca-certificates
# Testing: network namespaces, the lab's resolver and real tunneling tools, script linting, unit verification.
# The console's browser tests drive Debian's chromium (never a downloaded browser).
TEST_APT_PACKAGES := iproute2 curl shellcheck systemd dnsmasq-base iodine ptunnel-ng openssl chromium
# DGA evaluation and word model: the SCOWL English word list (dictionary DGA word lists, `dga_words build`).
TEST_APT_PACKAGES += wamerican
# The cluster's tests and bench start a real Redis (concierge.mk lists it too; `make run` never needs it).
TEST_APT_PACKAGES += redis-server
CONFIG ?=
PYTEST_ARGS ?=
# `make test FAST=1` skips the slow end-to-end tests (CI runs them all).
ifdef FAST
PYTEST_ARGS += -m "not slow"
endif

.PHONY: run test bench gen venv sysdeps sysdeps-test clean agents agents-gen FORCE
.DEFAULT_GOAL := run

# $(call apt_ensure,PACKAGES): install the Debian packages that are missing (as root), else say what to run.
define apt_ensure
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing Debian packages:$$missing"; \
	    (apt-get install -y -qq $$missing >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq $$missing >/dev/null)) \
	      || { echo "apt-get install$$missing failed"; exit 1; }; \
	  else echo "missing Debian packages:$$missing -- run: sudo apt-get install$$missing"; exit 1; fi; \
	fi
endef

sysdeps:
	$(call apt_ensure,$(RUN_APT_PACKAGES))

sysdeps-test: sysdeps
	$(call apt_ensure,$(TEST_APT_PACKAGES))

# Rewritten only when PYTHON names another interpreter than the venv's: then the venv is made again.
$(INTERPRETER): FORCE | sysdeps
	@want="$$(readlink -f "$$(command -v $(PYTHON))")"; \
	if [ "$$(cat $@ 2>/dev/null)" != "$$want" ]; then \
	  if [ -e $(VENV) ]; then echo "$(VENV) is made again with $(PYTHON) ($$want)"; rm -rf $(VENV); fi; \
	  mkdir -p $(VENV) && echo "$$want" > $@; \
	fi

$(STAMP): requirements.txt pyproject.toml $(INTERPRETER) | sysdeps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt $(PIPQUIET)
	@touch $@

# One pip call for every file: a pin that disagrees between the products' files stops here.
$(TEST_STAMP): requirements-test.txt concierge/requirements.txt concierge/requirements-test.txt $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt -r requirements-test.txt \
	  -r concierge/requirements.txt -r concierge/requirements-test.txt $(PIPQUIET)
	@touch $@

$(NATIVE): appliance/native/fastpath.c appliance/native/outbox.h appliance/native/dns_wire.h appliance/native/dpi.c appliance/native/tls_hello.h appliance/native/dns_windows.h appliance/native/suffix_split.h appliance/native/slot_maker.h appliance/native/dns_list.h appliance/native/sample_list.h appliance/native/facts_memo.h appliance/native/dpi_loop.h appliance/native/loop_failure.h appliance/native/behaviour_tally.h appliance/native/signature_scan.h appliance/native/name_model.h appliance/native/resolver_cache.h appliance/native/word_segment.h appliance/native/resolver_batch.h appliance/native/tls_gate.h appliance/native/memory_reserve.h appliance/native/correlation_sums.h pyproject.toml $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . $(PIPQUIET)
	@$(PY) -c "import appliance.native.fastpath, appliance.native.dpi" || { echo "the C extensions did not build: see the compiler output above"; exit 1; }
	@touch $@

venv: $(STAMP) $(NATIVE)

$(GEN): proto/sensor.proto proto/flow_record.proto $(STAMP) $(NATIVE)
	@mkdir -p appliance/generated
	@touch appliance/generated/__init__.py
	$(PY) -m grpc_tools.protoc -Iappliance/generated=proto --python_out=. --grpc_python_out=. --pyi_out=. proto/sensor.proto
	$(PY) -m grpc_tools.protoc -Iappliance/generated=proto --python_out=. --pyi_out=. proto/flow_record.proto

gen: $(GEN)

# The agents are frozen separately and never import `appliance`: they get their own generated modules.
$(AGENTS_GEN): proto/sensor.proto $(STAMP)
	@mkdir -p agents/generated
	@touch agents/generated/__init__.py
	$(PY) -m grpc_tools.protoc -Iagents/generated=proto --python_out=. --grpc_python_out=. --pyi_out=. proto/sensor.proto
	@# A private descriptor pool: tests and benches load both packages' `sensor` symbols in one process.
	sed -i 's/^DESCRIPTOR = _descriptor_pool.Default()/DESCRIPTOR = _descriptor_pool.DescriptorPool()/' $@

agents-gen: $(AGENTS_GEN)

# The one-file Linux agent, where /static serves it and enrollment looks for it: agents/<os>-<arch>/sensor-agent.
# Built once with PyInstaller into build/ (the cache) and rebuilt only when the agent's sources change.
AGENT_ARCH := $(subst x86_64,amd64,$(subst aarch64,arm64,$(shell uname -m)))
AGENT_BIN := var/static/agents/linux-$(AGENT_ARCH)/sensor-agent
AGENT_BUILT := build/pyinstaller/dist/sensor-agent
AGENT_SOURCES := $(shell find agents -name '*.py' -not -path 'agents/generated/*' 2>/dev/null) $(wildcard packaging/pyinstaller/*)
$(AGENT_BUILT): $(AGENT_SOURCES) $(AGENTS_GEN)
	@mkdir -p build/pyinstaller
	@echo "building the Linux agent with PyInstaller (once, about a minute; cached in $@ until agents/ changes)..."
	@start=$$(date +%s); \
	$(PY) -m PyInstaller --noconfirm --log-level WARN --distpath build/pyinstaller/dist \
	  --workpath build/pyinstaller/work packaging/pyinstaller/sensor-agent-linux.spec \
	  && echo "built the Linux agent in $$(( $$(date +%s) - start )) s"

$(AGENT_BIN): $(AGENT_BUILT)
	@mkdir -p $(dir $@)
	install -m 0755 $< $@

agents: $(AGENT_BIN)

# `make run` serves the Linux agent from the configured /static (paths.static_dir), so that a pasted
# enrollment command works out of the box; Windows and macOS agents are pushed (README).
# Then the appliance and the analyst console (appliance.dashboard, port 3000) together; Ctrl-C or either one
# ending stops both.
run: $(GEN) $(AGENT_BUILT)
	@static=$$($(PY) -m appliance --print-static-dir $(if $(CONFIG),--config $(CONFIG))) || exit 2; \
	dest="$$static/agents/linux-$(AGENT_ARCH)/sensor-agent"; \
	if ! cmp -s $(AGENT_BUILT) "$$dest"; then mkdir -p "$$(dirname "$$dest")" && install -m 0755 $(AGENT_BUILT) "$$dest" \
	  && echo "the Linux agent is served from $$dest"; fi
	@trap 'kill -TERM $$pids 2>/dev/null; wait' INT TERM EXIT; \
	$(PY) -m appliance $(if $(CONFIG),--config $(CONFIG)) & pids=$$!; \
	$(PY) -m appliance.dashboard $(if $(CONFIG),--config $(CONFIG)) --wait 60 & pids="$$pids $$!"; \
	wait -n

test: $(GEN) $(AGENTS_GEN) $(TEST_STAMP) | sysdeps-test
	$(PY) -m pytest -q tests $(PYTEST_ARGS)

bench: $(GEN) $(AGENTS_GEN) $(TEST_STAMP) | sysdeps-test
	$(PY) -m bench

clean:
	rm -rf $(VENV) appliance/generated agents/generated var .pytest_cache $(NATIVE) appliance/native/*.so

-include concierge/concierge.mk

# -- DGA detection (issue 16) -------------------------------------------------------------------
.PHONY: eval-dga dga-models
# Per-family detection share and benign false-positive rate through the real analysis pipeline.
eval-dga: $(GEN) $(TEST_STAMP) | sysdeps-test
	$(PY) -m tools.dga_eval
# Rebuilds the shipped name models from the word lists that packages ship (offline).
dga-models: $(TEST_STAMP) | sysdeps-test
	$(PY) -m appliance.detection.dpi.dga build /usr/share/dict/american-english
	$(PY) -m appliance.detection.dpi.dga_words build /usr/share/dict/american-english
-include console/console.mk

# Packaging: make deb, make repo, make image (packaging/).
-include packaging/packaging.mk
