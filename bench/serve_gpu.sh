#!/usr/bin/env bash
# `strongroom bench serve` (Poisson arrivals, streamed /v1/completions through the real gateway + engine)
# on an NVIDIA GPU, random-weight Qwen3-0.6B shape in bfloat16, at several request rates; then one
# table (TTFT, TPOT, output tok/s per rate) and the highest rate whose TPOT p99 stays under 50 ms.
# Runs with no network: dependencies the machine lacks come from the wheels in .whl/ (installed into
# /tmp/site when `import litestar` fails). From the repository root, or anywhere:
#   bench/serve_gpu.sh [request-rate ...]                       (default rates: 4 8 16 32 64)
# "inf" as a rate sends every request at once: the saturation figure to set against the offline one.
# Environment (defaults): PYTHON=python3 DEVICE=cuda DTYPE=bfloat16 SHAPE=qwen3-0.6b SCALE=1.0 (cpu: 0.05)
#   OUT=bench/results  NAME=serve_<shape>_<device>  PORT=18078  PEER=0 (1: HF transformers peer too)
#   BUDGET_S=450 (whole script; rates that would not fit are skipped)  RUN_TIMEOUT_S=110 (per rate)
#   READY_TIMEOUT_S=300  WARMUP_SCALE=0.25 (cpu: 0; a rate-inf pass first for CUDA graphs, Triton compiles)
#   MAX_NUM_SEQS (engine default)  TPOT_P99_MS=50  INSTALL=auto|1|0  SITE=/tmp/site
#   WORKERS: gateway processes ([server] workers); 4 when Redis is at hand, else 1 (one worker's
#   event loop is the bottleneck at saturation with every filter on). Above 1 the quotas need
#   Redis: REDIS_SERVER (a redis-server binary; LD_LIBRARY_PATH for its libraries) is started on
#   REDIS_PORT=16379, or REDIS_URL names a running one.
#   FILTERS="default off": the policies served, one server each, in this order (default: the
#   product's default policy, every control on; off: every detector off), side by side in the table.
#   OFFLINE=1: then the same workload through the engine alone (`bench.engine.throughput`, ours,
#   LLM's engine on the same checkpoint), its output tok/s beside every row (0: skip it).
# Writes $OUT/<NAME>_filters-<F>_rate<R>.json per policy and rate (and its _stages.json: the gateway's
# stage and engine histograms over that run, from /metrics), $OUT/<NAME>_filters-<F>_server.log,
# $OUT/<NAME>_offline.json; prints the sweep table.
# CPU smoke test: DEVICE=cpu SHAPE=tiny DTYPE=float32 PYTHON=.venv/bin/python bench/serve_gpu.sh 2
set -euo pipefail
cd "$(dirname "$0")/.."
start_s=$SECONDS
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bfloat16}
SHAPE=${SHAPE:-qwen3-0.6b}
cuda=$([ "${DEVICE%%:*}" = cuda ] && echo 1 || echo 0)
SCALE=${SCALE:-$([ $cuda = 1 ] && echo 1.0 || echo 0.05)}
OUT=${OUT:-bench/results}
NAME=${NAME:-serve_${SHAPE}_${DEVICE%%:*}}
PORT=${PORT:-18078}
BUDGET_S=${BUDGET_S:-450}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-110}
READY_TIMEOUT_S=${READY_TIMEOUT_S:-300}
WARMUP_SCALE=${WARMUP_SCALE:-$([ $cuda = 1 ] && echo 0.25 || echo 0)}
TPOT_P99_MS=${TPOT_P99_MS:-50}
SITE=${SITE:-/tmp/site}
rates=("$@"); [ ${#rates[@]} -gt 0 ] || rates=(4 8 16 32 64)
mkdir -p "$OUT"
log() { echo "[serve_gpu $((SECONDS - start_s))s] $*"; }
# Kernels compiled while a rate is timed show up as TTFT tails; the count of Triton's on-disk cache
# entries before and after each run says whether any were.
triton_cache=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
kernels() { find "$triton_cache" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }

install=${INSTALL:-auto}
if [ "$install" = auto ]; then
  if "$PY" -c "import litestar" 2>/dev/null; then install=0; else install=1; fi
fi
if [ "$install" = 1 ]; then
  log "installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
SR=("$PY" -m strongroom)  # the package entry point; the supervisor starts the engine the same way

shm=/dev/shm  # the checkpoint (1.2 GB for qwen3-0.6b in bf16) lives in memory; /tmp if /dev/shm is small
if ! [ -w "$shm" ] || [ "$(df -Pk "$shm" | awk 'NR == 2 {print $4}')" -lt 4000000 ]; then shm=/tmp; fi
model=$(mktemp -d "$shm/strongroom-model.XXXXXX")
work=$(mktemp -d /tmp/strongroom-serve.XXXXXX)
server_pid=
redis_pid=
stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    # SIGINT, not SIGTERM: uvicorn re-raises a captured SIGTERM with the default handler, which
    # ends the gateway before its supervisor stops the engine child (left holding the GPU).
    engine_pids=$(cat /proc/"$server_pid"/task/*/children 2>/dev/null || true)
    kill -INT "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    # shellcheck disable=SC2086  # one pid per word
    kill -KILL "$server_pid" $engine_pids 2>/dev/null || true
  fi
  server_pid=
}
cleanup() {
  stop_server
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
  rm -rf "$model" "$work"
}
trap cleanup EXIT

log "building a random $SHAPE checkpoint ($DTYPE) in $model"
"$PY" -c "
from pathlib import Path
import torch
from bench.engine.random_model import build_random_qwen3
device = '$DEVICE' if '$DEVICE'.startswith('cuda') and torch.cuda.is_available() else 'cpu'
build_random_qwen3(Path('$model'), shape='$SHAPE', dtype='$DTYPE', device=device)
"
engine_extra=""
[ -n "${MAX_NUM_SEQS:-}" ] && engine_extra="max_num_seqs = $MAX_NUM_SEQS"
printf 'version = 1\ndefault_action = "off"\non_error = "block"\n' > "$work/filters-off.toml"
WORKERS=${WORKERS:-$([ -n "${REDIS_SERVER:-}${REDIS_URL:-}" ] && echo 4 || echo 1)}
redis_line=""
if [ "$WORKERS" -gt 1 ]; then
  if [ -z "${REDIS_URL:-}" ]; then
    [ -n "${REDIS_SERVER:-}" ] || { log "WORKERS > 1 needs REDIS_SERVER or REDIS_URL"; exit 2; }
    "$REDIS_SERVER" --port "${REDIS_PORT:-16379}" --bind 127.0.0.1 --save "" --appendonly no \
      > "$work/redis.log" 2>&1 &
    redis_pid=$!
    REDIS_URL="redis://127.0.0.1:${REDIS_PORT:-16379}/0"
    sleep 0.5
  fi
  redis_line="redis_url = \"$REDIS_URL\""
fi
FILTERS=${FILTERS:-default off}
for filters in $FILTERS; do
  case $filters in default|off) ;; *) log "FILTERS takes default and/or off, not '$filters'"; exit 2;; esac
done

write_config() {  # write_config <filters>: the server's settings, a data directory of its own
  local filters_section=""
  if [ "$1" = off ]; then
    filters_section="[filters]
policy_file = \"$work/filters-off.toml\""
  fi
  cat > "$work/s.toml" <<TOML
data_dir = "$work/data-$1"
$redis_line
[server]
port = $PORT
workers = $WORKERS
allow_token_id_prompts = true   # the benchmark sends token ids
engine_start_timeout_s = $READY_TIMEOUT_S
[engine]
models = [{ name = "bench-qwen3", path = "$model", max_model_len = 4096 }]
device = "$DEVICE"
dtype = "$DTYPE"
$engine_extra
[keys]
require_sealed = false
[quota.default]
requests_per_minute = 1000000
tokens_per_minute = 1000000000
concurrent_requests = 10000
max_tokens_ceiling = 4096
$filters_section
TOML
}
export STRONGROOM_CONFIG="$work/s.toml"
unset STRONGROOM_REDIS_URL STRONGROOM_DATA_DIR

start_server() {  # start_server <log>: serve, wait until ready, grant the model, make a token
  log "starting the server on 127.0.0.1:$PORT (log: $1)"
  "${SR[@]}" serve > "$1" 2>&1 &
  server_pid=$!
  local ready=0
  for _ in $(seq 1 $((READY_TIMEOUT_S * 2))); do
    if "$PY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/readyz', timeout=2)" 2>/dev/null; then
      ready=1; break
    fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  if [ $ready != 1 ]; then
    log "the server did not become ready; its log:"; tail -n 60 "$1"; return 1
  fi
  log "server ready; Triton kernels in the cache: $(kernels)"
  "${SR[@]}" admin grant analyst bench-qwen3 --action completion >/dev/null
  TOKEN=$("${SR[@]}" token --sub bench --role analyst --ttl 7200)
  sleep 1.5  # the gateway polls the policy version every 0.5 s
}

scrape() {  # scrape <file>: the gateway's /metrics (open on loopback)
  "$PY" -c "import urllib.request as u, sys; open(sys.argv[1], 'wb').write(u.urlopen('http://127.0.0.1:$PORT/metrics', timeout=10).read())" "$1" 2>/dev/null
}

bench() {  # bench <seconds> <rate> <scale> <output> <label> [more bench serve options]
  local limit=$1 rate=$2 scale=$3 output=$4 label=$5; shift 5
  timeout -k 10 "$limit" "${SR[@]}" bench serve --base-url "http://127.0.0.1:$PORT" --model bench-qwen3 \
    --api-key "$TOKEN" --request-rate "$rate" --scale "$scale" --label "$label" \
    --output "$output" "$@"
}

peer_args=()
if [ "${PEER:-0}" = 1 ]; then
  peer_args=(--peer hf --peer-model-dir "$model" --peer-device "$DEVICE" --peer-mode cb)
fi
results=()
for filters in $FILTERS; do
  label="strongroom-${DEVICE%%:*}-filters-$filters"
  server_log="$OUT/${NAME}_filters-${filters}_server.log"
  write_config "$filters"
  start_server "$server_log" || exit 1
  if [ "$WARMUP_SCALE" != 0 ]; then
    log "warm-up: scale $WARMUP_SCALE, all at once (CUDA graph buckets, Triton compiles; not reported)"
    bench 120 inf "$WARMUP_SCALE" "$work/warmup.json" "$label" >/dev/null || log "warm-up failed or timed out (rc $?)"
    log "Triton kernels in the cache after the warm-up: $(kernels)"
  fi
  for rate in "${rates[@]}"; do
    left=$((BUDGET_S - (SECONDS - start_s) - 15))
    limit=$((left < RUN_TIMEOUT_S ? left : RUN_TIMEOUT_S))
    if [ "$limit" -lt 20 ]; then log "$filters, rate $rate skipped: the ${BUDGET_S} s budget is spent"; continue; fi
    output="$OUT/${NAME}_filters-${filters}_rate${rate}.json"
    rm -f "$output"
    log "filters $filters, rate $rate req/s, scale $SCALE (at most $limit s)"
    before=$(kernels)
    scrape "$work/metrics-before.txt"
    if bench "$limit" "$rate" "$SCALE" "$output" "$label" "${peer_args[@]}"; then
      results+=("$output")
    else
      log "filters $filters, rate $rate failed or ran past $limit s (rc $?); no result"
    fi
    log "Triton kernels compiled during that run: $(($(kernels) - before)) (cache: $triton_cache)"
    sleep 1.2  # the other workers publish their series once a second
    if scrape "$work/metrics-after.txt"; then
      log "where that run's time went (gateway stages and engine histograms, mean per observation):"
      "$PY" -m bench.serving.stage_delta "$work/metrics-before.txt" "$work/metrics-after.txt" \
        --output "${output%.json}_stages.json" || true
    fi
  done
  stop_server  # the engine gives the GPU back before the next server or the offline run
done

offline_args=()
if [ "${OFFLINE:-1}" = 1 ]; then
  left=$((BUDGET_S - (SECONDS - start_s) - 5))
  offline="$OUT/${NAME}_offline.json"
  rm -f "$offline"
  if [ "$left" -lt 20 ]; then
    log "offline run skipped: the ${BUDGET_S} s budget is spent"
  else
    log "offline: the same workload through the engine alone (at most $left s)"
    if timeout -k 10 "$left" "$PY" -m bench.engine.throughput --model "$model" --device "$DEVICE" \
        --dtype "$DTYPE" --scale "$SCALE" --systems ours --output "$offline" > "$work/offline.log" 2>&1; then
      offline_args=(--offline "$offline")
    else
      log "offline run failed or ran past $left s; its log:"; tail -n 20 "$work/offline.log"
    fi
  fi
fi

log "done; server logs in $OUT/${NAME}_filters-*_server.log"
if [ ${#results[@]} -eq 0 ]; then log "no results"; exit 1; fi
"$PY" -m bench.serving.report --tpot-p99-ms "$TPOT_P99_MS" "${offline_args[@]}" "${results[@]}"
