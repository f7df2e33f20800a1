"""The pure core: decisions as plain functions over plain data; no I/O, clocks or randomness."""
