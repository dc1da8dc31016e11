"""Test support: the process helpers of `verld.testing`, under the names the tests import,
and the small helpers several test modules share (a free port, a needed program, a
process's memory, fds and children).

The helpers (real verld-sim and verld processes on real ptys and Unix sockets,
the sim's control client, `wait_for`, `write_config`) live in the package so the
tools and third-party tests can use them too; see verld/testing.py.
"""

from __future__ import annotations

import atexit
import compileall
import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from verld.testing import (
    DaemonProc,
    HarnessError,
    SimProc,
    sim_control,
    stop_process,
    wait_for,
    write_config,
)

__all__ = [
    "AS_NOBODY",
    "DaemonProc",
    "HarnessError",
    "SimProc",
    "children",
    "free_port",
    "need",
    "nobody_python",
    "rss_kib",
    "settled_fd_count",
    "sim_control",
    "stop_process",
    "wait_for",
    "write_config",
]


AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")  #: as nobody

#: prints what to copy for verld to run elsewhere: each top-level module or package that
#: verld's modules (all but the __main__s) load from outside the standard library
_LIST_IMPORTS = """
import importlib, json, pkgutil, sys, sysconfig
import verld
for m in pkgutil.walk_packages(verld.__path__, "verld."):
    if not m.name.endswith("__main__"):
        try:
            importlib.import_module(m.name)
        except Exception:
            pass  # needs an optional dependency not installed (systemd, aiomqtt)
try:
    import uvloop  # imported when verld starts its event loop
except ImportError:
    pass
std = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
out = set()
for name, mod in list(sys.modules.items()):
    path = getattr(mod, "__file__", None)
    if "." in name or not path or name.startswith(("__editable__", "_distutils_hack")):
        continue
    if "site-packages" not in path and any(path.startswith(d + "/") for d in std):
        continue
    out.add(mod.__path__[0] if hasattr(mod, "__path__") else path)
print(json.dumps(sorted(out)))
"""


def _imports_as_nobody(python: list[str]) -> str | None:
    """Why `python` run as nobody cannot import verlctl and verld (None: it can)."""
    cmd = [*AS_NOBODY, *python, "-c", "import verld.ctl, verld.daemon"]
    r = subprocess.run(cmd, cwd="/", capture_output=True, text=True, timeout=60, check=False)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]


def _readable_copy() -> Path:
    """verld and what it loads outside the standard library, copied to a new directory
    every user may read (removed when this test process ends)."""
    r = subprocess.run(
        [sys.executable, "-c", _LIST_IMPORTS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    top = Path(tempfile.mkdtemp(prefix="verld-nobody-"))
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    for src in map(Path, json.loads(r.stdout)):
        if src.is_dir():
            shutil.copytree(src, top / src.name)
        else:
            shutil.copy2(src, top / src.name)
    # compiled here: nobody may not write __pycache__, and a Python compiling verld on every
    # start is slow on a busy machine
    compileall.compile_dir(top, quiet=2)
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return top


def _readable_prefix() -> Path:
    """This Python's installation (`sys.base_prefix`) where every user may read it:
    hard links in a new directory (a copy across filesystems), removed at exit. The
    interpreter finds its library through LD_LIBRARY_PATH and its stdlib beside it."""
    top = Path(tempfile.mkdtemp(prefix="verld-python-"))
    atexit.register(shutil.rmtree, top, ignore_errors=True)
    top.chmod(0o755)
    prefix = top / "python"
    link = ["cp", "-al", sys.base_prefix, str(prefix)]
    linked = subprocess.run(link, capture_output=True, timeout=120, check=False)
    if linked.returncode != 0:
        shutil.rmtree(prefix, ignore_errors=True)
        shutil.copytree(sys.base_prefix, prefix, symlinks=True)
    return prefix


@functools.cache
def _nobody_python() -> list[str] | str:
    """The `nobody_python` command, or why there is none."""
    if shutil.which("setpriv") is None:
        return "running as another user needs setpriv"
    why = _imports_as_nobody([sys.executable])
    if why is None:
        return [sys.executable]
    # A checkout under a directory closed to other users (a 0700 home, as on Debian 12):
    # nobody cannot read verld there, nor the venv's packages, nor run the venv's Python.
    # A Python of this version nobody may run, with a readable copy on its path, can.
    copy = _readable_copy()
    env = [shutil.which("env") or "/usr/bin/env", f"PYTHONPATH={copy}"]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = getattr(sys, "_base_executable", None)  # a venv's: the Python it was made from
    found = [
        sys.executable,
        os.path.realpath(sys.executable),
        base,
        shutil.which(version),
        f"/usr/bin/{version}",
        f"/usr/local/bin/{version}",
    ]
    tried = []
    for python in dict.fromkeys(p for p in found if p and os.path.isfile(p)):
        why_not = _imports_as_nobody([*env, python])
        if why_not is None:
            return [*env, python]
        tried.append(f"{python}: {why_not}")
    # No Python of this version outside the closed directory (pyenv's 3.12 and 3.13 under
    # a 0700 /root): the interpreter's own tree, linked where nobody may read it.
    prefix = _readable_prefix()
    python = str(prefix / "bin" / version)
    command = [*env, f"LD_LIBRARY_PATH={prefix / 'lib'}", python]
    why_not = _imports_as_nobody(command)
    if why_not is None:
        return command
    tried.append(f"{python}: {why_not}")
    return (
        "uid 65534 cannot import verld from this checkout (a directory on the way, such "
        "as a 0700 home, is closed to other users), nor from a readable copy with any "
        f"{version} it may run: " + "; ".join(tried)
    )


def nobody_python() -> list[str]:
    """The command that runs this Python version as uid 65534 (after setpriv) with verld
    importable: this interpreter when nobody can use this checkout, else a Python nobody
    may run with a world-readable copy of verld and its dependencies on its path; skips,
    saying why, when there is neither. Worked out once per test process."""
    found = _nobody_python()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def rss_kib(pid: int) -> int:
    """A process's resident memory in KiB (/proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def settled_fd_count(d: DaemonProc) -> int:
    """The daemon's fd count once it stops changing (closed clients reaped)."""
    last = -1
    for _ in range(50):
        now = d.fd_count()
        if now == last:
            return now
        last = now
        time.sleep(0.05)
    return last


def children() -> set[int]:
    """Live child processes of this one (Linux /proc)."""
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                    out.add(int(entry))
    return out


def need(program: str, package: str | None = None) -> str:
    """The program's path (the sbin directories count); a skip when it is missing, a
    failure under CI=true (.ci/run installs it). `package`: the apt package(s) to name."""
    path = shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")
    if path is None:
        message = f"{program} is not installed" + (f" (apt: {package})" if package else "")
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
