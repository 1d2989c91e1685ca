# Set-up and everyday commands. Each target creates what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
PEERS := .venv-peers
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test bench peers clean

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $@

$(PEERS)/.ready: bench/install_peers.sh bench/requirements-peers.txt
	bash bench/install_peers.sh $(PEERS)
	touch $@

peers: $(PEERS)/.ready

demo: $(VENV)/.ready
	$(PY) examples/demo.py

test: $(VENV)/.ready $(PEERS)/.ready
	SHARDSTREAM_PEER_PYTHON=$(abspath $(PEERS))/bin/python $(PY) -m pytest -n 2 -q

bench: $(VENV)/.ready $(PEERS)/.ready
	$(PY) bench/run.py --peer-python $(PEERS)/bin/python --out docs/benchmarks.md

clean:
	rm -rf $(VENV) $(PEERS) build src/*.egg-info .pytest_cache
