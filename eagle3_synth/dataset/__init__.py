"""The Hub-layout dataset folder: layout, provenance, stats, card, reading rows back."""
