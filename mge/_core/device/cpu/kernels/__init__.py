"""The CPU kernels, one file per op family; importing this package fills ``cpu/table.py``."""
