"""Network ports (`network:`): the device served over TCP as raw bytes, telnet or
RFC 2217, to each connection its own replies (`shared`) or the real port itself
(`passthrough`). `front` is the `Front`, `entry` one listener and its connections,
`state` what an entry shares with them, `peer` a connection's wire (raw or telnet),
`conn` a shared connection, `passthrough` a passthrough connection and `relay` its
hold on the port, `comport` RFC 2217's server side, `access` who may connect."""
