# The analyst console's web app (console/): `make console` installs the pinned npm packages (npm ci, from
# package-lock.json) and builds console/dist with vite, only when the sources changed. Included from the
# Makefile; `make run`, `make test` and `make bench` depend on it (the dashboard serves console/dist; the tests drive
# it; the console bench weighs its bundle).
CONSOLE_DIR := console
CONSOLE_NPM_STAMP := $(CONSOLE_DIR)/node_modules/.installed
CONSOLE_DIST := $(CONSOLE_DIR)/dist/index.html
CONSOLE_SOURCES := $(shell find $(CONSOLE_DIR)/src -type f 2>/dev/null) $(CONSOLE_DIR)/index.html \
  $(CONSOLE_DIR)/vite.config.ts $(CONSOLE_DIR)/tsconfig.json
# Vite 7 needs Node 20.19 or newer (Node 20 is on the machine; Debian 12's own nodejs is 18).
CONSOLE_NODE_OK = node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=19)?0:1)'

.PHONY: console console-test

$(CONSOLE_NPM_STAMP): $(CONSOLE_DIR)/package.json $(CONSOLE_DIR)/package-lock.json
	@command -v npm >/dev/null && $(CONSOLE_NODE_OK) || { echo "the console needs Node >= 20.19 with npm (node --version: $$(node --version 2>&1))"; exit 1; }
	cd $(CONSOLE_DIR) && npm ci --no-audit --no-fund --loglevel=error 2>&1 | { grep -v 'nodedir\|install-scripts' || true; }
	@touch $@

$(CONSOLE_DIST): $(CONSOLE_NPM_STAMP) $(CONSOLE_SOURCES)
	cd $(CONSOLE_DIR) && npx --no-install tsc --noEmit && npx --no-install vite build --logLevel warn
	@touch $@

console: $(CONSOLE_DIST)

# The store and client unit tests alone (make test runs them too, through tests/console/test_console_units.py).
console-test: $(CONSOLE_NPM_STAMP)
	cd $(CONSOLE_DIR) && npm test --silent

run: $(CONSOLE_DIST)
test: $(CONSOLE_DIST)
bench: $(CONSOLE_DIST)

.PHONY: console-clean
console-clean:
	rm -rf $(CONSOLE_DIR)/node_modules $(CONSOLE_DIR)/dist
clean: console-clean
