# verld: `make run` starts the daemon on the simulated device; `make test` runs the suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast test-all test-pythons test-compiled compiled pure lint check clean

# The `fast` extra's cobs builds a C extension where no wheel fits: without a compiler
# verld runs on its own COBS code (the same bytes), so a failed build stops nothing.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,mqtt]'
	$(BIN)/python -m pip install -q -e '.[fast]' \
		|| echo 'cobs (the fast extra) did not install: verld uses its own COBS code'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/verld --config configs/demo_config.yaml

# Two workers (pytest-xdist), each taking whole test files (--dist loadfile: a file's
# module fixtures and its daemons stay in one process): about half the serial time on
# two cores. `$(BIN)/python -m pytest -q` runs it serially.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The core only (`-m "not slow"`: no daemons, simulators, broker or builds; the slow
# modules are SLOW_MODULES in tests/conftest.py), serially: under a minute.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The suite on Python 3.11, 3.12 and 3.13 and the MQTT tests on paho-mqtt 1.6.1, each in
# its own virtualenv under .nox/ (noxfile.py says how it finds pyenv's interpreters);
# test-pythons: what `make test` leaves out of that (CI runs both).
test-all: $(STAMP)
	$(BIN)/nox

test-pythons: $(STAMP)
	$(BIN)/nox -s tests-3.12 tests-3.13 mqtt_paho16

# The optional compiled build (setup.py: mypyc compiles the hot path): `make compiled`
# builds its extension modules in place, so the venv's verld runs them (`verld --version`
# says which build runs); `make pure` removes them. test-compiled: the whole suite on it.
compiled: $(STAMP)
	VERLD_MYPYC=1 $(BIN)/python setup.py -q build_ext --inplace

pure:
	find verld -name '*.so' -delete
	rm -rf build

test-compiled: $(STAMP)
	$(BIN)/nox -s compiled

lint: $(STAMP)
	$(BIN)/ruff check verld tests tools noxfile.py setup.py
	$(BIN)/ruff format --check verld tests tools noxfile.py setup.py
	$(BIN)/mypy

check: lint test

clean:
	find verld -name '*.so' -delete
	rm -rf $(VENV) .nox build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the package and its console scripts
# (pip, for $(PYTHON)), then the systemd units, udev rule, sysusers and tmpfiles
# files under $(PREFIX)/lib (systemd and udev read /usr/local/lib as well as /usr/lib;
# the units' ExecStart= is rewritten to $(PREFIX)/bin/verld), docs and example
# config under $(PREFIX)/share/doc/verld, and /etc/verld/verld.yaml unless one
# exists. DESTDIR stages the whole tree for a package. See docs/deploy.md.
# The man pages (man/, made by `make man`) go to $(PREFIX)/share/man/man1, man5 and man8,
# uncompressed (man reads them so; Debian's dh_installman compresses them itself).
# The Modbus TCP sockets (verld-modbus.socket, verld-modbus@.socket), the network ports'
# socket (verld-network@.socket: verld-network@PORT.socket passes 127.0.0.1:PORT as fd
# net-PORT) and the MQTT bridge's verld-mqtt.service (ExecStart= rewritten to
# $(PREFIX)/bin/verld-mqtt) are installed with the units; nothing is enabled. The bridge's
# config goes to /etc/verld/mqtt.yaml unless one exists, mode 0640: its group must be
# verld-mqtt (made by systemd-sysusers), so an install without DESTDIR hands it over when
# that group exists already; otherwise chgrp it after systemd-sysusers (docs/deploy.md,
# "The MQTT bridge under systemd").
# systemd/verld.service.d/ports.conf (what virtual serial ports need: chown back in the
# system-call filter, /run/verld/ports) is NOT installed as a drop-in: one under
# $(PREFIX)/lib/systemd/system/verld.service.d/ would apply to every installation,
# ports or not. It goes to $(PREFIX)/share/doc/verld/verld.service.d/ports.conf as an
# example; an admin who configures `ports:` copies it to
# /etc/systemd/system/verld.service.d/ (docs/deploy.md, "Virtual serial ports under systemd").
# pip runs with --ignore-installed: it never touches $(PYTHON)'s own environment
# (a checkout's editable install stays) and puts missing dependencies under PREFIX
# too; PIPFLAGS=--no-deps leaves them to the distribution. That is the default for
# PREFIX=/usr, the distribution's own tree: its packages provide pyserial, PyYAML,
# structlog and uvloop (Debian: python3-serial, ...), and without --no-deps pip would put
# second copies of them, and their own scripts (pyserial-miniterm, pyserial-ports), under
# /usr. PIPFLAGS= (empty) brings them back.
# verlctl's shell completion (completion/) goes where bash-completion, zsh and fish look
# for it: $(PREFIX)/share/bash-completion/completions/verlctl, $(ZSH_COMPLETIONS)/_verlctl
# and $(PREFIX)/share/fish/vendor_completions.d/verlctl.fish. ZSH_COMPLETIONS is Debian's
# vendor-completions; other distributions, and Debian's zsh for /usr/local, read
# $(PREFIX)/share/zsh/site-functions (pass ZSH_COMPLETIONS=... for those).
PREFIX  ?= /usr/local
DESTDIR ?=
PIPFLAGS ?= $(if $(filter /usr /usr/,$(PREFIX)),--no-deps)
SYSTEMD_LIB := $(DESTDIR)$(PREFIX)/lib
ZSH_COMPLETIONS ?= $(PREFIX)/share/zsh/vendor-completions

