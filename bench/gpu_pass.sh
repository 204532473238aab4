#!/usr/bin/env bash
# The GPU pass in one call, for whenever a CUDA machine is at hand:
#
#     bash bench/gpu_pass.sh            # tests on CUDA, then bench/gpu.py
#     bash bench/gpu_pass.sh --commit   # ... and commit the JSON it wrote
#
# 1. Checks that torch sees a CUDA device (else exits 2, writing nothing) and
#    that torch is at least the supported floor, 2.11 (README, "Which PyTorch").
# 2. Runs the unit tests on the GPU only (FIELD_GUIDE_TEST_DEVICES=cuda), the
#    site and browser tests left out; no test collected is a failure here.
# 3. Runs bench/gpu.py, which writes bench/results/gpu-<date>.json; the
#    performance page renders the newest such file (hooks/gpu_results.py).
# 4. With --commit, commits that file.
#
# GPU_PASS_OUT=<folder> also copies the JSON and the logs there.
# GPU_PASS_WORKERS=<n> sets pytest's workers (default 4); GPU_PASS_TESTS_S and
# GPU_PASS_BENCH_S cap the tests' and the benchmark's seconds (for a lease with a
# fixed budget: bench/gpu.py writes its file after every step, so a capped run
# keeps what it measured). GPU_PASS_UNTIL=<epoch seconds> ends the benchmark by
# then, whatever the tests left. GPU_PASS_WHEELS=<folder> first installs the
# wheels bench/gpu_wheels.sh gathered (for a machine with no package index)
# into a folder of their own, put first on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
FLOOR="2.11"

commit=0
for arg in "$@"; do
  case "$arg" in
    --commit) commit=1 ;;
    *) echo "gpu_pass: unknown argument $arg (only --commit)" >&2; exit 64 ;;
  esac
done

if [ -n "${GPU_PASS_WHEELS:-}" ]; then
  site="$(mktemp -d)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$GPU_PASS_WHEELS"/*.whl || exit 4
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  echo "gpu_pass: installed $(ls "$GPU_PASS_WHEELS"/*.whl | wc -l) wheels from $GPU_PASS_WHEELS"
fi
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_pass: no CUDA device is available to torch, so there is no GPU pass to run; nothing was written." >&2
  exit 2
fi
"$PYTHON" - "$FLOOR" <<'EOF' || exit 3
import sys, torch
floor = tuple(int(p) for p in sys.argv[1].split("."))
have = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
print(f"gpu_pass: torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
if have < floor:
    sys.exit(f"gpu_pass: torch {torch.__version__} is older than the supported floor {sys.argv[1]}")
EOF

logs="$(mktemp -d)"
echo "gpu_pass: unit tests on CUDA (log: $logs/tests.log)"
FIELD_GUIDE_TEST_DEVICES=cuda ${GPU_PASS_TESTS_S:+timeout -s INT -k 20 "$GPU_PASS_TESTS_S"} "$PYTHON" -m pytest -q -p no:cacheprovider -m "not site and not browser" \
  -n "${GPU_PASS_WORKERS:-4}" 2>&1 | tee "$logs/tests.log"
tests=${PIPESTATUS[0]}
if [ "$tests" -eq 5 ]; then
  echo "gpu_pass: pytest collected no test on CUDA: the device was not seen by the tests" >&2
fi

if [ -n "${GPU_PASS_UNTIL:-}" ]; then
  GPU_PASS_BENCH_S=$(( GPU_PASS_UNTIL - $(date +%s) ))
  [ "$GPU_PASS_BENCH_S" -gt 30 ] || GPU_PASS_BENCH_S=30
fi
before=$(ls bench/results/gpu-*.json 2>/dev/null | sort | tail -1)
echo "gpu_pass: bench/gpu.py (log: $logs/bench.log)"
PYTHONUNBUFFERED=1 ${GPU_PASS_BENCH_S:+timeout -k 20 "$GPU_PASS_BENCH_S"} "$PYTHON" bench/gpu.py 2>&1 | tee "$logs/bench.log"
bench=${PIPESTATUS[0]}
written=$(ls bench/results/gpu-*.json 2>/dev/null | sort | tail -1)

if [ -n "${GPU_PASS_OUT:-}" ]; then
  mkdir -p "$GPU_PASS_OUT"
  cp "$logs"/*.log "$GPU_PASS_OUT"/
  [ -n "$written" ] && cp "$written" "$GPU_PASS_OUT"/
fi
if [ "$commit" -eq 1 ] && [ -n "$written" ] && [ "$bench" -ne 2 ]; then
  git add "$written" && git commit -m "GPU figures: $(basename "$written") from bench/gpu.py" -- "$written"
fi
echo "gpu_pass: tests exit $tests, bench exit $bench, results ${written:-none}${before:+ (previous $before)}"
[ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
