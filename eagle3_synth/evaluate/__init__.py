"""Evaluating a drafter where it counts: served by SGLang's own speculative decoder, on the target's
held-out rows (`eagle3-synth evaluate`). drafter.py reads and checks the drafter, run.py sends the
rows, figures.py turns SGLang's counts into acceptance figures, report.py prints them."""