.PHONY: install
install:
	$(PYTHON) -m pip install -q --no-warn-script-location --ignore-installed $(PIPFLAGS) \
		--root '$(DESTDIR)/' --prefix '$(PREFIX)' .
	install -d $(SYSTEMD_LIB)/systemd/system $(SYSTEMD_LIB)/udev/rules.d \
		$(SYSTEMD_LIB)/sysusers.d $(SYSTEMD_LIB)/tmpfiles.d \
		$(DESTDIR)$(PREFIX)/share/doc/verld/verld.service.d $(DESTDIR)/etc/verld
	for unit in verld.service verld.socket verld@.service verld-modbus.socket \
			verld-modbus@.socket verld-network@.socket verld-mqtt.service; do \
		sed 's|/usr/bin/verld|$(PREFIX)/bin/verld|' systemd/$$unit \
			> $(SYSTEMD_LIB)/systemd/system/$$unit || exit 1; \
		chmod 0644 $(SYSTEMD_LIB)/systemd/system/$$unit; \
	done
	install -m 0644 systemd/70-verld.rules $(SYSTEMD_LIB)/udev/rules.d/70-verld.rules
	install -m 0644 systemd/verld.sysusers $(SYSTEMD_LIB)/sysusers.d/verld.conf
	install -m 0644 systemd/verld.tmpfiles $(SYSTEMD_LIB)/tmpfiles.d/verld.conf
	install -m 0644 README.md docs/deploy.md docs/network.md configs/verld.yaml \
		configs/mqtt.yaml $(DESTDIR)$(PREFIX)/share/doc/verld/
	install -m 0644 systemd/verld.service.d/ports.conf \
		$(DESTDIR)$(PREFIX)/share/doc/verld/verld.service.d/ports.conf
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
		$(DESTDIR)$(PREFIX)/share/man/man8
	install -m 0644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 man/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -D -m 0644 completion/verlctl.bash \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/verlctl
	install -D -m 0644 completion/_verlctl $(DESTDIR)$(ZSH_COMPLETIONS)/_verlctl
	install -D -m 0644 completion/verlctl.fish \
		$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/verlctl.fish
	test -e $(DESTDIR)/etc/verld/verld.yaml || \
		install -m 0644 configs/verld.yaml $(DESTDIR)/etc/verld/verld.yaml
	test -e $(DESTDIR)/etc/verld/mqtt.yaml || { \
		install -m 0640 configs/mqtt.yaml $(DESTDIR)/etc/verld/mqtt.yaml && \
		if [ -z '$(DESTDIR)' ] && getent group verld-mqtt >/dev/null; then \
			chgrp verld-mqtt /etc/verld/mqtt.yaml; fi; }
	@test -n '$(DESTDIR)' || echo 'verld installed; now: systemd-sysusers; systemd-tmpfiles --create;' \
		'udevadm control --reload; systemctl daemon-reload; systemctl enable --now verld.socket;' \
		'for the MQTT bridge: chgrp verld-mqtt /etc/verld/mqtt.yaml; systemctl enable --now verld-mqtt.service'

# `make bench`: tools/bench's full run (the api, ports, modbus and network families in interleaved
# rounds, 12 to 17 minutes); refreshes docs/bench.json, docs/bench.png and the figures in docs/benchmarks.md.
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

# `make man`: regenerates man/ (verld.8, verlctl.1, verld-sim.1, verld-mqtt.8, verld.yaml.5)
# from the programs' argparse parsers, the config schema and docs/config.md (tools/manpages);
# commit the result. `tools/manpages --check` (run by tests/test_manpages.py) names stale pages.
.PHONY: man
man: $(STAMP)
	$(BIN)/python tools/manpages

# `make deb`: the Debian package, built with Debian 12's own tools (debhelper, dh-python's
# pybuild; .ci/run lists the apt packages) from a copy of the checkout's files (tracked and
# new, not ignored) in $(DEB_DIR)/verld, so the work tree stays clean. dpkg-buildpackage
# writes the .deb beside that copy, in $(DEB_DIR); it is copied to dist/ and checked with
# lintian (debian/verld.lintian-overrides explains each kept tag). PATH is Debian's own:
# the build runs /usr/bin/python3 with Debian's packages, not a venv's or pyenv's python.
# Then: apt install ./dist/verld_$(DEB_VERSION)_all.deb (docs/deploy.md).
DEB_DIR ?= build/deb
DEB_VERSION = $(shell dpkg-parsechangelog -l debian/changelog -S Version)
DEB_PATH := /usr/sbin:/usr/bin:/sbin:/bin

.PHONY: deb
deb:
	rm -rf $(DEB_DIR)
	mkdir -p $(DEB_DIR)/verld dist
	git ls-files -z --cached --others --exclude-standard \
		| tar -c --null --ignore-failed-read -T - -f - | tar -x -C $(DEB_DIR)/verld
	cd $(DEB_DIR)/verld && env PATH=$(DEB_PATH) dpkg-buildpackage -us -uc -b
	cp $(DEB_DIR)/verld_$(DEB_VERSION)_all.deb dist/
	env PATH=$(DEB_PATH) lintian --fail-on error,warning dist/verld_$(DEB_VERSION)_all.deb
