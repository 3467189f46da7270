# The Data Scientist Portal. `make up` starts the cluster in a box, `make test` runs every test.
VENV ?= /opt/dsportal/venv
PY := $(VENV)/bin/python
BOX := $(PY) deploy/local/box.py
PYTEST_ARGS ?=

.PHONY: install up down status test unit lint bench kube-build images

install:
	@deploy/local/install.sh

up: install
	@$(BOX) up
	@$(PY) -m portal.jobs.demo_data

down:
	@$(BOX) down

status:
	@$(BOX) status

# Every test: unit tests, then integration and browser tests against a private box (own state dir and ports).
test: install
	$(PY) -m pytest $(PYTEST_ARGS) tests

unit: install
	$(PY) -m pytest $(PYTEST_ARGS) tests/unit

lint: install
	$(PY) -m ruff check .

# Benchmarks print tables of medians and ratios measured side by side in one run (not timed tests). The hub-side
# ones run against the box that `make up` started (as root); docs/benchmarks.md has the results.
bench: install
	$(PY) -m bench.pipeline
	$(PY) -m bench.scaling
	$(PY) -m bench.spawn --runs 10
	$(PY) -m bench.dashboard
	$(PY) -m bench.liveness
	$(PY) -m bench.nodes

# The hub and training images, built with podman from a local Debian base (CPU defaults; docker/build.sh --help).
images:
	@docker/build.sh

# kube-apiserver and kube-controller-manager v1.20.2 for deploy/kubernetes/kubebox.py: built from Debian's source
# package once per machine (about 6.5 min on 2 cores), then a no-op.
kube-build:
	@deploy/kubernetes/build-apiserver.sh
