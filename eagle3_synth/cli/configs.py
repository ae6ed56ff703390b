"""`eagle3-synth configs [--config-file YAML]`: the configs a build can name, with their sources and caps.

One table from the registry (`prompts/configs.py`, the one list of configs): the built-in B1-B8
and, with `--config-file`, the file's own, each with its source (Hub id, dataset configs, split),
the adapter, the cap, the default `--turns`, `max_new_tokens`, template kwargs and license, and
whether bundled sample prompts exist (what a build without a source uses: the demo).
"""

from __future__ import annotations

import argparse
import json

from eagle3_synth.prompts.configs import BUILTIN_CONFIGS, CONFIGS, ConfigSpec, load_config_file, sample_prompts_path
from eagle3_synth.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("configs", help="list the built-in configs (and a config file's) with sources and caps",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-file", metavar="YAML", help="also list the configs this file defines")
    parser.add_argument("--json", action="store_true", help="print the configs as JSON instead of a table")
    parser.set_defaults(run=run)


def _has_samples(name: str) -> bool:
    try:
        sample_prompts_path(name)
    except ConfigError:
        return False
    return True


def _source(spec: ConfigSpec) -> str:
    """Hub id, dataset config(s) and split in one cell (the whole lists are in --json)."""
    if not spec.source:
        return "(files only: --source-file / --prompts)"
    configs = spec.source_configs
    named = "" if not configs else f" [{configs[0]}]" if len(configs) == 1 else f" [{len(configs)} configs]"
    return f"{spec.source}{named} ({spec.split})"


def config_rows(specs: list[ConfigSpec]) -> list[dict[str, object]]:
    """One dict per config: what the table and `--json` show."""
    return [{"name": spec.name, "origin": "built-in" if spec.name in BUILTIN_CONFIGS else "config file",
             "source": _source(spec), "source_configs": list(spec.source_configs),
             "data_files": list(spec.data_files), "adapter": spec.adapter, "cap": spec.cap, "turns": spec.turns,
             "max_new_tokens": spec.max_new_tokens, "template_kwargs": spec.template_kwargs,
             "license": spec.license, "pattern": spec.pattern, "sample_prompts": _has_samples(spec.name)}
            for spec in specs]


def format_table(rows: list[dict[str, object]]) -> str:
    columns = ("name", "source", "adapter", "cap", "turns", "max_new_tokens", "license")
    cells = [[f"{row[c]:,}" if isinstance(row[c], int) else str(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    numeric = {"cap", "max_new_tokens"}
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    for r in cells:
        lines.append("  ".join(v.rjust(w) if c in numeric else v.ljust(w)
                               for c, v, w in zip(columns, r, widths)).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    names = list(BUILTIN_CONFIGS)
    if args.config_file:
        names += load_config_file(args.config_file)
    rows = config_rows([CONFIGS[name] for name in names])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(format_table(rows))
    total = sum(int(row["cap"]) for row in rows)
    print(f"{len(rows)} configs, {total:,} prompts at their caps; a build without --from-source, --source-file "
          "or --prompts uses the config's bundled sample prompts (the demo)")
    return 0
