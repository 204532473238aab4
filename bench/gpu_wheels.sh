#!/usr/bin/env bash
# Wheels for the GPU pass on a machine that cannot reach a package index.
#
#     bash bench/gpu_wheels.sh <folder> [python version, default 3.12]
#
# Run it where pip can download; copy <folder> to the GPU machine; there,
# GPU_PASS_WHEELS=<folder> bash bench/gpu_pass.sh installs the wheels into a
# folder of its own (put first on PYTHONPATH) before the tests. The machine's
# torch, Triton, NumPy and NVIDIA libraries are kept: the wheels are the pinned
# test oracle (requirements-extra.txt: transformers and its hub), the pinned
# test tools, MkDocs (which a few unit tests import) and what they need, for
# CPython on x86-64 Linux.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: bash bench/gpu_wheels.sh <folder> [python version]}"
version="${2:-3.12}"
pins=$(grep -hE '^(transformers|tokenizers|safetensors|huggingface-hub|hypothesis|pytest|pytest-xdist|filelock|mkdocs)==' \
  requirements.txt requirements-docs.txt requirements-extra.txt)
platforms=()
for tag in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 manylinux_2_28 \
           manylinux_2_31 manylinux_2_34; do
  platforms+=(--platform "${tag}_x86_64")
done
# shellcheck disable=SC2086
python3 -m pip download -q -d "$out" --only-binary=:all: --implementation cp --python-version "$version" \
  "${platforms[@]}" --platform any $pins
rm -f "$out"/numpy-*.whl "$out"/torch-*.whl "$out"/triton-*.whl "$out"/nvidia_*.whl
echo "gpu_wheels: $(ls "$out"/*.whl | wc -l) wheels, $(du -sh "$out" | cut -f1), in $out"
