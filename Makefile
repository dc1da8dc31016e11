# verld: `make run` starts the daemon on the simulated device; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,fast,mqtt]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/verld --config configs/demo_config.yaml

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check verld tests tools
	$(BIN)/ruff format --check verld tests tools
	$(BIN)/mypy

check: lint test

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the package and its console scripts
# (pip, for $(PYTHON)), then the systemd units, udev rule, sysusers and tmpfiles
# files under $(PREFIX)/lib (systemd and udev read /usr/local/lib as well as /usr/lib;
# the units' ExecStart= is rewritten to $(PREFIX)/bin/verld), docs and example
# config under $(PREFIX)/share/doc/verld, and /etc/verld/verld.yaml unless one
# exists. DESTDIR stages the whole tree for a package. See docs/deploy.md.
# The Modbus TCP sockets (verld-modbus.socket, verld-modbus@.socket) and the MQTT bridge's
# verld-mqtt.service (ExecStart= rewritten to $(PREFIX)/bin/verld-mqtt) are installed with
# the units; nothing is enabled. The bridge's config goes to /etc/verld/mqtt.yaml unless
# one exists, mode 0640: its group must be verld-mqtt (made by systemd-sysusers), so an
# install without DESTDIR hands it over when that group exists already; otherwise chgrp
# it after systemd-sysusers (docs/deploy.md, "The MQTT bridge under systemd").
# systemd/verld.service.d/ports.conf (what virtual serial ports need: chown back in the
# system-call filter, /run/verld/ports) is NOT installed as a drop-in: one under
# $(PREFIX)/lib/systemd/system/verld.service.d/ would apply to every installation,
# ports or not. It goes to $(PREFIX)/share/doc/verld/verld.service.d/ports.conf as an
# example; an admin who configures `ports:` copies it to
# /etc/systemd/system/verld.service.d/ (docs/deploy.md, "Virtual serial ports under systemd").
# pip runs with --ignore-installed: it never touches $(PYTHON)'s own environment
# (a checkout's editable install stays) and puts missing dependencies under PREFIX
# too; PIPFLAGS=--no-deps leaves them to the distribution.
PREFIX  ?= /usr/local
DESTDIR ?=
PIPFLAGS ?=
SYSTEMD_LIB := $(DESTDIR)$(PREFIX)/lib

.PHONY: install
install:
	$(PYTHON) -m pip install -q --no-warn-script-location --ignore-installed $(PIPFLAGS) \
		--root '$(DESTDIR)/' --prefix '$(PREFIX)' .
	install -d $(SYSTEMD_LIB)/systemd/system $(SYSTEMD_LIB)/udev/rules.d \
		$(SYSTEMD_LIB)/sysusers.d $(SYSTEMD_LIB)/tmpfiles.d \
		$(DESTDIR)$(PREFIX)/share/doc/verld/verld.service.d $(DESTDIR)/etc/verld
	for unit in verld.service verld.socket verld@.service \
			verld-modbus.socket verld-modbus@.socket verld-mqtt.service; do \
		sed 's|/usr/bin/verld|$(PREFIX)/bin/verld|' systemd/$$unit \
			> $(SYSTEMD_LIB)/systemd/system/$$unit || exit 1; \
		chmod 0644 $(SYSTEMD_LIB)/systemd/system/$$unit; \
	done
	install -m 0644 systemd/70-verld.rules $(SYSTEMD_LIB)/udev/rules.d/70-verld.rules
	install -m 0644 systemd/verld.sysusers $(SYSTEMD_LIB)/sysusers.d/verld.conf
	install -m 0644 systemd/verld.tmpfiles $(SYSTEMD_LIB)/tmpfiles.d/verld.conf
	install -m 0644 README.md docs/deploy.md configs/verld.yaml configs/mqtt.yaml \
		$(DESTDIR)$(PREFIX)/share/doc/verld/
	install -m 0644 systemd/verld.service.d/ports.conf \
		$(DESTDIR)$(PREFIX)/share/doc/verld/verld.service.d/ports.conf
	test -e $(DESTDIR)/etc/verld/verld.yaml || \
		install -m 0644 configs/verld.yaml $(DESTDIR)/etc/verld/verld.yaml
	test -e $(DESTDIR)/etc/verld/mqtt.yaml || { \
		install -m 0640 configs/mqtt.yaml $(DESTDIR)/etc/verld/mqtt.yaml && \
		if [ -z '$(DESTDIR)' ] && getent group verld-mqtt >/dev/null; then \
			chgrp verld-mqtt /etc/verld/mqtt.yaml; fi; }
	@test -n '$(DESTDIR)' || echo 'verld installed; now: systemd-sysusers; systemd-tmpfiles --create;' \
		'udevadm control --reload; systemctl daemon-reload; systemctl enable --now verld.socket;' \
		'for the MQTT bridge: chgrp verld-mqtt /etc/verld/mqtt.yaml; systemctl enable --now verld-mqtt.service'

# `make bench`: tools/bench's full run (direct pty vs socat vs verld, interleaved rounds, 6 to 10
# minutes); refreshes docs/bench.json, docs/bench.png and the figures in docs/benchmarks.md.
.PHONY: bench
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python tools/bench

# `make soak`: the resilience soak as the issue checks it: 8 clients for 10 minutes under every
# fault verld-sim has; fails on any misrouted or lost reply, a daemon crash, or RSS growth
# above 5 MiB after the warm-up. See docs/reliability.md.
.PHONY: soak
soak: $(STAMP)
	tools/soak --clients 8 --seconds 600 --faults all --max-rss-growth 5

# `make fuzz [FUZZ_SECONDS=60]`: installs atheris (a prebuilt wheel; without it the targets
# fall back to a blind random mutator) and runs each tools/fuzz target for FUZZ_SECONDS,
# printing executions per target; crash inputs land in $TMPDIR/verld-fuzz. See docs/security.md.
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz: $(STAMP)
	$(BIN)/python -m pip install -q atheris || echo 'atheris did not install: using the random mutator'
	$(BIN)/python tools/fuzz/run $(FUZZ_SECONDS)
