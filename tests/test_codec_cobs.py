"""COBS: the vectors both ways, invalid encodings, round-trip properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from verld.codec import cobs

RUNS = [bytes([fill]) * size for fill in (0x00, 0x07, 0xFF) for size in (253, 254, 255, 508, 509)]


class TestVectors:
    def test_encode_examples(self, verl_vectors: dict[str, Any]) -> None:
        """encode reproduces every cobs_examples encoding byte for byte."""
        for case in verl_vectors["cobs_examples"]:
            decoded = bytes.fromhex(case["decoded_hex"])
            assert cobs.encode(decoded).hex() == case["encoded_hex"], case["decoded_hex"]

    def test_decode_examples(self, verl_vectors: dict[str, Any]) -> None:
        """decode turns every cobs_examples encoding back into its data."""
        for case in verl_vectors["cobs_examples"]:
            encoded = bytes.fromhex(case["encoded_hex"])
            assert cobs.decode(encoded).hex() == case["decoded_hex"], case["encoded_hex"]

    def test_decode_only(self, verl_vectors: dict[str, Any]) -> None:
        """decode accepts the cobs_decode_only forms an encoder need not produce."""
        assert verl_vectors["cobs_decode_only"]
        for case in verl_vectors["cobs_decode_only"]:
            encoded = bytes.fromhex(case["encoded_hex"])
            assert cobs.decode(encoded).hex() == case["decoded_hex"], case["note"]


class TestFullRuns:
    def test_trailing_full_run_gets_final_code(self) -> None:
        """Data ending in a full 254-byte run is encoded with the final 01 code."""
        data = bytes(range(1, 255)) * 2
        assert cobs.encode(data) == b"\xff" + data[:254] + b"\xff" + data[254:] + b"\x01"

    def test_trailing_full_run_without_final_code(self) -> None:
        """decode accepts a trailing full run without the final 01 code."""
        data = b"\x00" + bytes(range(1, 255))
        assert cobs.decode(b"\x01\xff" + data[1:]) == data

    def test_full_run_before_zero(self) -> None:
        """A full run followed by a zero needs an extra 01 block for that zero."""
        data = b"\x07" * 254 + b"\x00\x08"
        assert cobs.encode(data) == b"\xff" + b"\x07" * 254 + b"\x01\x02\x08"
        assert cobs.decode(cobs.encode(data)) == data


class TestInvalid:
    @pytest.mark.parametrize(
        "encoded",
        [
            b"",  # the shortest encoding is 01
            b"\x00",
            b"\x02\x11\x00",  # zero inside
            b"\x00\x01",
            b"\x02",  # code wants one byte more
            b"\x05\x11\x22\x33",
            b"\x02\x11\x03\x22",  # second code runs past the end
            b"\xff" + b"\x01" * 100,
        ],
    )
    def test_raises_value_error(self, encoded: bytes) -> None:
        """decode raises ValueError on an encoding that is not valid COBS."""
        with pytest.raises(ValueError, match="COBS"):
            cobs.decode(encoded)

    @settings(max_examples=200)
    @given(st.binary(max_size=600))
    def test_arbitrary_input(self, encoded: bytes) -> None:
        """decode of arbitrary bytes returns bytes or raises ValueError, nothing else."""
        try:
            decoded = cobs.decode(encoded)
        except ValueError:
            return
        assert isinstance(decoded, bytes)


class TestProperties:
    @settings(max_examples=300)
    @given(st.binary(max_size=1200) | st.sampled_from(RUNS))
    @example(b"")
    @example(b"\x00" * 1000)
    @example(b"\xff" * 1000)
    def test_round_trip(self, data: bytes) -> None:
        """decode(encode(x)) == x, the encoding holds no zero byte and respects the bound."""
        encoded = cobs.encode(data)
        assert 0 not in encoded
        assert len(encoded) <= cobs.max_encoded_length(len(data))
        assert cobs.decode(encoded) == data


class TestNative:
    def test_native_extension_is_used_where_installed(self) -> None:
        """With the `fast` extra's cobs package installed, its C extension does the work."""
        import importlib.util

        assert (importlib.util.find_spec("cobs") is not None) == cobs.NATIVE

    @given(st.binary(max_size=1200))
    @example(bytes(range(1, 255)))
    @example(b"\x00" + bytes(range(1, 255)) * 2)
    @settings(max_examples=400)
    def test_encode_matches_the_python_encoder(self, data: bytes) -> None:
        """encode (C where installed) gives this module's own bytes for any data."""
        assert cobs.encode(data) == cobs.py_encode(data)
        if len(data) < 254:
            assert cobs.encode_short(data) == cobs.py_encode(data)

    @given(st.binary(min_size=1, max_size=1200))
    @example(b"\x01\xff" + bytes(range(1, 255)))
    @settings(max_examples=400)
    def test_decode_agrees_with_the_python_decoder(self, encoded: bytes) -> None:
        """decode and decode_nonempty accept and refuse exactly what the Python decoder does."""
        try:
            expected: bytes | None = cobs.py_decode(encoded)
        except ValueError:
            expected = None
        for decode in (cobs.decode, cobs.decode_nonempty):
            try:
                got: bytes | None = decode(encoded)
            except cobs.DECODE_ERRORS:
                got = None
            assert got == expected
