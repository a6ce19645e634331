#!/usr/bin/env bash
# gpu-build.sh: build the GPU check kit, for a GPU machine that has no Go.
# Run from anywhere in the repository:
#
#   scripts/gpu-build.sh [DIR]     # DIR defaults to gpu-kit (git-ignored)
#
# DIR then holds everything the check needs, and nothing else (the
# binaries gzipped, to fit the 60 MiB below; run.sh unpacks them):
#   bin/collbench        CGO_ENABLED=0, stripped
#   bin/collkit.test     the package's tests (NCCL discovery, the hybrid
#                        all-reduce on a real GPU with COLLKIT_GPU_CHECK=1)
#   bin/gpu.test         package gpu's tests with NVML (cgo, -tags nvml)
#   bin/collbench-nvml   collbench with NVML (cgo, -tags nvml), for
#                        `collbench topo`'s GPU list
#   nccl/nccl.test       transport/nccl's tests, run from nccl/ so that the
#                        fake library's source in nccl/testdata is found
#   src/                 nccl_loop.c, nccl_min.h, torch_allreduce.py: built
#                        or run on the GPU machine
#   run.sh               scripts/gpu-run.sh: run it there (see that file)
#   BUILD                the commit and toolchain it was built from
# It fails when the folder would not fit the 60 MiB a carried folder may
# take, and checks here what it can: the C program compiles (gcc, own
# header), the Python parses, run.sh is shellcheck-clean if shellcheck is
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
kit=${1:-gpu-kit}
limit=$((60 << 20))
rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/nccl/testdata" "$kit/src"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

build() { # build WHAT COMMAND...: quiet unless it fails
  echo "building $1"
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log"
    echo "gpu-build: FAILED: $*" >&2
    exit 1
  fi
}

small=(-trimpath "-ldflags=-s -w")
build "collbench (CGO_ENABLED=0)" env CGO_ENABLED=0 go build "${small[@]}" -o "$kit/bin/collbench" ./cmd/collbench
build "transport/nccl tests" env CGO_ENABLED=0 go test -c "${small[@]}" -o "$kit/nccl/nccl.test" ./transport/nccl
build "package collkit tests" env CGO_ENABLED=0 go test -c "${small[@]}" -o "$kit/bin/collkit.test" .
# go-nvml needs cgo; the binary dlopens libnvidia-ml at run time and needs
# only the C library (glibc 2.34 or newer).
build "gpu tests (cgo, -tags nvml)" env CGO_ENABLED=1 go test -c -tags nvml "${small[@]}" -o "$kit/bin/gpu.test" ./gpu
build "collbench with NVML (cgo, -tags nvml)" env CGO_ENABLED=1 go build -tags nvml "${small[@]}" -o "$kit/bin/collbench-nvml" ./cmd/collbench

cp transport/nccl/testdata/fake_nccl_for_tests.c "$kit/nccl/testdata/"
cp scripts/gpu/nccl_loop.c scripts/gpu/nccl_min.h scripts/gpu/torch_allreduce.py "$kit/src/"
cp scripts/gpu-run.sh "$kit/run.sh"
chmod +x "$kit/run.sh"

{
  echo "collkit GPU check kit"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "branch: $(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)"
  echo "built:  $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) with $(go version | cut -d' ' -f3-)"
} >"$kit/BUILD"

echo "checking here"
if command -v gcc >/dev/null; then
  gcc -std=c11 -D_POSIX_C_SOURCE=199309L -Wall -Wextra -Werror -fsyntax-only -I scripts/gpu scripts/gpu/nccl_loop.c
  echo "  nccl_loop.c compiles against nccl_min.h"
else
  echo "  no gcc: nccl_loop.c not compiled here"
fi
if command -v python3 >/dev/null; then
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' scripts/gpu/torch_allreduce.py
  echo "  torch_allreduce.py parses"
fi
if command -v shellcheck >/dev/null; then
  shellcheck scripts/gpu-run.sh scripts/gpu-build.sh
  echo "  run.sh and gpu-build.sh are shellcheck-clean"
fi

# Go binaries halve under gzip; run.sh unpacks them before it starts.
gzip -9 "$kit"/bin/* "$kit"/nccl/nccl.test
size=$(du -sb "$kit" | cut -f1)
du -sh "$kit"/bin/* "$kit"/nccl/nccl.test.gz
printf 'gpu-build: %s is %d MiB (limit 60 MiB)\n' "$kit" $((size >> 20))
if [ "$size" -gt "$limit" ]; then
  echo "gpu-build: FAILED: $kit is $size bytes, over the 60 MiB a carried folder may take" >&2
  exit 1
fi
echo "gpu-build: ready; on the GPU machine run: $kit/run.sh   (results in \$OUT, or $kit/out)"
