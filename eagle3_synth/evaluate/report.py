"""The evaluation report as a table for the terminal (the JSON report holds the same figures)."""

from __future__ import annotations

from typing import Any

from eagle3_synth.evaluate.run import SGLANG_DEFAULTS, SPECULATIVE_ARGS


def _number(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def figure_line(name: str, turn: str, figures: dict[str, Any], positions: int) -> str:
    spread = figures.get("acceptance_length_spread") or {}
    band = f"{_number(spread.get('p10'))}-{_number(spread.get('p90'))}" if spread else "-"
    per_position = figures.get("per_position") or []
    cells = [_number(per_position[k]) if k < len(per_position) else "-" for k in range(positions)]
    return (f"{name:<20} {turn:>4} {figures['rows']:>5} {figures['verify_steps']:>7} "
            f"{_number(figures['acceptance_length']):>9} {band:>11} {_number(figures['tokens_per_step']):>10} "
            f"{_number(figures['acceptance_rate']):>5}  " + " ".join(f"{c:>5}" for c in cells)).rstrip()


def format_report(report: dict[str, Any]) -> str:
    settings = report.get("settings") or {}
    given = report.get("settings_given") or {}
    resolved = ", ".join(f"{ours} {settings.get(theirs, given.get(ours))}" for ours, theirs in SPECULATIVE_ARGS.items()
                         if ours != "draft_window_size" or given.get(ours))
    unset = [ours for ours, value in given.items() if value is None and ours != "draft_window_size"]
    positions = max((len(f.get("per_position") or []) for f in [report["overall"], *report["configs"].values()]), default=0)
    lines = [
        f"drafter {report['drafter']} ({report['layout']} layout) on {report['target']}, engine {report['engine']}, "
        f"{report['split']} rows, temperature {report['temperature']}",
        f"speculative decoding: {resolved}" + (f" ({', '.join(unset)}: {SGLANG_DEFAULTS})" if unset else ""),
        "",
        f"{'config':<20} {'turn':>4} {'rows':>5} {'steps':>7} {'accept':>9} {'p10-p90':>11} {'tok/step':>10} "
        f"{'rate':>5}  " + " ".join(f"{'>=' + str(k):>5}" for k in range(1, positions + 1)),
    ]
    for config, figures in report["configs"].items():
        lines.append(figure_line(config, "all", figures, positions))
        for turn, by_turn in figures.get("turns", {}).items():
            lines.append(figure_line("", turn, by_turn, positions))
    lines.append(figure_line("overall", "all", report["overall"], positions))
    greedy = report["greedy"]
    for name, what in (("row", "the rows' recorded outputs"), ("baseline", "the target's own outputs without speculation")):
        checked = greedy[name]
        if checked["checked"]:
            line = f"greedy: {checked['checked'] - checked['unequal']} of {checked['checked']} outputs equal to {what}"
            if checked["unequal"]:
                line += f"; unequal: {', '.join(checked['unequal_rows'])}"
            lines.append(line)
    speed = report["speed"]
    line = f"speed: {_number(speed['speculative_tokens_per_second'], 1)} tokens/s with the drafter"
    if "baseline_tokens_per_second" in speed:
        line += (f", {_number(speed['baseline_tokens_per_second'], 1)} without: "
                 f"{_number(speed['speedup'])}x")
    lines.append(line)
    if report.get("errors"):
        lines.append("errors: " + "; ".join(report["errors"]))
    return "\n".join(lines)
