"""Contract checks a folder must pass before any of it is published.

A release is permanent (tags are never overwritten), so nothing that breaks the data contract may
reach the Hub: every Parquet file must have exactly the contract's schema, and every row must pass
`eagle3-synth validate` (prompt re-templated from its messages, boundaries recomputed from
`output_ids`, stop tokens, counts, every id in the model's vocabulary, no output over the run's
max_new_tokens, unique sample ids) with the tokenizer the data was made with.
The row checks are `validate.validate_rows`, not a second implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from eagle3_synth.dataset.folder import config_files, run_info_path
from eagle3_synth.errors import ConfigError
from eagle3_synth.contract.row import FEATURES
from eagle3_synth.dataset.stores import (
    FolderSource,
    Provenance,
    data_markers,
    data_tokenizer,
    provenance_from_run_file,
)
from eagle3_synth.prompts.held_out import SPLITS
from eagle3_synth.checks.validate import RowValidator, data_vocabulary, validate_rows

CONTRACT_SCHEMA = FEATURES.arrow_schema.remove_metadata()


def config_provenance(folder: Path, config: str) -> Provenance:
    """What made the config: its run_info.json (written by `build`), else its run directory's run.json."""
    path = run_info_path(folder, config)
    return provenance_from_run_file(path) if path else Provenance(origin=f"nothing recorded for {config}")


def schema_problems(folder: Path, config: str) -> list[str]:
    """Every shard's Arrow schema (both splits) must be the contract's, field for field (types included)."""
    problems = []
    for path in [p for split in SPLITS for p in config_files(folder, config, split)]:
        schema = pq.read_schema(path).remove_metadata()
        if not schema.equals(CONTRACT_SCHEMA):
            got = {f.name: str(f.type) for f in schema}
            want = {f.name: str(f.type) for f in CONTRACT_SCHEMA}
            diffs = [f"{name}: has {got.get(name, 'nothing')}, contract {want.get(name, 'nothing')}"
                     for name in dict.fromkeys([*want, *got]) if got.get(name) != want.get(name)]
            problems.append(f"{config}: {path.name} does not have the contract's schema ({'; '.join(diffs)})")
    return problems


class Tokenizers:
    """Each tokenizer loaded once, however many configs share it."""

    def __init__(self, override: str | None, trust_remote_code: bool):
        self.override = override
        self.trust_remote_code = trust_remote_code
        self._loaded: dict[str, Any] = {}

    def get(self, provenance: Provenance) -> Any:
        key = self.override or provenance.tokenizer or ""
        if key not in self._loaded:
            self._loaded[key] = data_tokenizer(provenance, self.override, trust_remote_code=self.trust_remote_code)[0]
        return self._loaded[key]


def check_folder(
    folder: Path, configs: Sequence[str], tokenizers: Tokenizers, echo: Callable[[str], None] = print
) -> None:
    """Raise ConfigError listing every violation when any config fails; say what passed otherwise."""
    problems: list[str] = []
    for config in configs:
        found = schema_problems(folder, config)
        if found:  # rows of the wrong shape cannot be checked further
            problems += found
            continue
        provenance = config_provenance(folder, config)
        tokenizer = tokenizers.get(provenance)
        validator = RowValidator(tokenizer, data_markers(tokenizer, provenance), provenance.template_kwargs,
                                 vocab=data_vocabulary(provenance, tokenizer), max_new_tokens=provenance.max_new_tokens)
        for split in [s for s in SPLITS if config_files(folder, config, s)]:
            source = FolderSource(str(folder))
            source.split = split
            name = config if split == "train" else f"{config} ({split})"
            report = validate_rows(source.iter_rows(config), validator, name)
            if report.ok:
                echo(f"  {report.lines()[0]}")
            else:
                problems += report.lines()
    if problems:
        raise ConfigError(
            f"refusing to publish {folder}: it breaks the data contract\n  " + "\n  ".join(problems)
            + f"\n(see `eagle3-synth validate {folder}`; rebuild the affected configs before publishing)"
        )
