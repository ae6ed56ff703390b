# The two set-up-and-go commands. Both create .venv on first use (CPU torch 2.13.0, no GPU).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-all docs clean speculators-venv specforge-venv sglang-venv train-demo specforge-train-demo

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

# The tests in two tiers (tests/conftest.py says what is slow): `make test` runs the fast one, everything
# but the real SGLang, the trainers' venvs, Slurm, Ray and the demos, where a test over 5 s fails; `make
# test-all` runs it, then the slow one (it needs the three tool venvs below, Slurm and Ray, and skips
# what is missing). PYTEST_ARGS goes to both (`.ci/run` gives --durations=15).
PYTEST = $(BIN)/python -m pytest -q -rs $(PYTEST_ARGS)
test: setup
	$(PYTEST) -m "not slow"

test-all: test
	$(PYTEST) -m slow

# The docs site (mkdocs.yml, docs/), built as CI builds it: any warning (a broken link or anchor)
# fails. The reference pages come from `python docs/generate.py` (tests/test_docs.py checks them).
# `.venv/bin/mkdocs serve` shows the site while writing.
docs: setup
	@echo "docs: installing mkdocs and mkdocs-material into $(VENV), ~20 s"
	@$(BIN)/pip install --quiet -e '.[docs]' >>$(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# ---- The tool venvs ------------------------------------------------------------------------------
# Each is built once per machine outside the clone, in $(CACHE)/venvs/<name>-<key>, the key a hash of
# what makes it (its requirement files, the files its recipe installs, this package's requirements
# for SGLang's, and this section of the Makefile), and the clone's .venv-<name> points at it: a fresh
# clone on a warm machine builds none.
# A venv is built where it stays (pip writes its path into the scripts it installs); `installed` is
# touched only once every step and check passed, and a folder without it is built afresh.
CACHE := $(or $(EAGLE3_SYNTH_CACHE),$(HOME)/.cache/eagle3-synth)
comma := ,
cached_venv = $(CACHE)/venvs/$(1)-$(shell (sed -n '/^# ---- The tool venvs/,/^# ---- End of the tool venvs/p' Makefile; \
	cat $(2); $(3)) | sha256sum | cut -c1-12)
# This package's requirements (what the SGLang venv installs of pyproject.toml), not the whole file.
package_requirements := $(PYTHON) -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'])"

# speculators 0.9.0 and SpecForge 0.2.0, each in a venv of its own (they pin other torch, transformers
# and datasets versions than ours, and than each other), made by one recipe: CPU torch first, then the
# tool without its dependencies, then only the requirements in examples/<tool>-requirements.txt
# (speculators': read from its METADATA, torch pinned, no torchvision/torchaudio; SpecForge's: what
# its offline reader and training loop import, transformers 5.8.1 as it pins, no sglang, no triton).
# Fails if that changed torch or brought in nvidia-*/sglang/triton packages, or the tool's modules do
# not import. About 1-2 min each with a warm pip cache. SpecForge serves tests/train/test_hidden_states.py
# (its offline reader) and `make specforge-train-demo` (its offline EAGLE-3 training loop).
# $(1): the venv, $(2): the tool's packages, $(3): its requirement file, $(4): the modules to import.
define TRAINER_VENV
	@echo "$(1): creating it (pip's output goes to $(1)/install.log)"
	@rm -rf $(1) && $(PYTHON) -m venv $(1)
	@$(1)/bin/pip install --quiet --upgrade pip >$(1)/install.log 2>&1 || (cat $(1)/install.log; exit 1)
	@echo "$(1): installing torch 2.13.0 (CPU), ~1 min"
	@$(1)/bin/pip install --quiet torch==2.13.0 >>$(1)/install.log 2>&1 || (cat $(1)/install.log; exit 1)
	@$(1)/bin/pip list --format=freeze | grep -iE '^(torch|nvidia-)' > $(1)/torch-before.txt
	@echo "$(1): installing $(2), then its requirements ($(3)), ~30 s"
	@# pip warns that the tool's own pins are unmet: that is the point.
	@$(1)/bin/pip install --quiet --no-deps $(2) >>$(1)/install.log 2>&1 || (cat $(1)/install.log; exit 1)
	@$(1)/bin/pip install --quiet -r $(3) >>$(1)/install.log 2>&1 || (cat $(1)/install.log; exit 1)
	$(1)/bin/pip list --format=freeze | grep -iE '^(torch|nvidia-)' | diff $(1)/torch-before.txt - \
		|| (echo "$(1): its dependencies changed torch (lines above); not using it"; exit 1)
	! $(1)/bin/pip list --format=freeze | grep -iE '^(nvidia-|sglang|triton)' \
		|| (echo "$(1): the packages above are CUDA/SGLang ones; not using it"; exit 1)
	$(1)/bin/python -c "import $(4)" >>$(1)/install.log 2>&1 || (cat $(1)/install.log; exit 1)
	@echo "$(1): $$($(1)/bin/pip list --format=freeze | grep -iE '^(torch|transformers|$(firstword $(2)))' | tr '\n' ' ')"
	touch $(1)/installed
endef

SPEC_VENV := .venv-speculators
SPEC_BIN := $(SPEC_VENV)/bin
SPEC_CACHED := $(call cached_venv,speculators,examples/speculators-requirements.txt)
$(SPEC_CACHED)/installed:
	$(call TRAINER_VENV,$(SPEC_CACHED),speculators==0.9.0 hs-connectors==0.9.0,examples/speculators-requirements.txt,speculators$(comma) hs_connectors)

SF_VENV := .venv-specforge
SF_BIN := $(SF_VENV)/bin
SF_CACHED := $(call cached_venv,specforge,examples/specforge-requirements.txt)
$(SF_CACHED)/installed:
	$(call TRAINER_VENV,$(SF_CACHED),specforge==0.2.0,examples/specforge-requirements.txt,specforge.runtime.data_plane.offline_reader$(comma) specforge.algorithms.eagle3.data$(comma) specforge.cli)

# The clone's link to the cached venv (replacing a venv that an older checkout built in place).
speculators-venv: $(SPEC_CACHED)/installed
	@[ "$$(readlink $(SPEC_VENV))" = "$(SPEC_CACHED)" ] || (rm -rf $(SPEC_VENV) && ln -s $(SPEC_CACHED) $(SPEC_VENV))
specforge-venv: $(SF_CACHED)/installed
	@[ "$$(readlink $(SF_VENV))" = "$(SF_CACHED)" ] || (rm -rf $(SF_VENV) && ln -s $(SF_CACHED) $(SF_VENV))

# The real SGLang 0.5.23 on the CPU backend (bf16; AMX kernels on a Xeon with AMX, x86-64-v3 ones on any
# other AVX2 CPU: examples/sglang_cpu/build_kernels.py), in a virtual environment of its own:
# it pins torch==2.14.1 (PyPI's CUDA build, which runs on a CPU: the local +cpu torch cannot serve,
# sglang imports torchvision and PyPI's is CUDA-linked) and transformers==5.19.0. sglang itself with
# --no-deps, then its requirements less the CUDA-only ones (examples/sglang-requirements.txt says
# which and why), then this package's requirements (for --engine sglang, which runs SGLang in our process), then
# SGLang's CPU kernels, built from SGLang's own source (examples/sglang_cpu/build_kernels.py; cached
# outside the checkout, so a machine builds them once: 5-8 min on 2 cores), with the build's SGLang plugin
# (examples/sglang_cpu/cpu_plugin.py: on a CPU without AMX it keeps the CPU attention backend, the one
# with EAGLE speculative decoding, whose extend attention the build computes in ATen). Checked by a one-prompt
# generate on the bundled tiny model. Needs libnuma's headers (apt-get install libnuma-dev).
# About 7 GB; 3-4 min with a warm pip cache and a cached kernel build.
# The cached venv holds no eagle3-synth (clones differ in it): the clone's .venv-sglang is a venv of its
# own with this package installed editable and a .pth that adds the cached venv's site-packages
# (`site.addsitedir`, so the .pth files there run too), so each clone's `.venv-sglang/bin/eagle3-synth`
# runs that clone's code, and removing a clone leaves the cached venv whole.
SGL_VENV := .venv-sglang
SGL_BIN := $(SGL_VENV)/bin
SGL_CACHED := $(call cached_venv,sglang,examples/sglang-requirements.txt examples/sglang_cpu/build_kernels.py \
	examples/sglang_cpu/attention_0_5_23.cpp examples/sglang_cpu/cpu_plugin.py,$(package_requirements))
SGL_LOG := $(SGL_CACHED)/install.log
site_packages = $$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')

$(SGL_CACHED)/installed:
	@echo "$(SGL_CACHED): creating it (pip's output and the kernel build's go to $(SGL_LOG))"
	@rm -rf $(SGL_CACHED) && $(PYTHON) -m venv $(SGL_CACHED)
	@$(SGL_CACHED)/bin/pip install --quiet --upgrade pip >$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@echo "$(SGL_CACHED): installing sglang 0.5.23 (without its CUDA-only requirements), ~10 s"
	@$(SGL_CACHED)/bin/pip install --quiet --no-deps sglang==0.5.23 >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@# pip warns that sglang's CUDA-only requirements are unmet: that is the point.
	@echo "$(SGL_CACHED): installing its requirements, torch 2.14.1 among them (examples/sglang-requirements.txt, ~5 GB), ~3-6 min"
	@$(SGL_CACHED)/bin/pip install --quiet -r examples/sglang-requirements.txt >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@# This package's requirements, with sglang's pins held (torch, transformers, tokenizers as sglang needs them).
	@echo "$(SGL_CACHED): installing eagle3-synth's requirements with sglang's pins held, ~20 s"
	@$(SGL_CACHED)/bin/pip install --quiet . -c examples/sglang-requirements.txt >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@$(SGL_CACHED)/bin/pip uninstall --quiet --yes eagle3-synth >>$(SGL_LOG) 2>&1 || (cat $(SGL_LOG); exit 1)
	@echo "$(SGL_CACHED): SGLang's CPU kernels from its source (examples/sglang_cpu/build_kernels.py): 5-8 min on 2 idle cores the first time (20 on a busy machine), seconds once cached"
	@$(SGL_CACHED)/bin/python -m examples.sglang_cpu.build_kernels >>$(SGL_LOG) 2>&1 || (tail -50 $(SGL_LOG); exit 1)
	@grep '^sgl_kernel' $(SGL_LOG)
	@echo "$(SGL_CACHED): checking it with a one-prompt generate on the tiny model, ~1 min"
	@$(SGL_CACHED)/bin/python -m examples.sglang_cpu.check_engine >>$(SGL_LOG) 2>&1 || (tail -50 $(SGL_LOG); exit 1)
	@echo "$(SGL_CACHED): $$($(SGL_CACHED)/bin/pip list --format=freeze | grep -iE '^(torch|sglang|sglang-router|transformers)=' | tr '\n' ' ')"
	touch $@

$(SGL_VENV)/installed: $(SGL_CACHED)/installed
	@echo "$(SGL_VENV): this clone's eagle3-synth (editable) over $(SGL_CACHED), ~10 s"
	@rm -rf $(SGL_VENV) && $(PYTHON) -m venv --without-pip $(SGL_VENV)
	@echo "import site; site.addsitedir('$(call site_packages,$(SGL_CACHED))')" >"$(call site_packages,$(SGL_VENV))/sglang-venv.pth"
	@$(SGL_CACHED)/bin/pip --python $(SGL_BIN)/python install --quiet --no-deps --no-build-isolation -e . \
		>$(SGL_VENV)/install.log 2>&1 || (cat $(SGL_VENV)/install.log; exit 1)
	touch $@

sglang-venv: $(SGL_VENV)/installed
# ---- End of the tool venvs ----------------------------------------------------------------------

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
