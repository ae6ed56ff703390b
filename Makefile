# The two set-up-and-go commands. Both create .venv on first use (CPU torch 2.13.0, no GPU).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test docs clean speculators-venv specforge-venv sglang-venv train-demo specforge-train-demo

# Each long step says what it does and about how long it takes (measured with a warm pip cache on 2
# cores; a cold cache adds the downloads); pip's own output goes to install.log, shown on failure.
$(BIN)/eagle3-synth: pyproject.toml
	@echo "setup: creating $(VENV) (pip's output goes to $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@# pip's own notices (setuptools' editable-install note, index locations) go to a log, shown on failure
	@echo "setup: upgrading pip, ~10 s"
	@$(BIN)/pip install --quiet --upgrade pip >$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@echo "setup: installing torch 2.13.0 (CPU) into $(VENV), ~1 min"
	@$(BIN)/pip install --quiet torch==2.13.0 >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@echo "setup: installing eagle3-synth (editable) with transformers, datasets and the test tools, ~2 min"
	@$(BIN)/pip install --quiet -e '.[test]' >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@touch $@
	@echo "setup: $(VENV) ready ($$($(BIN)/pip list --format=freeze | grep -iE '^(torch|transformers|datasets)=' | paste -sd ' '))"

setup: $(BIN)/eagle3-synth

demo: setup
	$(BIN)/python -m examples.demo

test: setup
	$(BIN)/python -m pytest -q -rs

# The docs site (mkdocs.yml, docs/), built as CI builds it: any warning (a broken link or anchor)
# fails. The reference pages come from `python docs/generate.py` (tests/test_docs.py checks them).
# `.venv/bin/mkdocs serve` shows the site while writing.
docs: setup
	@echo "docs: installing mkdocs and mkdocs-material into $(VENV), ~20 s"
	@$(BIN)/pip install --quiet -e '.[docs]' >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# speculators 0.9.0 in a virtual environment of its own (it pins older datasets/transformers than
# ours): CPU torch first, then speculators without its dependencies, then those dependencies from
# examples/speculators-requirements.txt (read from its METADATA, torch pinned, no torchvision/torchaudio).
# Fails if that last step changed torch or added nvidia-* packages. About 1-2 min with a warm pip cache.
SPEC_VENV := .venv-speculators
SPEC_BIN := $(SPEC_VENV)/bin
SPEC_LOG := $(SPEC_VENV)/install.log
# Touched only once every step and check passed (pip writes bin/speculators before the torch check).
SPEC_DONE := $(SPEC_VENV)/installed

$(SPEC_DONE): examples/speculators-requirements.txt
	@echo "$(SPEC_VENV): creating it afresh (pip's output goes to $(SPEC_LOG))"
	@rm -rf $(SPEC_VENV)
	@$(PYTHON) -m venv $(SPEC_VENV)
	@$(SPEC_BIN)/pip install --quiet --upgrade pip >$(SPEC_LOG) 2>&1 || (cat $(SPEC_LOG); exit 1)
	@echo "$(SPEC_VENV): installing torch 2.13.0 (CPU), ~1 min"
	@$(SPEC_BIN)/pip install --quiet torch==2.13.0 >>$(SPEC_LOG) 2>&1 || (cat $(SPEC_LOG); exit 1)
	@$(SPEC_BIN)/pip list --format=freeze | grep -iE '^(torch|nvidia-)' > $(SPEC_VENV)/torch-before.txt
	@echo "$(SPEC_VENV): installing speculators 0.9.0, then its requirements (examples/speculators-requirements.txt), ~30 s"
	@$(SPEC_BIN)/pip install --quiet --no-deps speculators==0.9.0 hs-connectors==0.9.0 >>$(SPEC_LOG) 2>&1 || (cat $(SPEC_LOG); exit 1)
	@$(SPEC_BIN)/pip install --quiet -r examples/speculators-requirements.txt >>$(SPEC_LOG) 2>&1 || (cat $(SPEC_LOG); exit 1)
	$(SPEC_BIN)/pip list --format=freeze | grep -iE '^(torch|nvidia-)' | diff $(SPEC_VENV)/torch-before.txt - \
		|| (echo "$(SPEC_VENV): speculators' dependencies changed torch (lines above); not using it"; exit 1)
	@echo "$(SPEC_VENV): $$(grep -i '^torch=' $(SPEC_VENV)/torch-before.txt), nvidia-* packages: $$(grep -ic '^nvidia-' $(SPEC_VENV)/torch-before.txt)"
	touch $@

