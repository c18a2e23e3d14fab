"""`make bench`: the kit measured against its alternatives (see docs/benchmarks.md)."""
