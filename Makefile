# Set-up and everyday commands. Each target creates what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
DEMO := .venv-demo
PEERS := .venv-peers
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
PINS := tests/constraints.txt

.PHONY: demo test bench peers clean

# The test and benchmark environment: every extra, torch pinned. torch goes in first, on its own:
# resolving it together with the rest lets pip backtrack past a CPU build it has on local disk.
$(VENV)/.ready: pyproject.toml $(PINS)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c $(PINS) torch
	$(PIP) install -q -c $(PINS) -e '.[test]'
	touch $@

# The demo's environment: shardstream with s3fs and a loopback S3 server (moto), nothing else.
$(DEMO)/.ready: pyproject.toml
	$(PYTHON) -m venv $(DEMO)
	$(DEMO)/bin/pip install -q --upgrade pip
	$(DEMO)/bin/pip install -q -e '.[demo]'
	touch $@

$(PEERS)/.ready: bench/install_peers.sh bench/requirements-peers.txt
	bash bench/install_peers.sh $(PEERS)
	touch $@

peers: $(PEERS)/.ready

demo: $(DEMO)/.ready
	$(DEMO)/bin/python examples/demo.py

test: $(VENV)/.ready $(PEERS)/.ready
	SHARDSTREAM_PEER_PYTHON=$(abspath $(PEERS))/bin/python $(PY) -m pytest -n 2 -q

bench: $(VENV)/.ready $(PEERS)/.ready
	$(PY) bench/run.py --peer-python $(PEERS)/bin/python --out docs/benchmarks.md

clean:
	rm -rf $(VENV) $(DEMO) $(PEERS) build src/*.egg-info .pytest_cache
