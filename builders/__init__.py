"""The `datasets` builder of eagle3-synth (a thin declaration over the library)."""

from .eagle3_synth_builder import Eagle3Synth, Eagle3SynthConfig

__all__ = ["Eagle3Synth", "Eagle3SynthConfig"]
