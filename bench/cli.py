"""``strongroom bench``: every benchmark that has a command."""

from __future__ import annotations

import click

from bench.engine.throughput import throughput
from bench.gateway.overhead import gateway
from bench.serving.serve import serve

bench = click.Group("bench", help="Benchmarks; each prints the peer beside ours and writes bench/results/.")
bench.add_command(gateway)
bench.add_command(serve)
bench.add_command(throughput)
