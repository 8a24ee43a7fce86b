#!/usr/bin/env bash
# `strongroom bench serve` against the real gateway + engine on this machine's CPU, tiny Qwen3 shape.
# Usage: bench/serve_cpu.sh [request-rate ...]   (writes bench/results/serve_cpu_rate<R>.json)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
$PY -c "from pathlib import Path; from bench.random_model import build_random_qwen3; build_random_qwen3(Path('$work/tiny-qwen3'), shape='tiny', dtype='float32')"
cat > "$work/s.toml" <<TOML
data_dir = "$work/data"
[server]
port = 18077
allow_token_id_prompts = true   # the benchmark sends token ids
[engine]
models = [{ name = "tiny-qwen3", path = "$work/tiny-qwen3" }]
num_threads = 1
[keys]
require_sealed = false
[quota.default]
requests_per_minute = 1000000
tokens_per_minute = 1000000000
concurrent_requests = 10000
max_tokens_ceiling = 4096
TOML
STRONGROOM_CONFIG="$work/s.toml" .venv/bin/strongroom serve > "$work/serve.log" 2>&1 &
for _ in $(seq 1 300); do curl -sf http://127.0.0.1:18077/readyz >/dev/null && break; sleep 0.2; done
STRONGROOM_CONFIG="$work/s.toml" .venv/bin/strongroom admin grant analyst tiny-qwen3 --action completion >/dev/null
TOKEN=$(STRONGROOM_CONFIG="$work/s.toml" .venv/bin/strongroom token --sub bench --role analyst --ttl 7200)
sleep 1.5  # the gateway polls the policy version every 0.5 s
for rate in "${@:-2 8}"; do
  .venv/bin/strongroom bench serve --base-url http://127.0.0.1:18077 --model tiny-qwen3 --api-key "$TOKEN" \
    --request-rate "$rate" --scale 0.05 --label strongroom-cpu --output "bench/results/serve_cpu_rate${rate}.json"
done
