# Two set-up commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
APT_PACKAGES := frr bird2 gobgpd mosquitto mosquitto-clients prometheus iproute2 procps nftables
STAMP := $(VENV)/.installed
LINT_PATHS := bgpd k8s_watcher kbgpd_lab tests $(wildcard bench)

.PHONY: test check lint unit component e2e demo apt venv clean

# pytest-xdist workers for the test targets. The component and e2e tiers mostly wait on
# routers, BGP timers and processes, so three workers on CI's two CPUs overlap the waiting while leaving CPU for the
# timing-sensitive lab tests;
# every test has its own namespaces, ports (or a random 127/8 address) and directories.
# worksteal evens out the long lab tests. `make test XDIST=` runs in one process.
XDIST ?= -n 3 --dist worksteal
# A short base directory for the tests' files, one per run: the labs keep unix sockets in
# it (at most 107 bytes of path), and xdist adds a level (popen-gwN) under pytest's default
# /tmp/pytest-of-USER/pytest-N, which took a lab's control socket to 111 bytes.
BASETEMP = --basetemp="$$(mktemp -d /tmp/kt.XXXXXX)"

# The product (bgpd, k8s_watcher) and, beside it, its test tools (kbgpd_lab: the lab, the
# API simulator and the kit; a distribution of its own, never in the product's wheel).
$(STAMP): pyproject.toml kbgpd_lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . --group test --group lint
	$(PY) -m pip install -q --no-deps -e ./kbgpd_lab
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the component and e2e tiers need (real routers, mosquitto, promtool;
# nftables: the lab router's connection pinning, only ever run inside its namespace; the
# package leaves nftables.service disabled, so the host's ruleset is not touched).
apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	  for s in frr mosquitto prometheus bird; do $$SUDO systemctl disable --now $$s >/dev/null 2>&1 || true; done; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/lint-imports

# The fast local loop: lint and the unit tier.
check: lint
	$(BIN)/pytest -q tests/unit

unit: $(STAMP)
	$(BIN)/pytest -q $(XDIST) $(BASETEMP) tests/unit

component: $(STAMP) apt
	$(BIN)/pytest -q $(XDIST) $(BASETEMP) tests/component

e2e: $(STAMP) apt
	$(BIN)/pytest -q $(XDIST) $(BASETEMP) -m e2e tests/e2e

test: apt $(STAMP) lint
	$(BIN)/pytest -q $(XDIST) $(BASETEMP) tests

demo: apt $(STAMP)
	$(BIN)/kube-bgpd-lab demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
