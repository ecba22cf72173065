"""The soak benchmark's parts (benchmarks/soak_bench.py): load, events, samples, comparison, chart."""
