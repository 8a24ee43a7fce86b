#!/usr/bin/env bash
# Air-gapped install, checked for real: install from the wheelhouse inside a network namespace
# that has no route out (loopback only), start `strongroom serve`, run the commands its banner
# prints exactly as printed, and expect a completion and its audit record. Needs root (ip netns).
# Not in the test suite (about 2 minutes: the wheelhouse, then an install of ~500 MB of wheels).
#
#   scripts/airgap-check.sh                      # builds ./wheelhouse first (make wheelhouse)
#   WHEELHOUSE=/media/wheels scripts/airgap-check.sh   # an existing wheelhouse
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELHOUSE=${WHEELHOUSE:-}
if [[ -z "$WHEELHOUSE" ]]; then
    make wheelhouse
    WHEELHOUSE=$PWD/wheelhouse
fi
WHEELHOUSE=$(realpath "$WHEELHOUSE")
NS=strongroom-airgap-$$
WORK=$(mktemp -d /tmp/strongroom-airgap.XXXXXX)
PORT=18777
cleanup() {
    [[ -f "$WORK/serve.pid" ]] && kill "$(cat "$WORK/serve.pid")" 2>/dev/null || true
    ip netns delete "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add "$NS"
ip netns exec "$NS" ip link set lo up
in_ns() { ip netns exec "$NS" env -i PATH=/usr/bin:/bin HOME="$WORK" "$@"; }
if in_ns curl -s -m 3 -o /dev/null https://pypi.org; then
    echo "FAIL: the namespace reaches the network" >&2; exit 1
fi
echo "installing from $WHEELHOUSE with no route out"
# The Python that built the wheelhouse (its wheels and markers fit that version).
in_ns make -s install-offline WHEELHOUSE="$WHEELHOUSE" PREFIX="$WORK/venv" PYTHON="$(command -v python3)"
mkdir "$WORK/run"
(cd "$WORK/run" && in_ns "$WORK/venv/bin/strongroom" serve --port "$PORT" >"$WORK/serve.log" 2>&1 & echo $! >"$WORK/serve.pid")
for _ in $(seq 1 90); do
    in_ns curl -s -m 2 "http://127.0.0.1:$PORT/readyz" | grep -q '"ready":true' && break
    sleep 2
done
# The banner's commands, exactly as printed, in a new shell started elsewhere.
sed -n '/^  cd /,/max_tokens": 16}/p' "$WORK/serve.log" | sed 's/^  //' >"$WORK/banner.sh"
answer=$(in_ns bash -c "cd / && source $WORK/banner.sh")
echo "$answer" | grep -q '"finish_reason"' || { echo "FAIL: $answer" >&2; cat "$WORK/serve.log" >&2; exit 1; }
audit=$(in_ns bash -c "cd $WORK/run && $WORK/venv/bin/strongroom audit tail -n 1")
echo "$audit" | grep -q "inference allow subject=alice" || { echo "FAIL: audit: $audit" >&2; exit 1; }
echo "OK: installed offline, served, answered and audited with no network"
