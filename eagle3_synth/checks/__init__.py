"""Checks a user runs: `validate` (built rows against the data contract) and `doctor` (the model's
tokenizer and template, before a long run)."""
