"""Chat tokenization: a conversation becomes `prompt_ids` through the tokenizer's own template.

We never keep a copy of a model's template: the tokenizer renders it, with
`add_generation_prompt=True` and the template kwargs (`thinking`, `enable_thinking`, ...) passed
explicitly, so the ids are exactly what the model sees in production.

Many prompts at once (`prompt_ids_batch`): `apply_chat_template(..., tokenize=True)` is "render the
template to text, then `tokenizer(text, add_special_tokens=False)`" (transformers 5.x), so we render
each conversation and encode the texts in one batched call -- the same ids without the per-call
overhead of the tokenizer front end. Because a tokenizer with its own code (`trust_remote_code`) may
override `apply_chat_template`, the first batch is checked against the one-at-a-time call; on any
difference every later prompt goes through `apply_chat_template` itself.
"""

from __future__ import annotations

import contextlib
import datetime as _datetime
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from eagle3_synth.prompts.conversation import Conversation
from eagle3_synth.errors import ConfigError, PromptError
from eagle3_synth.contract.profiles import ModelProfile
from eagle3_synth.prompts.forms import MessageForm, ProbeReport, probe_message_form

log = logging.getLogger(__name__)

# Files a tokenizer folder is recognised by (transformers reads one of them).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "tiktoken.model", "vocab.json")


