"""SGLang-only engine modules: offline Engine, HTTP client, server args, in-flight window."""