speculators-venv: $(SPEC_DONE)

# SpecForge 0.2.0 in a virtual environment of its own, for the tests that run its own code on our
# files: its offline reader (tests/train/test_hidden_states.py) and its offline EAGLE-3 training loop
# (`make specforge-train-demo`, tests/examples/test_specforge_demo.py). Its METADATA pins
# torch==2.11.0, transformers==5.8.1 and sglang==0.5.14 (CUDA builds), so: CPU torch, then SpecForge
# with --no-deps, then only what the offline training path imports (examples/specforge-requirements.txt:
# transformers 5.8.1 as pinned, accelerate, datasets, pydantic, pyyaml, safetensors; no sglang, no
# triton). Fails if that changed torch or brought in nvidia-*/sglang/triton packages. One venv for
# both (not a second one for training): one torch install, one SpecForge. About 1 min, pip cache warm.
SF_VENV := .venv-specforge
SF_BIN := $(SF_VENV)/bin
SF_LOG := $(SF_VENV)/install.log
SF_DONE := $(SF_VENV)/installed

$(SF_DONE): examples/specforge-requirements.txt
	@echo "$(SF_VENV): creating it afresh (pip's output goes to $(SF_LOG))"
	@rm -rf $(SF_VENV)
	@$(PYTHON) -m venv $(SF_VENV)
	@$(SF_BIN)/pip install --quiet --upgrade pip >$(SF_LOG) 2>&1 || (cat $(SF_LOG); exit 1)
	@echo "$(SF_VENV): installing torch 2.13.0 (CPU), ~1 min"
	@$(SF_BIN)/pip install --quiet torch==2.13.0 >>$(SF_LOG) 2>&1 || (cat $(SF_LOG); exit 1)
	@$(SF_BIN)/pip list --format=freeze | grep -iE '^(torch|nvidia-)' > $(SF_VENV)/torch-before.txt
	@echo "$(SF_VENV): installing SpecForge 0.2.0, then what its offline training imports (examples/specforge-requirements.txt), ~30 s"
	@$(SF_BIN)/pip install --quiet --no-deps specforge==0.2.0 >>$(SF_LOG) 2>&1 || (cat $(SF_LOG); exit 1)
	@# pip warns that SpecForge's own pins (torch 2.11.0, sglang ...) are unmet: that is the point.
	@$(SF_BIN)/pip install --quiet -r examples/specforge-requirements.txt >>$(SF_LOG) 2>&1 || (cat $(SF_LOG); exit 1)
	$(SF_BIN)/pip list --format=freeze | grep -iE '^(torch|nvidia-)' | diff $(SF_VENV)/torch-before.txt - \
		|| (echo "$(SF_VENV): SpecForge's dependencies changed torch (lines above); not using it"; exit 1)
	! $(SF_BIN)/pip list --format=freeze | grep -iE '^(nvidia-|sglang|triton)' \
		|| (echo "$(SF_VENV): the packages above are CUDA/SGLang ones; not using it"; exit 1)
	$(SF_BIN)/python -c "import specforge.runtime.data_plane.offline_reader, specforge.algorithms.eagle3.data, specforge.cli" \
		>>$(SF_LOG) 2>&1 || (cat $(SF_LOG); exit 1)
	@echo "$(SF_VENV): $$($(SF_BIN)/pip list --format=freeze | grep -iE '^(torch|specforge|transformers)=' | tr '\n' ' ')"
	touch $@

specforge-venv: $(SF_DONE)

