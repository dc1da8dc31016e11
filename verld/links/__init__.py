"""The link layer: the one connection to the device.

`link.py` the link state machine (no clock, no I/O), `transport.py` the fd of the
serial port or TCP socket (bytes in and out, back-pressure, hang-up), `opener.py`
opening a device's port by its kind (serial, `tcp://`, `rfc2217://`), and `rfc2217.py`
the `rfc2217://` client link.
"""
