# tcbench — every target sets up what it needs from a fresh clone (idempotent).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tcbench-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# test runs share compile caches (Inductor, XLA) across tests and across runs
TEST_HOME ?= $(CURDIR)/.tcbench-test-home
PYTEST_ARGS ?= --durations=25
# TEST_WORKERS=2: two pytest workers (xdist, a file per worker, each its own store): 42 min then, against ~55 for one
# (one process now: 1146 tests in about 50 min, measured 2026-11-26: every compare round now starts a launcher),
# but a second worker's jobs disturb the timing tests beside them (an A/A comparison once came out "slower"), so the
# default stays one process
TEST_WORKERS ?= 1
XDIST := $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

.PHONY: setup dist browser postgres demo test test-fast lab app bench gallery docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q --upgrade pip
	# the distribution was named tcbench before it became tcbench-workbench: an old venv loses the old name first
	$(PY) -m pip uninstall --disable-pip-version-check -q -y tcbench 2>/dev/null || true
	$(PY) -m pip install --disable-pip-version-check -q -e ".[lab,xla,test,docs]" -c constraints.txt
	touch $(STAMP)

setup: $(STAMP)

# Debian's Chromium for the browser tests (never `playwright install`: it downloads a browser)
browser:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

# Debian's PostgreSQL for the shared-study tests (each session starts a server of its own as the postgres user)
postgres:
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)

# tiny GPT-2 learns within a few steps (its loss falls from ~8.3): the loss curves and the parity check show something.
# Three backends make a round of ≈ 20 s warm: the default 60 s budget gave 2 rounds (t(0.975, 1) = 12.7: intervals
# 3× wide either way); 150 s gives 4 or more
DEMO_ARGS := --model gpt2 --size tiny --backends eager,inductor,xla --batch-size 8 --seq-len 64 --steps 40 \
	--warmup 5 --lr 2e-3 --threads 1 --budget-s 150

# the wheel (dist/tcbench_workbench-*.whl): the package, the panel and the shipped data; its README is the long
# description. Install it with `pip install dist/tcbench_workbench-*.whl` (extras: '...whl[lab]').
dist: setup
	rm -rf dist
	$(PY) -m pip wheel --disable-pip-version-check --no-deps -q -w dist .
	@ls dist/*.whl

demo: setup
	$(PY) -m tcbench.cli compare $(DEMO_ARGS) --report demo-report.html

test: setup browser postgres
	TCBENCH_HOME=$(TEST_HOME) $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS)

# unit tests only (no real training jobs, no browser)
test-fast: setup
	TCBENCH_HOME=$(TEST_HOME) $(PY) -m pytest -q -p no:cacheprovider -m "not integration and not browser and not notebook"

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: setup
	$(VENV)/bin/jupyter lab --ip=127.0.0.1 $(ROOT_FLAG) notebooks/00_workbench.ipynb

# Voilà on 127.0.0.1 behind a fresh token (any local user of a shared host could otherwise drive the panel)
APP_PORT ?= 8866
app: setup
	@TOKEN=$$($(PY) -c "import secrets; print(secrets.token_hex(24))"); \
	echo "    To open the workbench, copy and paste this URL into a browser:"; \
	echo "        http://127.0.0.1:$(APP_PORT)/?token=$$TOKEN"; \
	exec $(VENV)/bin/voila --Voila.ip=127.0.0.1 --port=$(APP_PORT) --no-browser --token=$$TOKEN notebooks/00_workbench.ipynb

# every notebook executed, one self-contained HTML copy each (tables, plots) in gallery/ — to show and hand out
gallery: setup
	$(PY) notebooks/gallery.py --out gallery

# the documentation site (Sphinx + MyST, offline, warnings are errors) into docs/_build/html; the gallery shows the
# notebooks the tests executed (build/notebooks/) and executes nothing
# (the `docs` extra, which `make setup` installs, holds Sphinx and its extensions)
docs: setup
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

bench: setup
	@test -x /usr/bin/time || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null)
	$(PY) benchmarks/trust.py
	$(PY) benchmarks/run_benchmarks.py

clean:
	rm -rf $(VENV) $(TEST_HOME) .pytest_cache demo-report.html gallery docs/_build docs/gallery
