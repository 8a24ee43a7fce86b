#!/usr/bin/env bash
# `strongroom bench serve` against the real gateway + engine on this machine's CPU, tiny Qwen3 shape,
# then the identical workload through HF transformers' continuous batching (bench.serving.hf_server) on the
# same checkpoint in the same run: float32, one torch thread and 2048 tokens per step on both sides.
# Usage: [SCALE=0.05] bench/serving/serve_cpu.sh [request-rate ...]
#   writes bench/results/serve_cpu_vs_hf_rate<R>.json (serve_cpu_vs_hf_scale<S>_rate<R>.json for another SCALE)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
$PY -c "from pathlib import Path; from bench.engine.random_model import build_random_qwen3; build_random_qwen3(Path('$work/tiny-qwen3'), shape='tiny', dtype='float32')"
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
scale=${SCALE:-0.05}
suffix=$([ "$scale" = 0.05 ] && echo "" || echo "_scale${scale}")
rates=("$@"); [ ${#rates[@]} -gt 0 ] || rates=(2 8)
for rate in "${rates[@]}"; do
  .venv/bin/strongroom bench serve --base-url http://127.0.0.1:18077 --model tiny-qwen3 --api-key "$TOKEN" \
    --request-rate "$rate" --scale "$scale" --label strongroom-cpu \
    --peer hf --peer-model-dir "$work/tiny-qwen3" --peer-device cpu --peer-mode cb \
    --peer-arg=--num-threads=1 --peer-arg=--num-blocks=64 --peer-arg=--max-batch-tokens=2048 \
    --output "bench/results/serve_cpu_vs_hf${suffix}_rate${rate}.json"
done
