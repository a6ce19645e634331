#!/usr/bin/env bash
# gpu-check.sh: verify the NCCL transport and GPU discovery on a machine with
# an NVIDIA GPU. Run from the repository root:  scripts/gpu-check.sh
# It builds collbench, shows the GPUs, runs the GPU tests of transport/nccl
# and gpu, runs `collbench --transport nccl` at world size 1 (and at the
# number of GPUs when there are several), and, when PyTorch is present,
# compares the call overhead of a small all-reduce through collkit with the
# same call from torch.distributed (NCCL backend) on the same GPU.
# Libraries: libnccl.so.2 and libcudart are found on the loader path or in
# pip's nvidia-nccl-cu12 / nvidia-cuda-runtime-cu12 (site-packages/nvidia/*/lib);
# set COLLKIT_NCCL_LIB / COLLKIT_CUDART_LIB to point at others.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/collkit-gpu-check}
mkdir -p "$out"
step() { printf '\n===== %s\n' "$*"; }

step "machine"
nvidia-smi || echo "nvidia-smi failed"
python3 -c 'import nvidia.nccl, os; print("pip nvidia-nccl at", os.path.dirname(nvidia.nccl.__path__[0]))' 2>/dev/null || true
ldconfig -p 2>/dev/null | grep -E 'libnccl|libcudart' || true

step "build"
go version
CGO_ENABLED=1 go build -tags nvml -o "$out/collbench" ./cmd/collbench || exit 1
CGO_ENABLED=0 go build ./... && echo "CGO_ENABLED=0 build ok"

step "collbench topo"
"$out/collbench" topo

step "go test transport/nccl, gpu (GPU tests run, none may skip for lack of NCCL)"
go test -tags nvml -count=1 -v -timeout 10m ./transport/nccl ./gpu 2>&1 | tee "$out/gotest.txt" | grep -E '^(=== RUN|--- |\s+\S+_test.go|ok|FAIL|PASS)'
grep -E -- '--- SKIP' "$out/gotest.txt" || true

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
for algo in ring tree; do
  step "collbench --transport nccl --np 1 --algo $algo"
  "$out/collbench" --transport nccl --np 1 --algo "$algo" -b 8 -e 64M -f 4 -n 20 -w 5 --json "$out/nccl-np1-$algo.json"
  echo "exit=$?"
done
for dt in float16 bfloat16 int64; do
  for op in sum avg max; do
    step "collbench --transport nccl --np 1 -d $dt -o $op"
    "$out/collbench" --transport nccl --np 1 -d "$dt" -o "$op" -b 8 -e 1M -f 8 -n 5
    echo "exit=$?"
  done
done
if [ "$ngpu" -gt 1 ]; then
  step "collbench --transport nccl --np $ngpu (one rank per GPU)"
  "$out/collbench" --transport nccl --np "$ngpu" -b 8 -e 256M -f 4 --json "$out/nccl-np$ngpu.json"
  echo "exit=$?"
else
  step "one GPU: NCCL refuses two ranks on one device; trying --np 2 to record its error"
  "$out/collbench" --transport nccl --np 2 --size 1K --connect-timeout 60s --timeout 30s
  echo "exit=$? (an error naming the duplicate GPU is expected)"
fi

step "call overhead: small all-reduce, collkit (nccl) vs PyTorch, same GPU"
for b in 8 1K 64K; do
  "$out/collbench" --transport nccl --np 1 --size "$b" -n 2000 -w 200 | grep -vE '^#' | tail -1
done
if python3 -c 'import torch, torch.distributed' 2>/dev/null; then
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 RANK=0 WORLD_SIZE=1 python3 - <<'PY'
import time, torch, torch.distributed as dist
dist.init_process_group("nccl", rank=0, world_size=1)
print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version(), torch.cuda.get_device_name(0))
for nbytes in (8, 1024, 65536):
    for label, host in (("device tensor", False), ("host tensor + copies (like collkit)", True)):
        n = nbytes // 4
        if host:
            h = torch.ones(n, dtype=torch.float32).pin_memory()
            def step():
                d = h.to("cuda", non_blocking=True); dist.all_reduce(d); h.copy_(d, non_blocking=True); torch.cuda.synchronize()
        else:
            d = torch.ones(n, dtype=torch.float32, device="cuda")
            def step():
                dist.all_reduce(d); torch.cuda.synchronize()
        for _ in range(200): step()
        t = time.perf_counter(); iters = 2000
        for _ in range(iters): step()
        us = (time.perf_counter() - t) / iters * 1e6
        print(f"torch all_reduce {nbytes:>6} B  {label:<36} {us:8.2f} us/call")
dist.destroy_process_group()
PY
else
  echo "PyTorch not installed: no comparison (pip install torch to get one)"
fi
step "done; files in $out"
