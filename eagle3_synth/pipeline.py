"""The pipeline: prompts -> prompt ids -> engine -> journal, then journal -> dataset rows.

`generate` fills a run directory and can be re-run after any crash: it generates only samples
without a result. `iter_rows` turns a run directory into contract rows ordered by `sample_id`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import __version__
from .chat import ChatTokenizer, load_tokenizer
from .prompt_prep import prepare_prompts, prompt_source_identity
from .configs import ConfigSpec
from .errors import ConfigError
from .engines import EngineOptions, GenerationRequest, SamplingParams, create_engine
from .journal import RunDirectory
from .profiles import MarkerIds, get_profile, resolve_markers
from .records import dumps_messages, dumps_tools, make_row

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerateOptions:
    """What determines a run's output, plus how to run it (engine settings)."""

    config: ConfigSpec
    tokenizer_path: str
    prompts_file: str
    run_dir: str
    engine: str
    engine_options: EngineOptions
    profile: str = "auto"
    limit: int | None = None
    max_new_tokens: int = 10_240
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = 0
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    trust_remote_code: bool = False
    strict: bool = False
    retry_errors: bool = False

    def __post_init__(self) -> None:
        # Checked here, before any prompt is prepared, so a typo fails in a second, not after hours.
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {self.limit}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")


@dataclass
class GenerateSummary:
    config: str
    run_dir: str
    prompts: int = 0
    rejected: int = 0
    already_done: int = 0
    generated: int = 0
    finish_reasons: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    output_tokens: int = 0
    seconds: float = 0.0

    def lines(self) -> list[str]:
        rate = self.generated / self.seconds if self.seconds else 0.0
        tok_rate = self.output_tokens / self.seconds if self.seconds else 0.0
        lines = [
            f"{self.config}: {self.prompts} prompts ({self.rejected} rejected), "
            f"{self.already_done} already in {self.run_dir}, {self.generated} generated "
            f"in {self.seconds:.1f}s ({rate:.2f} samples/s, {tok_rate:.1f} output tokens/s)",
            "  finish reasons: " + (", ".join(f"{k}={v}" for k, v in sorted(self.finish_reasons.items())) or "none"),
        ]
        lines += [f"  error: {e}" for e in self.errors[:20]]
        if len(self.errors) > 20:
            lines.append(f"  ... and {len(self.errors) - 20} more errors")
        return lines


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def tokenizer_identity(path: str) -> dict[str, str]:
    """Digests of the files that define tokenization, so a changed template changes the run."""
    folder = Path(path)
    names = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
             "special_tokens_map.json", "tokenizer.model", "tiktoken.model")
    if not folder.is_dir():
        return {"name": path}
    return {name: file_digest(folder / name) for name in names if (folder / name).is_file()}


def model_identity(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    folder = Path(path)
    if not folder.is_dir():
        return {"name": path}
    identity: dict[str, Any] = {"name": folder.name}
    if (folder / "config.json").is_file():
        identity["config.json"] = file_digest(folder / "config.json")
    identity["weights"] = sorted(
        (p.name, p.stat().st_size) for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")
    )
    return identity


def fingerprint_fields(options: GenerateOptions, profile: str) -> dict[str, Any]:
    """Everything that determines the output ids (engine plumbing such as URLs is left out)."""
    return {
        "config": options.config.name,
        "prompts": prompt_source_identity(options),
        "model": model_identity(options.engine_options.model) if options.engine != "replay" else {},
        "replay": file_digest(Path(options.engine_options.replay_file)) if options.engine == "replay" else None,
        "tokenizer": tokenizer_identity(options.tokenizer_path),
        "template_kwargs": {**options.config.template_kwargs, **options.template_kwargs},
        "profile": profile,
        "sampling": {
            "max_new_tokens": options.max_new_tokens,
            "temperature": options.temperature,
            "top_p": options.top_p,
            "top_k": options.top_k,
            "seed": options.seed,
        },
    }


def generate(options: GenerateOptions) -> GenerateSummary:
    """Fill the run directory with a result for every prompt that has none yet."""
    started = time.monotonic()
    tokenizer = load_tokenizer(options.tokenizer_path, trust_remote_code=options.trust_remote_code)
    profile = get_profile(options.profile, tokenizer)
    markers = resolve_markers(profile, tokenizer)
    run = RunDirectory(options.run_dir)
    run.claim(
        fingerprint_fields(options, profile.name),
        meta={
            "markers": asdict(markers),
            "engine": options.engine,
            "model": options.engine_options.model,
            "tokenizer": options.tokenizer_path,
            "eagle3_synth_version": __version__,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    summary = GenerateSummary(config=options.config.name, run_dir=options.run_dir)

    if not run.prompts_ready:
        chat = ChatTokenizer(tokenizer, {**options.config.template_kwargs, **options.template_kwargs})
        prepared, rejects = prepare_prompts(options, chat)
        run.write_prompts(prepared, rejects)
    summary.rejected = sum(1 for _ in run.iter_rejects())

    done = run.index_results()
    pending: list[GenerationRequest] = []
    for prompt in run.iter_prompts():
        summary.prompts += 1
        state = done.get(prompt.sample_id)
        if state is not None and not (state[1] and options.retry_errors):
            summary.already_done += 1
            continue
        pending.append(GenerationRequest(prompt.sample_id, prompt.prompt_ids))
    summary.prompts += summary.rejected

    if pending:
        params = SamplingParams(
            max_new_tokens=options.max_new_tokens,
            temperature=options.temperature,
            stop_token_ids=markers.stop_ids,
            top_p=options.top_p,
            top_k=options.top_k,
            seed=options.seed,
        )
        engine = create_engine(options.engine, options.engine_options)
        try:
            with run.open_journal() as journal:
                for result in engine.generate(pending, params):
                    journal.append(result)
                    summary.generated += 1
                    summary.output_tokens += result.completion_tokens
                    summary.finish_reasons[result.finish_reason] += 1
                    if result.error:
                        summary.errors.append(f"sample_id {result.sample_id}: {result.error}")
        finally:
            engine.close()
    summary.seconds = time.monotonic() - started
    return summary


def iter_rows(run_dir: str, markers: MarkerIds | None = None) -> Iterator[dict[str, Any]]:
    """Contract rows of a run directory in sample_id order; samples without a result are left out.

    Results are looked up by byte offset, so memory holds one sample at a time plus the index.
    """
    run = RunDirectory(run_dir)
    markers = markers or run.markers()
    index = run.index_results()
    journal_path = Path(run_dir) / "journal.jsonl"
    if not journal_path.exists():
        return
    with open(journal_path, "rb") as journal:
        for prompt in run.iter_prompts():
            state = index.get(prompt.sample_id)
            if state is None or state[1]:
                continue  # not generated yet, or failed: reported, not stored
            result = run.read_result(journal, state[0])
            yield make_row(
                sample_id=prompt.sample_id,
                source_id=prompt.source_id,
                prompt_ids=prompt.prompt_ids,
                output_ids=result["output_ids"],
                finish_reason=result["finish_reason"],
                messages_json=dumps_messages(prompt.messages),
                tools_json=dumps_tools(prompt.tools),
                markers=markers,
            )
