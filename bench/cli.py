"""``strongroom bench``: every benchmark that has a command."""

from __future__ import annotations

import click

from bench.gateway_overhead import gateway
from bench.serve import serve
from bench.throughput import throughput

bench = click.Group("bench", help="Benchmarks; each prints the peer beside ours and writes bench/results/.")
bench.add_command(gateway)
bench.add_command(serve)
bench.add_command(throughput)
