"""The link layer: the one connection to the device.

`link.py` the link state machine (no clock, no I/O), `transport.py` the fd of the
serial port or TCP socket (bytes in and out, back-pressure, hang-up), `serialport.py`
the serial port (opened exclusively, its modem lines and settings), `rfc2217.py` the
`rfc2217://` client link, and `port.py` the port by its kind (serial, `tcp://`,
`rfc2217://`, decided there once) opened as one `RawPort`, for the supervisor and for a
passthrough alike.
"""
