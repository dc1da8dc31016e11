"""Code written from the documents alone (DESIGN.md, docs/protocol.md): no verld imports."""
