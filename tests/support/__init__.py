"""Test-only helpers that stand in for services that cannot run here (the live Hub)."""
