"""Prompts: conversations, source adapters and readers, chat templating, selection, hygiene."""
