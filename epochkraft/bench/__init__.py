"""Benchmarks: figures printed as a table and JSON (``epochkraft bench``), never timed tests."""
