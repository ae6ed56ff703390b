# The two set-up-and-go commands. Both create .venv on first use (CPU torch 2.13.0, no GPU).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test clean

$(BIN)/eagle3-synth: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# pip's own notices (setuptools' editable-install note, index locations) go to a log, shown on failure
	$(BIN)/pip install --quiet --upgrade pip >$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/pip install --quiet torch==2.13.0 >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	$(BIN)/pip install --quiet -e '.[test]' >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	touch $@

setup: $(BIN)/eagle3-synth

demo: setup
	$(BIN)/python scripts/demo.py

test: setup
	$(BIN)/python -m pytest -q -rs

clean:
	rm -rf $(VENV) demo_out
