# leader_election: PGXS build.
#
# Layout:
#   src/*.c                      the module
#   sql/leader_election--*.sql   install and upgrade scripts (DATA)
#   sql/<test>.sql, expected/    pg_regress tests (REGRESS): every other sql/*.sql;
#                                they share test/regress_helpers.sql
#   test/specs, test/expected    isolation specs (ISOLATION)
#   test/t/*.pl                  TAP tests (PostgreSQL::Test::Cluster)
#   test/metrics                 postgres_exporter queries, Prometheus alerts
#
# `make installcheck` runs all three against an installed extension; the
# regression and isolation suites need a running server (test/all.sh starts
# a throwaway one), the TAP tests start their own.

EXTENSION    = leader_election
MODULE_big   = leader_election
OBJS         = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))
DATA         = $(sort $(wildcard sql/$(EXTENSION)--*.sql))

REGRESS      = $(sort $(basename $(notdir $(filter-out $(DATA),$(wildcard sql/*.sql)))))
REGRESS_OPTS = --load-extension=$(EXTENSION)

ISOLATION      = $(sort $(basename $(notdir $(wildcard test/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test --load-extension=$(EXTENSION)

TAP_TESTS    = 1
PROVE_TESTS  = $(sort $(wildcard test/t/*.pl))

PG_CPPFLAGS  = -I$(srcdir)/src
# CI sets LE_WERROR=1: compiler warnings are errors there.
ifeq ($(LE_WERROR),1)
PG_CFLAGS    = -Werror
endif

# Built on demand by the stress test (see the end of this file).
EXTRA_CLEAN  = test/stress/le_stress

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

.PHONY: installcheck-regress installcheck-isolation installcheck-tap format

installcheck-regress:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)

installcheck-isolation:
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION)

installcheck-tap:
	$(prove_installcheck)

format:
	clang-format -i src/*.c src/*.h

# stress driver (test/stress)
# The libpq client that test/t/200_stress_history.pl runs; not part of `all`.
STRESS_CFLAGS = -O2 -g -Wall -Wextra -Wno-unused-parameter $(if $(filter 1,$(LE_WERROR)),-Werror)

.PHONY: stress-driver
stress-driver: test/stress/le_stress

test/stress/le_stress: test/stress/le_stress.c
	$(CC) $(STRESS_CFLAGS) -I$(shell $(PG_CONFIG) --includedir) -o $@ $< \
		-L$(shell $(PG_CONFIG) --libdir) -lpq
