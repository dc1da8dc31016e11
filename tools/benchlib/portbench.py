"""The port rounds: programs on verld's virtual serial ports against `direct` on the pty.

Strategy: `PortRunner` is the bench's `Runner` with one more path, `port`: verld
(window 8, as the `verld` path) with `ports:` entries, and programs that open a
port's link with pyserial and speak verl to it exactly as to the device. It joins
the same interleaved rounds (the order rotates with the other paths; `--ports`
alone, `PortOnlyRunner`: `direct` and `port`), so its ratio to `direct` is taken
within a round:

- `lat32`: one lock-step program on a port, the generators' blocking client
  (`lockstep`, kind `serial`: write(2) the request, block in read(2)), the
  same client `direct` runs on the device pty;
- `lat32_pyserial`: the same through pyserial's own API (`lockstep` kind
  `pyserial`), on the port and, for its ratio, on the device pty too.

In the paced phase (the sim's writes paced to `--baud`, as for the verld clients)
8 programs run on 8 ports, each its own process (`portworker`), lock-step, over
one common window; how busy the wire was is computed as for the verld clients
(calls/s × reply frame bytes / (baud/10)), and again from verld's own `bytes_rx`.

Every workload is checked against verld's own figures: `calls_ok` and each port's
`ok` (status.ports) must match the replies the programs got, with no call failed,
dropped or turned away as a bad frame. `section` moves the port figures out of the
rounds into the result's `ports` section.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from benchlib import portreport
from benchlib.meter import Spec, percentiles
from benchlib.procs import BenchError, CpuMark, LineReader, Verld
from benchlib.runner import BENCH, LAT32, MAX_PAYLOAD, Runner, Workload

PROGRAMS = 8  #: programs (each on its own port) in the paced phase
PACED_INFLIGHT = 1  #: calls each of them keeps outstanding (1: lock-step)
PACED = Workload(f"p{PROGRAMS}", PROGRAMS, PACED_INFLIGHT, LAT32.size)
PYSERIAL = "lat32_pyserial"  #: the lock-step workload through pyserial's API
_COUNTERS = ("calls", "calls_ok", "calls_failed", "timeouts", "stale", "bad_frames", "bytes_rx")
HELP = (
    "Part of every run (--quick: short): a lock-step program on a verld port against direct, "
    f"in the same rounds; {PROGRAMS} programs on {PROGRAMS} ports in the paced phase."
)


def runner(*, core: bool) -> type[Runner]:
    """The runner with the port path: beside the other paths (`core`), or alone."""
    return PortRunner if core else PortOnlyRunner


class PortRunner(Runner):
    """The bench's rounds with the `port` path beside the others."""

    only = False  #: `direct` and `port` alone (`--ports`)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.links = [str(self.tmp / f"ttyV{n}") for n in range(PROGRAMS)]
        self.baud = 0
        self._port_serial = 200

    @property
    def round_paths(self) -> list[str]:
        return ["direct", "port"] if self.only else [*self.paths, "port"]

    def run_path(self, path: str) -> dict[str, Any]:
        if path == "port":
            return self.port()
        if path != "direct":
            return super().run_path(path)
        out = self.direct((LAT32,)) if self.only else super().run_path(path)
        out[PYSERIAL] = self.measure("direct py", "pyserial", self.sim.link, LAT32, None)
        return out

    # --- verld with ports ---------------------------------------------------------------------

    def start_ports(self, count: int) -> Verld:
        self._port_serial += 1
        links = self.links[:count]
        return Verld(self.procs, self.tmp, self.sim.link, 8, self._port_serial, ports=links)

    def port(self) -> dict[str, Any]:
        """One lock-step program on a port: the blocking client, then pyserial's API."""
        daemon = self.start_ports(1)
        try:
            out: dict[str, Any] = {"ready_s": round(daemon.ready_s, 4)}
            clients = (("lat32", "serial", "port"), (PYSERIAL, "pyserial", "port py"))
            for name, kind, label in clients:
                before = daemon.status()
                out[name] = res = self.measure(label, kind, self.links[0], LAT32, daemon.pid)
                self._check(f"{label} lat32", before, daemon.status(), res["answered"], 1, res)
        finally:
            self.stop_verld(daemon)
        return out

    def _check(
        self,
        label: str,
        before: dict[str, Any],
        after: dict[str, Any],
        answered: int,
        ports: int,
        out: dict[str, Any],
    ) -> None:
        """verld's counts over a workload, against the replies its programs got."""
        c = {k: after["counters"][k] - before["counters"][k] for k in _COUNTERS}
        was = {p["link"]: p for p in before["ports"]}
        per_port = []
        for now in after["ports"][:ports]:
            old = was[now["link"]]
            entry = {k: now[k] - old[k] for k in ("calls", "ok", "dropped", "bad_frames")}
            failed = {k: n - old["failed"].get(k, 0) for k, n in now["failed"].items()}
            per_port.append({**entry, "failed": {k: n for k, n in failed.items() if n}})
        out["verld_counters"], out["verld_ports"] = c, per_port
        ok = sum(p["ok"] for p in per_port)
        if c["calls_ok"] != answered or ok != answered:
            self.errors.append(
                f"{label}: verld counted {c['calls_ok']} calls ok ({ok} on the ports), "
                f"the programs got {answered} replies"
            )
        lost = [p for p in per_port if p["failed"] or p["dropped"] or p["bad_frames"]]
        if lost:
            self.errors.append(f"{label}: calls failed, dropped or bad on a port: {lost}")

    # --- the paced phase ----------------------------------------------------------------------

    def paced(self, baud: int, rounds: int) -> dict[str, Any]:
        self.baud = baud
        return super().paced(baud, rounds)

    def paced_round(self) -> dict[str, Any]:
        one = {} if self.only else super().paced_round()
        one["port_" + PACED.name] = self.programs(PACED)
        return one

    def programs(self, wl: Workload) -> dict[str, Any]:
        """`wl.clients` programs, one per port, `wl.inflight` calls each, one common window."""
        label = f"port {wl.name}"
        daemon = self.start_ports(wl.clients)
        workers: list[subprocess.Popen[bytes]] = []
        try:
            before = daemon.status()
            readers = []
            with open(self.tmp / "port-workers.log", "ab") as log:
                for n, link in enumerate(self.links[: wl.clients]):
                    self._seed += 1
                    spec = Spec(
                        "serial", link, 1, wl.inflight, wl.size, 0, 0,
                        max_payload=MAX_PAYLOAD, seed=self._seed,
                    )  # fmt: skip
                    proc = self.procs.spawn(
                        [sys.executable, BENCH, "--port-worker", spec.to_json()],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                    )
                    workers.append(proc)
                    readers.append(LineReader(proc, f"port program {n + 1} ({label})"))
            for reader in readers:
                self._expect(reader, "READY", 30)
            self._await_open(daemon, wl.clients)
            t0 = time.monotonic_ns() + int(self.paced_timing.warmup * 1e9)
            t1 = t0 + int(self.paced_timing.duration * 1e9)
            for proc in workers:
                assert proc.stdin is not None
                proc.stdin.write(f"GO {t0} {t1}\n".encode())
                proc.stdin.flush()
            pids = [daemon.pid, self.sim.pid]
            start, at_start = self._mark(t0, pids, daemon)
            end, at_end = self._mark(t1, pids, daemon)
            results = [json.loads(self._expect(r, "RESULT ", 60)[7:]) for r in readers]
            for proc in workers:
                proc.wait(10)
            out = _combine(results)
            self._check(label, before, daemon.status(), out["answered"], wl.clients, out)
        except (BenchError, subprocess.TimeoutExpired) as exc:
            raise BenchError(f"{label}: {exc}\n{daemon.log_tail(5)}") from None
        finally:
            for proc in workers:
                self.procs.stop(proc)
            self.stop_verld(daemon)
        self._window_figures(out, (start, at_start), (end, at_end), daemon.pid)
        if out["errors"]:
            self.errors.append(
                f"{label}: {out['errors']} wrong or missing replies "
                f"({'; '.join(out['error_samples'][:3])})"
            )
        lat = out["latency_us"]
        self.say(
            f"  {label:<20} {out['rate']:>9.1f} calls/s  p50 {lat['p50'] or 0:>8.1f} us  "
            f"p99 {lat['p99'] or 0:>8.1f} us  bridge {out.get('bridge_cpu_percent', 0):.1f} %"
        )
        return out

    def _window_figures(
        self,
        out: dict[str, Any],
        start: tuple[CpuMark, dict[str, Any]],
        end: tuple[CpuMark, dict[str, Any]],
        bridge: int,
    ) -> None:
        """CPU of verld and the sim over the window, and the wire use from verld's bytes_rx."""
        (mark0, status0), (mark1, status1) = start, end
        out["window_s"] = round(mark1.t - mark0.t, 4)
        for role, pid in (("bridge", bridge), ("sim", self.sim.pid)):
            used = mark1.since(mark0, pid)
            if used is not None:
                out[f"{role}_cpu_us_per_call"] = round(used.sched * 1e6 / max(1, out["calls"]), 2)
                out[f"{role}_cpu_percent"] = round(used.sched * 100 / (mark1.t - mark0.t), 1)
        rx = status1["counters"]["bytes_rx"] - status0["counters"]["bytes_rx"]
        seconds = status1["_t"] - status0["_t"]
        out["verld_bytes_rx_per_s"] = round(rx / seconds, 1)
        if self.baud:
            out["utilisation_counters_percent"] = round(rx * 100 / (seconds * self.baud / 10), 2)

    def _await_open(self, daemon: Verld, count: int) -> None:
        """verld sees a program's open when it next polls the port (no event tells): wait."""
        deadline = time.monotonic() + 10
        while sum(p["open"] for p in daemon.status()["ports"]) < count:
            if time.monotonic() > deadline:
                raise BenchError(f"verld did not see {count} ports opened within 10 s")
            time.sleep(0.05)

    @staticmethod
    def _mark(at_ns: int, pids: list[int], daemon: Verld) -> tuple[CpuMark, dict[str, Any]]:
        """CPU counters and verld's status (with when it was taken) at `at_ns`."""
        delay = (at_ns - time.monotonic_ns()) / 1e9
        if delay > 0:
            time.sleep(delay)
        mark = CpuMark.take(pids)
        t_a = time.monotonic()
        status = daemon.status()
        status["_t"] = (t_a + time.monotonic()) / 2
        return mark, status


