"""eagle3-synth: exact-token training data for EAGLE-3 drafters.

Importing the package must stay cheap and must work without SGLang (or a GPU): heavy
dependencies are imported inside the modules that need them.
"""

__version__ = "0.1.0"