def check_tokenizer_folder(path: str, option: str = "--tokenizer") -> None:
    """A one-line ConfigError naming `option` unless `path` is a local folder with tokenizer files."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{option} {path}: no such folder (eagle3-synth reads local model and tokenizer "
                          "folders only, nothing is downloaded)")
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        raise ConfigError(f"{option} {path}: no tokenizer files in this folder (expected one of "
                          f"{', '.join(_TOKENIZER_FILES)})")


def load_tokenizer(path: str, *, trust_remote_code: bool = False, option: str = "--tokenizer") -> Any:
    """Load a local tokenizer. `trust_remote_code` is opt-in only (the Kimi tokenizer needs it).

    Only local folders: a missing one is a one-line ConfigError naming it (`option`), never a Hub
    lookup -- transformers would read a non-existent path as a Hub repo id and fail on that.
    A folder `AutoTokenizer` would load as transformers' `TokenizersBackend` anyway
    (`plain_tokenizer_folder`) is loaded with that class directly, which does not import torch
    (`AutoTokenizer` does, through the model configs: about a second, for nothing when no model
    runs in this process).
    """
    check_tokenizer_folder(path, option)
    try:
        if plain_tokenizer_folder(path):
            from transformers.tokenization_utils_tokenizers import TokenizersBackend

            return TokenizersBackend.from_pretrained(path, local_files_only=True)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{option} {path}: cannot load the tokenizer ({first})") from None


# `tokenizer_class` names AutoTokenizer (transformers 5) resolves to `TokenizersBackend` itself
# (`PreTrainedTokenizerFast` is an alias of it); tests/prompts/test_tokenizer_loading.py holds it to that.
_PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def plain_tokenizer_folder(path: str) -> bool:
    """Whether `AutoTokenizer.from_pretrained(path)` can only mean `TokenizersBackend.from_pretrained(path)`.

    That holds for a folder with a `tokenizer.json` and a `tokenizer_config.json` naming one of
    `_PLAIN_CLASSES`, without `auto_map` (the tokenizer's own code) and without a `config.json`
    (whose model type can make AutoTokenizer pick a model's own tokenizer class instead): a
    tokenizer folder saved by transformers 5, as the fixtures are. Anything else, or a file that
    does not parse, goes through AutoTokenizer.
    """
    folder = Path(path)
    if (folder / "config.json").exists() or not (folder / "tokenizer.json").is_file():
        return False
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("tokenizer_class") in _PLAIN_CLASSES and "auto_map" not in config


def template_uses_date(tokenizer: Any) -> bool:
    """Whether the chat template writes the current date (gpt-oss: `strftime_now`)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return "strftime_now" in (template if isinstance(template, str) else " ".join(map(str, template.values())))


@contextlib.contextmanager
def pinned_date(date: str | None) -> Iterator[None]:
    """Make the template's `strftime_now` read `date` (YYYY-MM-DD, midnight) instead of the clock.

    transformers defines `strftime_now(format)` as `datetime.now().strftime(format)` with
    `datetime` imported at the top of `transformers/utils/chat_template_utils.py` (5.19 and 5.24,
    lines 23 and 628); kwargs cannot replace it, since they are reduced to plain JSON values before
    rendering (`_plain_template_data`, line 727). So the module's `datetime` is swapped for the call.
    """
    if date is None:
        yield
        return
    from transformers.utils import chat_template_utils

    fixed = _datetime.datetime.strptime(date, "%Y-%m-%d")

    class _Pinned(_datetime.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> _datetime.datetime:  # noqa: ARG003 - the template asks for local time
            return fixed

    previous = chat_template_utils.datetime
    chat_template_utils.datetime = _Pinned
    try:
        yield
    finally:
        chat_template_utils.datetime = previous


def today() -> str:
    """Today's date (UTC) as a template date."""
    return _datetime.datetime.now(_datetime.timezone.utc).strftime("%Y-%m-%d")


def check_template_date(date: str) -> str:
    try:
        _datetime.datetime.strptime(date, "%Y-%m-%d")
    except ValueError:
        raise ConfigError(f"--template-date expects YYYY-MM-DD, got {date!r}") from None
    return date


class ChatTokenizer:
    """Renders conversations to prompt ids with fixed template kwargs, message form and date.

    `form` (template_forms.MessageForm) is how conversations are handed to this template (probed
    when not given, with `profile`'s settings); `template_date` pins what a date-writing template
    (gpt-oss) renders as today.
    """

    def __init__(self, tokenizer: Any, template_kwargs: Mapping[str, Any] | None = None, *,
                 form: MessageForm | None = None, profile: ModelProfile | None = None,
                 template_date: str | None = None):
        if not getattr(tokenizer, "chat_template", None):
            raise PromptError("the tokenizer has no chat_template; eagle3-synth needs the model's own template")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.template_date = template_date if template_uses_date(tokenizer) else None
        self.form = MessageForm()
        # Without a recorded form, probe the template for the one it renders, with the profile's
        # documented tool description (for templates that ignore tools) and reasoning field.
        self.probe: ProbeReport | None = None
        if form is None:
            self.probe = probe_message_form(self, profile.tool_description if profile else None,
                                            profile.reasoning_field if profile else "reasoning_content")
            form = self.probe.form
        self.form = form
        # None until the first batch was compared with apply_chat_template(tokenize=True).
        self.batch_encoding_exact: bool | None = None

    def _apply(self, conversation: Conversation, form: MessageForm | None, tokenize: bool) -> Any:
        messages, tools = (form or self.form).apply(conversation)
        try:
            with pinned_date(self.template_date):
                return self.tokenizer.apply_chat_template(
                    messages, tools=tools, tokenize=tokenize, add_generation_prompt=True, **self.template_kwargs)
        except Exception as exc:  # jinja errors (raise_exception in templates) name the problem
            raise PromptError(f"chat template failed: {type(exc).__name__}: {exc}") from exc

    def prompt_ids(self, conversation: Conversation) -> list[int]:
        """Ids of the templated conversation, ending with the generation prompt."""
        encoded = self._apply(conversation, None, tokenize=True)
        # transformers 5 returns a BatchEncoding; older versions a plain list.
        ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
        return [int(i) for i in ids]

    def render(self, conversation: Conversation, *, form: MessageForm | None = None) -> str:
        """The templated conversation as text, ending with the generation prompt."""
        return self._apply(conversation, form, tokenize=False)

    def prompt_ids_batch(self, conversations: Sequence[Conversation]) -> list[list[int] | PromptError]:
        """`prompt_ids` of each conversation, in order; a conversation the template refuses gets
        its PromptError in its place instead of failing the others."""
        if self.batch_encoding_exact is False:
            return [self._one(conversation) for conversation in conversations]
        results: list[list[int] | PromptError] = []
        texts: list[str] = []
        for conversation in conversations:
            try:
                texts.append(self.render(conversation))
                results.append([])  # filled below
            except PromptError as exc:
                results.append(exc)
        if texts:
            encoded = iter(self.tokenizer(texts, add_special_tokens=False)["input_ids"])
            for i, item in enumerate(results):
                if not isinstance(item, PromptError):
                    results[i] = list(map(int, next(encoded)))
        if self.batch_encoding_exact is None and texts:
            first = next(i for i, item in enumerate(results) if not isinstance(item, PromptError))
            self.batch_encoding_exact = self._one(conversations[first]) == results[first]
            if not self.batch_encoding_exact:
                log.warning("this tokenizer's apply_chat_template is not render + encode; templating every "
                            "prompt with apply_chat_template(tokenize=True) instead (slower, same ids)")
                return [self._one(conversation) for conversation in conversations]
        return results

    def _one(self, conversation: Conversation) -> list[int] | PromptError:
        try:
            return self.prompt_ids(conversation)
        except PromptError as exc:
            return exc
