"""What every fuzz target shares: input splitting and the driver.

A target is a module with `check(data: bytes) -> None`, which raises (usually
AssertionError) when an invariant breaks, and `seeds() -> list[bytes]`. `main`
runs it under atheris (coverage-guided libFuzzer) when atheris is installed, or
under a plain random mutator otherwise (`--mutator`), so a target stays runnable
anywhere; tests/test_fuzz_props.py runs the same `check` under hypothesis.

Both drivers take libFuzzer-style arguments: an optional corpus directory and
`-max_total_time=N`, and end with libFuzzer's `stat::number_of_executed_units:`.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # verld from the checkout, installed or not

Check = Callable[[bytes], None]


def split(data: bytes) -> tuple[bytes, bytes]:
    """(control bytes, stream): byte 0 says how many control bytes follow (0..7)."""
    if not data:
        return b"", b""
    n = data[0] % 8
    return data[1 : 1 + n], data[1 + n :]


def cut(stream: bytes, control: bytes) -> list[bytes]:
    """`stream` cut into pieces at offsets drawn from `control` (one byte each)."""
    if not stream:
        return [stream]
    offsets = sorted({byte * len(stream) // 256 for byte in control} - {0})
    pieces, start = [], 0
    for offset in offsets:
        pieces.append(stream[start:offset])
        start = offset
    pieces.append(stream[start:])
    return pieces


def main(check: Check, seeds: list[bytes], name: str) -> None:
    """Run `check` under atheris (or the random mutator), libFuzzer-style arguments."""
    argv = list(sys.argv)
    if not any(not arg.startswith("-") for arg in argv[1:]):
        argv.append(str(_seed_corpus(name, seeds)))
    try:
        atheris = importlib.import_module("atheris")
    except ImportError:
        atheris = None
    if atheris is None or "--mutator" in argv:
        sys.exit(_mutate(check, seeds, [a for a in argv if a != "--mutator"], name))
    atheris.instrument_all()  # verld is imported by now: instrument its bytecode
    atheris.Setup(argv, check)
    atheris.Fuzz()


def _seed_corpus(name: str, seeds: list[bytes]) -> Path:
    base = Path(os.environ.get("FUZZ_DIR") or Path(tempfile.gettempdir()) / "verld-fuzz")
    corpus = base / name / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds):
        (corpus / f"seed-{i:03d}").write_bytes(seed)
    return corpus


def _option(argv: list[str], name: str, default: float) -> float:
    for arg in argv:
        if arg.startswith(f"-{name}="):
            return float(arg.split("=", 1)[1])
    return default


def _mutate(check: Check, seeds: list[bytes], argv: list[str], name: str) -> int:
    """A blind fallback fuzzer: random byte mutations of seeds and of its own outputs."""
    seconds = _option(argv, "max_total_time", 60)
    rng = random.Random(int(_option(argv, "seed", time.time_ns() % 2**32)))
    pool = [s for s in seeds if s] or [b"\x00"]
    runs, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = _mutation(rng, rng.choice(pool), rng.choice(pool))
        runs += 1
        try:
            check(data)
        except Exception:
            path = Path(tempfile.gettempdir()) / "verld-fuzz" / name / f"crash-{runs}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            traceback.print_exc()
            print(f"==CRASH== input written to {path}", file=sys.stderr)
            print(f"stat::number_of_executed_units: {runs}", file=sys.stderr)
            return 1
        if len(pool) < 4096 and rng.random() < 0.01:
            pool.append(data)
    print(f"Done {runs} runs in {seconds:g} second(s) (random mutator)", file=sys.stderr)
    print(f"stat::number_of_executed_units: {runs}", file=sys.stderr)
    return 0


def _mutation(rng: random.Random, data: bytes, other: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        pos = rng.randint(0, len(buf))
        kind = rng.randrange(6)
        if kind == 0 and buf:
            buf[pos % len(buf)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif kind == 2:
            del buf[pos : pos + rng.randint(1, 16)]
        elif kind == 3:
            buf[pos:pos] = other[: rng.randint(0, len(other))]
        elif kind == 4:
            buf[pos:pos] = bytes([rng.choice(b'\x00\xff\n\r0{}[]"')]) * rng.randint(1, 300)
        else:
            start = rng.randint(0, len(buf))
            buf[pos:pos] = buf[start : start + rng.randint(1, 64)]
    return bytes(buf)
