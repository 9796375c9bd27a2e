"""Statistics on a pair's history, pure (numbers in, numbers out; no Django): changes.py finds step changes,
synthetic.py makes histories with known steps to measure it (tests and `make bench-changes`)."""