# The real SGLang 0.5.23 on the CPU backend (bf16; AMX kernels on a Xeon with AMX, x86-64-v3 ones on any
# other AVX2 CPU: examples/sglang_cpu/build_kernels.py), in a virtual environment of its own:
# it pins torch==2.14.1 (PyPI's CUDA build, which runs on a CPU: the local +cpu torch cannot serve,
# sglang imports torchvision and PyPI's is CUDA-linked) and transformers==5.19.0. sglang itself with
# --no-deps, then its requirements less the CUDA-only ones (examples/sglang-requirements.txt says
# which and why), then this package (for --engine sglang, which runs SGLang in our process), then
# SGLang's CPU kernels, built from SGLang's own source (examples/sglang_cpu/build_kernels.py; cached
# outside the checkout, so a machine builds them once: 5-8 min on 2 cores), with the build's SGLang plugin
# (examples/sglang_cpu/cpu_plugin.py: on a CPU without AMX it keeps the CPU attention backend, the one
# with EAGLE speculative decoding, whose extend attention the build computes in ATen). Checked by a one-prompt
# generate on the bundled tiny model. Needs libnuma's headers (apt-get install libnuma-dev).
# About 7 GB; 3-4 min with a warm pip cache and a cached kernel build.
SGL_VENV := .venv-sglang
SGL_BIN := $(SGL_VENV)/bin
SGL_LOG := $(SGL_VENV)/install.log
SGL_DONE := $(SGL_VENV)/installed

$(SGL_DONE): examples/sglang-requirements.txt examples/sglang_cpu/build_kernels.py examples/sglang_cpu/attention_0_5_23.cpp examples/sglang_cpu/cpu_plugin.py pyproject.toml
	@echo "$(SGL_VENV): creating it afresh (pip's output and the kernel build's go to $(SGL_LOG))"
	@rm -rf $(SGL_VENV)
	@$(PYTHON) -m venv $(SGL_VENV)
	@$(SGL_BIN)/pip install --quiet --upgrade pip >$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@echo "$(SGL_VENV): installing sglang 0.5.23 (without its CUDA-only requirements), ~10 s"
	@$(SGL_BIN)/pip install --quiet --no-deps sglang==0.5.23 >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@# pip warns that sglang's CUDA-only requirements are unmet: that is the point.
	@echo "$(SGL_VENV): installing its requirements, torch 2.14.1 among them (examples/sglang-requirements.txt, ~5 GB), ~3-6 min"
	@$(SGL_BIN)/pip install --quiet -r examples/sglang-requirements.txt >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@# This package, with sglang's pins held (torch, transformers, tokenizers as sglang needs them).
	@echo "$(SGL_VENV): installing eagle3-synth (editable) with sglang's pins held, ~20 s"
	@$(SGL_BIN)/pip install --quiet -e . -c examples/sglang-requirements.txt >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@echo "$(SGL_VENV): SGLang's CPU kernels from its source (examples/sglang_cpu/build_kernels.py): 5-8 min on 2 idle cores the first time (20 on a busy machine), seconds once cached"
	@$(SGL_BIN)/python -m examples.sglang_cpu.build_kernels >>$(SGL_LOG) 2>&1 || (tail -50 $(SGL_LOG); exit 1)
	@grep '^sgl_kernel' $(SGL_LOG)
	@echo "$(SGL_VENV): checking it with a one-prompt generate on the tiny model, ~1 min"
	@$(SGL_BIN)/python -m examples.sglang_cpu.check_engine >>$(SGL_LOG) 2>&1 || (tail -50 $(SGL_LOG); exit 1)
	@echo "$(SGL_VENV): $$($(SGL_BIN)/pip list --format=freeze | grep -iE '^(torch|sglang|sglang-router|transformers)=' | tr '\n' ' ')"
	touch $@

sglang-venv: $(SGL_DONE)

# A tiny EAGLE-3 drafter trained on the CPU by speculators' own training loop, then served by the real
# SGLang's EAGLE-3 speculative decoding on the held-out rows (examples/train_demo.py).
train-demo: setup speculators-venv sglang-venv
	$(BIN)/python -m examples.train_demo --speculators-python $(SPEC_BIN)/python --sglang-python $(SGL_BIN)/python

# A tiny EAGLE-3 drafter trained on the CPU by SpecForge's own offline training loop on the 4-layer tiny
# target, exported by SpecForge for SGLang and served by SGLang's EAGLE-3 (examples/specforge_demo.py).
specforge-train-demo: setup specforge-venv sglang-venv
	$(BIN)/python -m examples.specforge_demo --specforge-python $(SF_BIN)/python --sglang-python $(SGL_BIN)/python

clean:
	rm -rf $(VENV) $(SPEC_VENV) $(SF_VENV) $(SGL_VENV) site demo_out train_demo_out specforge_demo_out
