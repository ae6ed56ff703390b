"""The `--url`s of the sglang-http engine: checked base URLs, used in turn, skipping one that is down."""

from __future__ import annotations

import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from eagle3_synth.errors import ConfigError

URL_COOLDOWN_S = 10.0


def normalize_urls(urls: Iterable[str]) -> tuple[str, ...]:
    """Base URLs without a trailing slash; a missing scheme or a path such as /generate is an error."""
    result = []
    for url in urls:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"--url {url!r}: expected http://HOST:PORT of an SGLang server or router")
        if parts.path.rstrip("/"):
            raise ConfigError(f"--url {url!r}: give the server's base URL, without {parts.path!r}")
        result.append(f"{parts.scheme}://{parts.netloc}")
    if not result:
        raise ConfigError("--engine sglang-http needs --url http://HOST:PORT (repeat it for several servers)")
    return tuple(result)


class UrlPool:
    """Round-robin over the URLs, skipping one that refused a connection in the last cooldown."""

    def __init__(self, urls: tuple[str, ...], cooldown_s: float = URL_COOLDOWN_S):
        self.urls = urls
        self.cooldown_s = cooldown_s
        self._next = 0
        self._down_until: dict[str, float] = {}

    def pick(self) -> str:
        now = time.monotonic()
        for _ in range(len(self.urls)):
            url = self.urls[self._next % len(self.urls)]
            self._next += 1
            if self._down_until.get(url, 0.0) <= now:
                return url
        # All are cooling down: the one that comes back first.
        return min(self.urls, key=lambda u: self._down_until.get(u, 0.0))

    def mark_down(self, url: str) -> None:
        if len(self.urls) > 1:
            self._down_until[url] = time.monotonic() + self.cooldown_s

    def mark_up(self, url: str) -> None:
        self._down_until.pop(url, None)
