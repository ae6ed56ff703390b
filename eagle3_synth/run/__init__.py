"""A run: its spec and fingerprint, run directory and journal, generation, assembly, progress."""
