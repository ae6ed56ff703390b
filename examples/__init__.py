"""Demos of eagle3-synth and the trainer shims they run (never shipped with the package).

Run from the repository root as modules, as the Makefile does: `python -m examples.demo`,
`python -m examples.train_demo`, `python -m examples.specforge_demo`; the shims with a trainer's own
interpreter (`.venv-speculators/bin/python -m examples.speculators_cpu`, `.venv-specforge/bin/python
-m examples.specforge_cpu`), and `examples/sglang_cpu/` with the SGLang venv's (`make sglang-venv`).
The *-requirements.txt files are what each trainer's or SGLang's venv installs.
"""
