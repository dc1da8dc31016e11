"""One report model for every family: figures, targets, the table, JSON summary and markdown.

A family's section (`engine.Run.family`) holds each phase's rounds, each round every
path's workloads. A `Figure` is the median over a phase's rounds of one value of one
workload of a path (None where the path does not measure it, so every path has every
key and the JSON a fixed shape). A `Target` compares a measure with a threshold (`op`
<=, < or >=; kind `target`, `aim` or `info`): a ratio of two paths taken within each
round, then its median over rounds — both sides measured moments apart on the same
noisy machine — or a figure; met PASS, not met FAIL, n/a when a side is missing (a
path left out). Labels, sources and names may say `{n}` and the like: the section's
`info`. Every table and markdown section names the command that produced it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Measure = Callable[[dict[str, Any], dict[str, Any]], tuple[float | None, list[float | None]]]


def median(values: Iterable[Any]) -> float | None:
    flat: list[float] = []
    for v in values:
        flat += [x for x in v if x is not None] if isinstance(v, list) else [v] * (v is not None)
    return statistics.median(flat) if flat else None


def get(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _where(src: str, info: Mapping[str, Any]) -> tuple[str, list[str]]:
    """ "[phase:]workload.key.key" → (phase, keys), formatted with the section's info."""
    phase, _, rest = src.format(**info).rpartition(":")
    return phase or "rounds", rest.split(".")


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    digits: int
    src: str | Mapping[str, str]  #: "[phase:]workload.key..." for every path, or per path
    paths: tuple[str, ...] = ()  #: only these paths (empty: every path)
    scale: float = 1.0

    def value(self, section: dict[str, Any], path: str) -> float | None:
        src = self.src.get(path) if isinstance(self.src, Mapping) else self.src
        if src is None or (self.paths and path not in self.paths):
            return None
        phase, keys = _where(src, section.get("info", {}))
        v = median(get(r, path, *keys) for r in section["phases"].get(phase, []))
        return None if v is None else v * self.scale


def ratio(a: str, b: str, minus: str = "") -> Measure:
    """a / b per round ("[phase:]path.workload.key..."; `minus`: (a − minus) / b)."""

    def value(r: dict[str, Any], side: str, info: Mapping[str, Any]) -> Any:
        return get(r, *_where(side, info)[1])

    def measure(section: dict[str, Any], figs: dict[str, Any]) -> tuple[Any, list[Any]]:
        info = section.get("info", {})
        each: list[float | None] = []
        for r in section["phases"].get(_where(a, info)[0], []):
            x, y = value(r, a, info), value(r, b, info)
            z = value(r, minus, info) if minus else 0.0
            ok = all(isinstance(v, int | float) for v in (x, y, z)) and y
            each.append((x - z) / y if ok else None)
        return median(each), each

    return measure


def fig(path: str, key: str) -> Measure:
    return lambda section, figs: (get(figs, path, key), [])


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  #: target (must hold) | aim (reported for scale) | info
    op: str  #: <= | < | >=
    target: float
    unit: str
    measure: Measure


def paths(section: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(p for names in section["paths"].values() for p in names))


