"""Code written from the documents alone (docs/protocol.md): no verld imports."""
