"""The blocking client library against a real verld."""

from __future__ import annotations

import time

import pytest

from verld.client import Client, ClientError
from verld.testing import DaemonProc


class TestTimeout:
    @pytest.mark.timeout(20)
    def test_a_new_timeout_applies_to_an_open_connection(self, daemon: DaemonProc) -> None:
        """Setting `timeout` after connecting changes how long a read waits (event streams)."""
        with Client(daemon.socket, timeout=30.0) as c:
            c.timeout = 0.2
            start = time.monotonic()
            with pytest.raises(ClientError) as info:
                c.receive()  # nothing comes: the read gives up after the new timeout
            assert info.value.code == "timeout"
            assert time.monotonic() - start < 5