def summarise(fam: Any, section: dict[str, Any]) -> dict[str, Any]:
    """Figures per path, then each target with its per-round values and verdict."""
    info = section.get("info", {})
    figs = {p: {f.key: _round(f.value(section, p), 6) for f in fam.figures} for p in paths(section)}
    targets = []
    for t in fam.targets:
        measured, each = t.measure(section, figs)
        passed = None
        if measured is not None:
            passed = {
                "<=": measured <= t.target,
                "<": measured < t.target,
                ">=": measured >= t.target,
            }[t.op]
        targets.append(
            {
                "name": t.name.format(**info),
                "kind": t.kind,
                "measured": _round(measured, 4),
                "op": t.op,
                "target": t.target,
                "unit": t.unit,
                "per_round": [_round(v, 3) for v in each],
                "pass": passed,
            }
        )
    return {"figures": figs, "targets": targets}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def fmt(value: Any, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _label(f: Figure, section: dict[str, Any]) -> str:
    info = section.get("info", {})
    label = f.label.format(**info)
    if info.get("baud") and "when paced" in label:
        label = label.replace("when paced", f"at {info['baud']} baud")
    return label


def _target_rows(summary: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for t in summary["targets"]:
        measured = t["measured"]
        shown = fmt(measured, 4 if t["unit"] == "% of a core" else 2)
        if t["per_round"]:
            shown += "  (rounds: " + " ".join(fmt(v, 2) for v in t["per_round"]) + ")"
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t["pass"]]
        if t["kind"] != "target":
            verdict = f"{verdict} ({t['kind']})"
        goal = f"{t['op']} {t['target']:g} {t['unit']}"
        shown_ratio = fmt(measured / t["target"], 2) if measured is not None else "–"
        rows.append((t["name"], shown, goal, shown_ratio, verdict))
    return rows


def failures(section: dict[str, Any]) -> list[str]:
    """The workloads that got wrong or missing replies, one line each."""
    out = []
    for phase, rounds in section["phases"].items():
        for number, rnd in enumerate(rounds, 1):
            for path in rnd.get("order", []):
                for name, run in (rnd.get(path) or {}).items():
                    if isinstance(run, dict) and run.get("errors"):
                        sample = "; ".join(dict.fromkeys(run.get("error_samples", [])))[:120]
                        out.append(f"{phase} {number} {path} {name}: {run['errors']} ({sample})")
    return out


def table(fam: Any, section: dict[str, Any], meta: dict[str, Any]) -> str:
    """The plain-text figures and targets of one family."""
    summary, names = section["summary"], paths(section)
    labels = [_label(f, section) for f in fam.figures]
    width = max(len(x) for x in labels) + 2
    lines = [
        f"== {fam.title}: {meta['command']}",
        f"{'figure':<{width}}" + "".join(f"{p:>12}" for p in names),
    ]
    for f, label in zip(fam.figures, labels, strict=True):
        cells = "".join(f"{fmt(summary['figures'][p][f.key], f.digits):>12}" for p in names)
        lines.append(f"{label:<{width}}{cells}")
    lines += ["", *fam.footnotes, *fam.notes(section, False), ""]
    rows = _target_rows(summary)
    w = [max([len(r[i]) for r in rows] + [6]) + 2 for i in range(3)]
    lines.append(f"{'target':<{w[0]}}{'measured':<{w[1]}}{'target':<{w[2]}}{'m/t':>6}  result")
    lines += [f"{a:<{w[0]}}{b:<{w[1]}}{c:<{w[2]}}{d:>6}  {e}" for a, b, c, d, e in rows]
    failed = failures(section)
    if failed:
        lines += ["", "wrong or missing replies:", *[f"  {line}" for line in failed]]
    return "\n".join(lines)


def markdown(fam: Any, section: dict[str, Any], meta: dict[str, Any]) -> str:
    """The generated part of a family's section of docs/benchmarks.md."""
    summary, names, m = section["summary"], paths(section), meta
    extra = section.get("info", {}).get("versions")
    out = [
        f"Run {m['date']} on {m['nproc']} CPUs ({m['cpu']}), Linux {m['kernel']}, Python "
        f"{m['python']}, verld {m['verld']} ({m['git']}){', ' + extra if extra else ''}; "
        f"{m['rounds']} rounds, windows {m['duration_s']:g} s after {m['warmup_s']:g} s; "
        f"load average {m['loadavg_start']} before, {m['loadavg_end']} after.",
        "",
        "```sh",
        m["command"],
        "```",
        "",
        "| figure | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for f in fam.figures:
        cells = " | ".join(fmt(summary["figures"][p][f.key], f.digits) for p in names)
        out.append(f"| {_label(f, section).strip()} | {cells} |")
    out += ["", *[n + "  " for n in fam.footnotes], *fam.notes(section, True), ""]
    out += [
        "| target | measured (median; per round) | target | measured/target | result |",
        "|---|---|---|---:|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in _target_rows(summary)]
    failed = failures(section)
    if failed:
        out += ["", f"**Wrong or missing replies (the run exits 1)** in {len(failed)} workloads:"]
        out += [f"- {line}" for line in failed]
    return "\n".join(out)
