"""Virtual serial ports: programs that only know a tty reach the device through a pty.

`front.PortsFront` is the front (every `ports:` entry); `port.VirtualPort` one port,
a pty edge (`pty.PtyPort`) around the program behind it (`verld.fronts.stream`).
Nothing is imported here, so importing a submodule loads only what it needs.
"""
