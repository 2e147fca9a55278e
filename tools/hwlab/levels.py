"""hwlab validation levels: per GPU model, which checks run at level N and each one's
threshold with the source of its number (in the spirit of RVS's
rvs/conf/<model>/levels/rvs_level_N.conf).

A level file, `tools/hwlab/levels/<MODEL>/level_<N>.conf`:

    # comment
    model   MI300X
    match   provider=rocr target=gfx942 compute_units=304 memory_gib<224
    hbm_bandwidth  bytes=1GiB bandwidth>=3710GB/s  source="vendor spec: ..."

`model` names it, `match` says which devices it is for (every key must hold; `hwlab
levels` lists the models), and every other line is one check: its name, parameters
(`key=value`), thresholds (`metric>=value`, `metric<=value`, or `metric=value` for exact
properties) and `source="..."`, which is required: where the number comes from (a vendor
specification, an RVS level file, or a measured reference with its machine). A line this
module cannot read is one LevelFileError naming the file and line.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ground.errors import AmdgpuError

# HWLAB_LEVEL_DIR points hwlab (and a fleet's nodes) at another folder of level files.
LEVEL_DIR = Path(os.environ.get("HWLAB_LEVEL_DIR") or Path(__file__).with_name("levels"))


class LevelFileError(AmdgpuError):
    """A level file that cannot be read: names the file and line."""


# --- units -------------------------------------------------------------------------------
# Every figure is kept in one base unit per quantity; a threshold may be written in any unit
# of its quantity.
_UNITS: dict[str, dict[str, float]] = {
    "bandwidth": {"GB/s": 1.0, "TB/s": 1e3, "MB/s": 1e-3},
    "time": {"us": 1.0, "ms": 1e3, "s": 1e6, "ns": 1e-3},
    "flops": {"GFLOPS": 1.0, "TFLOPS": 1e3, "MFLOPS": 1e-3},
    "bytes": {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30},
    "count": {"": 1},
    "gib": {"": 1, "GiB": 1},
}
BASE_UNIT = {"bandwidth": "GB/s", "time": "us", "flops": "GFLOPS", "bytes": "B",
             "count": "", "gib": "GiB"}
_NUMBER = re.compile(r"^([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)$")


def parse_quantity(text: str, quantity: str) -> float:
    """'3710GB/s' -> 3710.0 (GB/s). ValueError naming the accepted units otherwise."""
    m = _NUMBER.match(text)
    units = _UNITS[quantity]
    if not m or m.group(2) not in units:
        shown = ", ".join(u or "a plain number" for u in units)
        raise ValueError(f"{text!r} is not a number with a unit of {quantity} ({shown})")
    return float(m.group(1)) * units[m.group(2)]


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


# --- what each check accepts -------------------------------------------------------------
@dataclass(frozen=True)
class CheckKind:
    params: dict[str, str]  # parameter -> quantity ("bytes", "count") or "word"
    metrics: dict[str, str]  # threshold metric -> quantity
    words: dict[str, tuple[str, ...]] = field(default_factory=dict)  # allowed word values
    exact: bool = False  # metrics may be `=` (device properties)


CHECKS: dict[str, CheckKind] = {
    "properties": CheckKind(
        params={},
        metrics={"target": "word", "compute_units": "count", "wavefront": "count",
                 "memory_gib": "gib", "backend": "word", "name_has": "word", "agents": "count"},
        exact=True),
    "hbm_bandwidth": CheckKind(params={"bytes": "bytes", "repeat": "count"},
                               metrics={"bandwidth": "bandwidth"}),
    "host_bandwidth": CheckKind(
        params={"mode": "word", "direction": "word", "bytes": "bytes", "repeat": "count"},
        metrics={"bandwidth": "bandwidth"},
        words={"mode": ("pinned", "pageable"), "direction": ("h2d", "d2h")}),
    "peer_bandwidth": CheckKind(params={"bytes": "bytes", "repeat": "count", "pair": "word"},
                                metrics={"bandwidth": "bandwidth"}),
    "gemm": CheckKind(params={"dtype": "word", "n": "count", "repeat": "count"},
                      metrics={"throughput": "flops"},
                      words={"dtype": ("f32", "f16", "bf16")}),
    "dispatch_latency": CheckKind(params={"repeat": "count"}, metrics={"round_trip": "time"}),
    "replay_cost": CheckKind(params={"repeat": "count", "dispatches": "count"},
                             metrics={"host_time": "time"}),
    "stress": CheckKind(params={"seconds": "count", "elements": "count"},
                        metrics={"mismatches": "count", "queue_errors": "count",
                                 "dispatches": "count"}),
    "transfer_matrix": CheckKind(
        params={"bytes": "bytes", "repeat": "count", "pair": "word"},
        metrics={"min_bandwidth": "bandwidth", "mismatches": "count"}),
}
# Parameters that tell two lines of the same check apart in the report ("host_bandwidth
# [pinned h2d]").
LABEL_PARAMS = ("mode", "direction", "dtype")


@dataclass(frozen=True)
class Threshold:
    metric: str
    op: str  # ">=", "<=", "="
    value: float | str
    text: str  # as written

    def holds(self, figure: float | str) -> bool:
        if self.op == "=":
            return str(figure) == str(self.value) if isinstance(self.value, str) \
                else float(figure) == self.value
        if isinstance(figure, str):
            return False
        return figure >= self.value if self.op == ">=" else figure <= self.value  # type: ignore[operator]


@dataclass(frozen=True)
class Check:
    name: str
    params: dict[str, float | str]
    thresholds: tuple[Threshold, ...]
    source: str
    where: str  # "file:line"

    @property
    def label(self) -> str:
        extra = [str(self.params[k]) for k in LABEL_PARAMS if k in self.params]
        return f"{self.name}[{' '.join(extra)}]" if extra else self.name


@dataclass
class LevelFile:
    path: Path
    model: str
    level: int
    match: tuple[Threshold, ...]
    checks: list[Check]
    match_where: str = ""

    def matches(self, facts: dict) -> bool:
        for t in self.match:
            if t.metric == "name_has":
                if str(t.value).lower() not in str(facts.get("name", "")).lower():
                    return False
            elif t.metric not in facts or not t.holds(facts[t.metric]):
                return False
        return True


_TOKEN = re.compile(r"^([a-z_]+)(>=|<=|=)(.+)$")
_MATCH_KEYS = {"provider": "word", "target": "word", "compute_units": "count",
               "memory_gib": "gib", "backend": "word", "name_has": "word", "agents": "count"}


def _value(text: str, quantity: str) -> float | str:
    return text if quantity == "word" else parse_quantity(text, quantity)


def _threshold(token: str, metric: str, op: str, raw: str, quantity: str, where: str,
               exact: bool) -> Threshold:
    if op == "=" and not exact and quantity != "word":
        raise LevelFileError(f"{where}: {token!r}: a threshold needs >= or <= "
                             f"(e.g. {metric}>={raw}); fix the line")
    try:
        value = _value(raw, quantity)
    except ValueError as e:
        raise LevelFileError(f"{where}: malformed threshold {token!r}: {e}; fix the line") \
            from None
    return Threshold(metric, op, value, token)


def _tokens(line: str, where: str) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError as e:
        raise LevelFileError(f"{where}: {e} (an unclosed quote?); fix the line") from None


def parse_line(tokens: list[str], where: str) -> Check:
    name, rest = tokens[0], tokens[1:]
    kind = CHECKS.get(name)
    if kind is None:
        raise LevelFileError(f"{where}: unknown check {name!r}; known checks: "
                             f"{', '.join(CHECKS)} (or the keywords model, match)")
    params: dict[str, float | str] = {}
    thresholds = []
    source = ""
    for token in rest:
        m = _TOKEN.match(token)
        if not m:
            raise LevelFileError(f"{where}: {token!r} is neither key=value nor metric>=value; "
                                 "fix the line")
        key, op, raw = m.groups()
        if key == "source":
            source = raw
        elif key in kind.metrics:
            thresholds.append(_threshold(token, key, op, raw, kind.metrics[key], where,
                                         kind.exact))
        elif key in kind.params and op == "=":
            quantity = kind.params[key]
            allowed = kind.words.get(key)
            if allowed and raw not in allowed:
                raise LevelFileError(f"{where}: {key}={raw!r} is not one of "
                                     f"{', '.join(allowed)}; fix the line")
            try:
                params[key] = _value(raw, quantity)
            except ValueError as e:
                raise LevelFileError(f"{where}: malformed parameter {token!r}: {e}; fix the "
                                     "line") from None
        else:
            known = sorted(kind.params) + sorted(kind.metrics)
            raise LevelFileError(f"{where}: check {name!r} has no parameter or metric "
                                 f"{key!r} (it takes {', '.join(known)}); fix the line")
    if not thresholds:
        raise LevelFileError(f"{where}: check {name!r} has no threshold (e.g. "
                             f"{next(iter(kind.metrics))}>=...); a check needs one")
    if not source:
        raise LevelFileError(f"{where}: check {name!r} has no source=\"...\" saying where its "
                             "threshold comes from (vendor spec, RVS file, measured reference)")
    return Check(name, params, tuple(thresholds), source, where)


def load(path: str | Path) -> LevelFile:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise LevelFileError(f"{path}: {e.strerror}; check the path") from None
    m = re.search(r"level_(\d+)\.conf$", path.name)
    level = int(m.group(1)) if m else 0
    model = ""
    match: tuple[Threshold, ...] = ()
    match_where = ""
    checks: list[Check] = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{number}"
        tokens = _tokens(line, where)
        if not tokens:
            continue
        if tokens[0] == "model":
            model = " ".join(tokens[1:])
        elif tokens[0] == "match":
            match_where = where
            found = []
            for token in tokens[1:]:
                tm = _TOKEN.match(token)
                if not tm or tm.group(1) not in _MATCH_KEYS:
                    raise LevelFileError(f"{where}: match {token!r}: use key=value with keys "
                                         f"{', '.join(_MATCH_KEYS)}; fix the line")
                key, op, raw = tm.groups()
                found.append(_threshold(token, key, op, raw, _MATCH_KEYS[key], where, True))
            match = tuple(found)
        else:
            checks.append(parse_line(tokens, where))
    if not model:
        raise LevelFileError(f"{path}:1: no 'model NAME' line; add one")
    if not match:
        raise LevelFileError(f"{path}:1: no 'match key=value ...' line saying which devices "
                             "this file is for; add one")
    return LevelFile(path, model, level, match, checks, match_where)


def level_files(level: int, root: Path = LEVEL_DIR) -> list[LevelFile]:
    """Every model's file for `level` (all parsed: one bad file stops the run, named)."""
    return [load(p) for p in sorted(root.glob(f"*/level_{level}.conf"))]


def models(root: Path = LEVEL_DIR) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in sorted(root.glob("*/level_*.conf")):
        m = re.search(r"level_(\d+)\.conf$", p.name)
        if m:
            out.setdefault(p.parent.name, []).append(int(m.group(1)))
    return {k: sorted(v) for k, v in out.items()}
