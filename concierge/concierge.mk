# Concierge (hotel concierge platform API): `make concierge` serves it with a seeded demo hotel.
# Included at the end of the top-level Makefile; $(STAMP) and $(PY) come from there.
# The concierge tests run behind real nginx, on real Redis and PostgreSQL.
TEST_APT_PACKAGES += nginx redis-server postgresql
# 8090: the appliance holds 8080 (REST), 50051 (gRPC) and 3000 (dashboard); both products run side by side.
CONCIERGE_PORT ?= 8090

.PHONY: concierge
concierge: $(STAMP)
	CONCIERGE_STATE_DIR=$${CONCIERGE_STATE_DIR:-var/concierge} $(PY) -m concierge --seed --port $(CONCIERGE_PORT)
