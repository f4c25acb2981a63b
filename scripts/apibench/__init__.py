"""The REST API benchmark's parts (scripts/bench_api.py): the pure-read load."""