class PortOnlyRunner(PortRunner):
    """`--ports`: rounds of `direct` and `port` only, and only the programs when paced."""

    only = True


def _combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One workload from its programs': calls/s summed, latencies pooled, each one's too."""
    lat = sorted(x for r in results for x in r.get("latencies_ns", []))
    keys = ("calls", "sent", "answered", "errors", "missing", "stale", "bad_frames")
    out: dict[str, Any] = {k: sum(r.get(k, int(k == "errors")) for r in results) for k in keys}
    out["rate"] = round(sum(r.get("rate", 0.0) for r in results), 1)
    out["programs"] = len(results)
    out["inflight"] = results[0].get("inflight") if results else None
    out["error_samples"] = [s for r in results for s in r.get("error_samples", [])][:8]
    out["latency_us"] = percentiles(lat)
    out["per_program"] = [
        {k: r.get(k) for k in ("link", "calls", "rate", "sent", "errors")}
        | {"p50_us": r.get("latency_us", {}).get("p50")}
        for r in results
    ]
    return out


def section(rounds: list[dict[str, Any]], paced: dict[str, Any] | None) -> dict[str, Any]:
    """The result's `ports` section; the port figures leave `rounds` and `paced`.

    Each round keeps its `order`, its `port` path, and from the same round `direct`'s
    `lat32` (copied: it is the verl rounds' figure too) and `lat32_pyserial` and, in
    a full run, the `verld` API client's `lat32` (copied).
    """
    out_rounds = []
    for r in rounds:
        direct = r.get("direct") or {}
        entry: dict[str, Any] = {
            "order": r["order"],
            "direct": {"lat32": direct.get("lat32"), PYSERIAL: direct.pop(PYSERIAL, None)},
            "port": r.pop("port", None),
        }
        if "verld" in r:
            entry["verld"] = {"lat32": r["verld"].get("lat32")}
        out_rounds.append(entry)
    out_paced = None
    if paced is not None:
        out_paced = {k: v for k, v in paced.items() if k != "rounds"}
        out_paced["rounds"] = [
            {k: r.pop(k) for k in list(r) if k.startswith("port_")} for r in paced["rounds"]
        ]
    out = {
        "paths": ["direct", "port"],
        "programs": PROGRAMS,
        "paced_inflight": PACED_INFLIGHT,
        "rounds": out_rounds,
        "paced": out_paced,
    }
    out["summary"] = portreport.summarise(out)
    return out
