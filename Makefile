# The Data Scientist Portal. `make up` starts the cluster in a box, `make test` runs every test.
VENV ?= /opt/dsportal/venv
PY := $(VENV)/bin/python
BOX := $(PY) -m deploy.local.box
PYTEST_ARGS ?=
# mypy's cache, kept per machine like the builds (as root: a fresh clone, as CI makes, checks in 2 s instead of
# 1 to 3 minutes; mypy checks each cached module's hash, so a changed file is checked again). Others: the checkout's.
MYPY_CACHE_DIR ?= $(if $(filter 0,$(shell id -u)),/var/cache/dsportal/mypy,.mypy_cache)
export MYPY_CACHE_DIR
# The Slurm the box runs: Debian 12's 22.05, or a release built from Debian's source archive (`make up SLURM=24.11`,
# or 26.05), whose box has a state dir, cluster name and settings of its own: deploy/slurm/box-<release>.yaml.
SLURM ?= 22.05
ifneq ($(SLURM),22.05)
export DSPORTAL_CONFIG ?= $(CURDIR)/deploy/slurm/box-$(SLURM).yaml
endif

.PHONY: install up down status up-k8s down-k8s builds test check coverage unit lint fresh-test bench bench-chart \
        kube-build images slurm-build \
        screenshots

install:
	@deploy/local/install.sh

up: install slurm-build
	@$(BOX) up
	@$(PY) -m portal.jobs.demo_data

down:
	@$(BOX) down

status:
	@$(BOX) status

# The Kubernetes box (deploy/kubernetes/kubebox.py): etcd, the control plane and 2 nodes (containerd + kubelet each,
# 4 fake GPUs each) in network namespaces, the images imported from podman, and the hub in a pod. The hub logs users
# in against the machine's one demo directory (deploy/local/parts/directory.py), which every box shares: started by
# whichever box needs it first, stopped by `down` of the last. docs/kubernetes.md says what it is.
KUBEBOX := $(PY) -m deploy.kubernetes.kubebox
up-k8s: install
	@deploy/kubernetes/build-kubernetes.sh
	@docker/build.sh
	@$(KUBEBOX) up --hub

down-k8s:
	@$(KUBEBOX) down

# What the suites need built (the images, kube-apiserver), built before any suite starts so that no suite shares
# the 2 cores with a build: seconds once cached, about 12 minutes on a new machine (deploy/build-for-tests.sh).
builds:
	@deploy/build-for-tests.sh

