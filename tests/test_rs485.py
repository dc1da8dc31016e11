"""`device.rs485`: the kernel's RS-485 mode on a serial port, through pyserial's `rs485_mode`.

Strategy: the settings' way to pyserial is checked with `open_serial`'s own `make`
hook given a recorder (a pty cannot take TIOCSRS485, and no RS-485 UART is here);
what a refusing driver does is checked on a real pty, with verld as a process; the
config rules with `parse_config`.
"""

from __future__ import annotations

import os
import pty
from pathlib import Path
from typing import Any, ClassVar

import pytest
import serial

from verld.config import DeviceConfig, Rs485Config, parse_config
from verld.errors import ConfigError, OpenError
from verld.links.serialport import open_serial
from verld.testing import DaemonProc, SimProc, wait_for, write_config


class Recording(serial.Serial):
    """A pyserial Serial that opens the pty for real and records the RS-485 settings."""

    seen: ClassVar[list[Any]] = []

    @property
    def rs485_mode(self) -> Any:
        return self.seen[-1] if self.seen else None

    @rs485_mode.setter
    def rs485_mode(self, settings: Any) -> None:
        self.seen.append(settings)


def test_the_settings_reach_pyserial() -> None:
    """rs485's four settings reach pyserial's rs485_mode as given."""
    master, slave = pty.openpty()
    try:
        rs = Rs485Config(
            rts_level_for_tx=False,
            rts_level_for_rx=True,
            delay_before_tx=0.002,
            delay_before_rx=0.001,
        )
        ser = open_serial(DeviceConfig(rs485=rs), os.ttyname(slave), make=Recording)
        ser.close()
    finally:
        os.close(slave)
        os.close(master)
    got = Recording.seen[-1]
    assert (got.rts_level_for_tx, got.rts_level_for_rx) == (False, True)
    assert (got.delay_before_tx, got.delay_before_rx) == (0.002, 0.001)


def test_a_driver_that_refuses_fails_the_open_with_the_reason() -> None:
    """On a pty (no RS-485 in its driver) the open fails: "RS-485 mode not supported by"."""
    master, slave = pty.openpty()
    path = os.ttyname(slave)
    try:
        with pytest.raises(OpenError, match=f"RS-485 mode not supported by {path}"):
            open_serial(DeviceConfig(rs485=Rs485Config()), path)
    finally:
        os.close(slave)
        os.close(master)


@pytest.mark.timeout(30)
def test_a_pty_with_rs485_never_comes_up_and_says_why(tmp_path: Path) -> None:
    """verld on a pty with rs485 set stays down, retrying, and status says why."""
    sim = SimProc(tmp_path, codec="line")
    try:
        cfg = write_config(tmp_path, sim.link, {"device": {"codec": "line", "rs485": {}}})
        d = DaemonProc(cfg, wait_up=False)
        try:
            wait_for(lambda: "RS-485 mode not supported" in d.status()["link"]["reason"])
            assert d.status()["link"]["state"] in ("down", "connecting")
            assert d.proc.poll() is None
        finally:
            d.stop()
    finally:
        sim.stop()


@pytest.mark.parametrize("port", ["tcp://10.0.0.2:4001", "rfc2217://10.0.0.2:4001", "sim"])
def test_check_config_refuses_rs485_off_a_serial_port(port: str) -> None:
    """rs485 on tcp://, rfc2217:// or sim is an error naming the port."""
    with pytest.raises(ConfigError, match="RS-485 mode is set on a serial port"):
        parse_config(f'device: {{port: "{port}", rs485: {{}}}}\n')


def test_rs485_keys_are_checked() -> None:
    """An unknown rs485 key and a negative delay are both reported."""
    text = "device:\n  port: /dev/ttyS1\n  rs485:\n    delay_before_tx: -1\n    rts: true\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert "device.rs485.delay_before_tx" in str(info.value)
    assert "device.rs485.rts: unknown key" in str(info.value)


def test_rs485_defaults() -> None:
    """rs485: {} is RTS high for sending, low for receiving, no delays."""
    rs = parse_config("device: {port: /dev/ttyS1, rs485: {}}\n").device.rs485
    assert rs == Rs485Config(True, False, 0.0, 0.0)
