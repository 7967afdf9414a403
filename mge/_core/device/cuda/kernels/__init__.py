"""CUDA C sources for the CUDA device's kernels, generated per op and dtype signature."""