# Every test, in three steps that all run even when one fails (docs/testing.md), after `make install` and
# `make builds` side by side (deploy/build-for-tests.sh --install), with `make lint`'s checks beside the builds once the
# venv is ready (their output in tests/artifacts/build-checks.log, printed here; a failure fails the run at its end):
# 1. a snapshot of the users' own boxes (a `make up` or `make up-k8s` beside the tests: tests/users_boxes.py);
# 2. one pytest session on three workers (pytest-xdist, one work unit per worker: tests/conftest.py's work_unit_of):
#    the suites against the test boxes, the Slurm box's side and the Kubernetes box's side by side from the start,
#    and on the third worker, niced, what needs no box: the unit tests (each module whole: its module-scoped
#    fixtures made once), then the training programs' tests and the other Slurm releases. The Slurm side is the
#    longest; run first and alone, the unit tests added about 2 minutes before it. SUITE_WORKERS=1 runs them one
#    after the other;
# 3. the check that every file, record, process and mail of the users' boxes is as the suites found them.
UNIT_WORKERS ?= 3
SUITE_WORKERS ?= 3
SUITES := tests/integration tests/browser tests/notebooks tests/kubernetes tests/images tests/slurm_versions tests/programs
test:
	@DSPORTAL_VENV=$(VENV) deploy/build-for-tests.sh --install
	@rc=0; cat tests/artifacts/build-checks.log; [ "$$(cat tests/artifacts/build-checks.status)" = 0 ] || rc=1; \
	set -x; $(PY) -m tests.users_boxes snapshot || rc=$$?; \
	$(PY) -m pytest -n $(SUITE_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests/unit $(SUITES) || rc=$$?; \
	$(PY) -m pytest $(PYTEST_ARGS) tests/users || rc=$$?; exit $$rc

unit: install
	$(PY) -m pytest -n $(UNIT_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests/unit

# The fast inner loop between full runs (docs/testing.md): style, types, then the unit tests with the contract suites
# (every scheduler: tests/unit/portal/scheduler/test_contract*.py; every training program: PROGRAM_CONTRACT) on
# three workers, each program's part of the contract whole on one (tests/conftest.py, work_unit_of); no box, no build.
# At most 3 minutes on 2 cores. (`make test` runs the program contract with the suites, on their box-free side.)
PROGRAM_CONTRACT := tests/programs/test_program_contract.py
check: install
	@rc=0; set -x; $(PY) -m ruff check . || rc=$$?; $(PY) -m mypy || rc=$$?; \
	$(PY) -m pytest -n $(UNIT_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests/unit $(PROGRAM_CONTRACT) || rc=$$?; \
	exit $$rc

# The product's line coverage (tests/line_coverage.py): `make test`'s unit tests and suites with every Python process
# of the venv measuring itself, combined into one figure by package (docs/testing.md, "Coverage"). As long as
# `make test`, plus coverage.py's own cost.
coverage:
	@DSPORTAL_VENV=$(VENV) deploy/build-for-tests.sh --install
	@rc=0; trap '$(PY) -m tests.line_coverage off' EXIT INT TERM; set -x; $(PY) -m tests.line_coverage on; \
	$(PY) -m pytest -n $(UNIT_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests/unit || rc=$$?; \
	$(PY) -m pytest -n $(SUITE_WORKERS) --dist loadgroup $(PYTEST_ARGS) $(SUITES) || rc=$$?; \
	$(PY) -m tests.line_coverage off; $(PY) -m tests.line_coverage report || rc=$$?; exit $$rc

# Style (ruff) everywhere; types (mypy, pyproject.toml's [tool.mypy]) over the scheduler layer and the dashboard,
# where each scheduler's person is a type of its own (portal.scheduler.Scheduler[P]).
lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy

# The suite as a newcomer runs it, before an issue is called done: a fresh clone of HEAD, make up, make test,
# make down, each timed (tests/fresh-run.sh). FRESH_ARGS=--no-cache removes every cache first (the venv, the
# images, the Kubernetes build), as on a machine that never ran it; --skip-up runs make test alone, as CI does.
FRESH_ARGS ?=
fresh-test:
	@tests/fresh-run.sh $(FRESH_ARGS)

# Benchmarks print tables of medians and ratios measured side by side in one run (not timed tests). The hub-side
# ones run against the box that `make up` started (as root); docs/benchmarks.md has the results. Each saves its
# figures to docs/results/<name>.json (bench/results.py), and docs/benchmarks.png is drawn from those files only.
# A benchmark whose target is not met exits 1: every table is still printed, the chart is still drawn from what
# was saved, and `make bench` then fails naming them.
# PIPELINE_BENCH_ARGS: the pipeline's tables per core count, its ablation and thread pools are all in
# docs/benchmarks.md, so make bench runs them (about 12 of its 40 minutes on 2 cores).
BENCHES := pipeline parity scaling spawn dashboard dashboard_kubernetes liveness nodes sweep kube programs
PIPELINE_BENCH_ARGS ?= --cores 1,2 --ablation --threads-ablation
CHART := $(PY) docs/benchmarks_chart.py
bench: install
	@failed=""; for b in $(BENCHES); do echo "== bench.$$b"; \
	case $$b in pipeline) args="$(PIPELINE_BENCH_ARGS)";; *) args="";; esac; \
	$(PY) -m bench.$$b $$args || failed="$$failed $$b"; done; \
	echo "== docs/benchmarks.png"; $(CHART) || failed="$$failed chart"; \
	$(PY) -m bench.report; \
	if [ -n "$$failed" ]; then echo "make bench: not met or failed:$$failed"; exit 1; fi

# docs/benchmarks.png from the saved results alone (a panel whose result is missing says which command makes it).
bench-chart: install
	@$(CHART)

# The user guide's screenshots (docs/user-guide.md): the browser tests that take them run against a private test
# box (about 10 min on 2 cores, most of it the dashboard test's training job), then the chosen ones are copied from tests/artifacts
# (ignored by git) to docs/screenshots/. Copied even when a test fails after taking it (then worth a look), and
# make still fails; a screenshot that was not taken again is not copied.
# The Kubernetes ones (docs/kubernetes.md), the finished sweep's and the experiments comparison's (user-guide.md)
# come from the journeys' browser tests on both test boxes (the Kubernetes box's first start costs about 5 min more).
SCREENSHOTS := a11y-jobs-1280-light a11y-job-1280-light a11y-jobs-375-dark dashboard-1-submit-form \
               dashboard-4-tensorboard dashboard-5-job-completed journey-kubernetes-job-completed \
               journey-kubernetes-submit journey-slurm-sweep-finished-1280-light journey-slurm-compare-1280-light \
               journey-kubernetes-compare-375-dark
screenshots: install builds
	@for s in $(SCREENSHOTS); do rm -f tests/artifacts/$$s.png; done; \
	status=0; $(PY) -m pytest $(PYTEST_ARGS) tests/browser/test_accessibility.py \
	    tests/browser/test_dashboard_in_browser.py || status=$$?; \
	$(PY) -m pytest $(PYTEST_ARGS) tests/kubernetes/test_dashboard_journeys.py \
	    -k "chromium or finished_sweeps or compares" || status=$$?; \
	mkdir -p docs/screenshots; for s in $(SCREENSHOTS); do \
	    cp -v tests/artifacts/$$s.png docs/screenshots/ || status=1; done; exit $$status

# The hub and training images, built with podman from a local Debian base (CPU defaults; docker/build.sh --help).
images:
	@docker/build.sh

# The Kubernetes v1.20.2 servers (apiserver, controller-manager, scheduler, kubelet, proxy) for the Kubernetes box,
# built from Debian's source package once per machine (about 9.5 min on 2 cores), with containerd, runc and the CNI
# plugins from apt; then a no-op.
kube-build:
	@deploy/kubernetes/build-kubernetes.sh

# A Slurm release other than Debian 12's 22.05 (SLURM=24.11 or 26.05), built from Debian's source archive into
# /opt/dsportal/slurm/<release> once per machine (about 3.5 min on 2 cores each); then a no-op. 22.05: nothing to build.
slurm-build:
	@deploy/slurm/build-slurm.sh $(SLURM)
