"""Developer tooling: mutation testing (`python -m tools.mutation`, `make mutation`) and the speed
benchmark (`python -m tools.benchmark`, `make bench`); the research scripts are in `experiments/`."""
