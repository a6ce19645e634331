"""torch_allreduce.py: torch.distributed's all-reduce on one GPU, the
reference collkit's NCCL calls are measured against in gpu-kit/run.sh.

One process, world size 1, NCCL backend, a float32 CUDA tensor of each size;
each iteration is dist.all_reduce (sum, in place: torch has no other) and
torch.cuda.synchronize(), as collkit's call returns only when the
all-reduce is done. Prints one line per size:

  torch bytes=8 mode=in-place iters=2000 us_per_call=12.345 torch=2.11.0 nccl=2.27.3 wrong=0

and exits non-zero on any error or a wrong result (every input is 1.0, so
the sum over one rank is 1.0).

  python3 torch_allreduce.py BYTES:ITERS:WARMUP [BYTES:ITERS:WARMUP ...]
"""
import socket
import sys
import time


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    runs = []
    for arg in argv[1:]:
        try:
            nbytes, iters, warmup = (int(x) for x in arg.split(":"))
        except ValueError:
            print(f"torch_allreduce: {arg!r}: want BYTES:ITERS:WARMUP", file=sys.stderr)
            return 2
        if nbytes < 4 or nbytes % 4 or iters < 1 or warmup < 0:
            print(f"torch_allreduce: {arg!r}: BYTES a positive multiple of 4, ITERS >= 1", file=sys.stderr)
            return 2
        runs.append((nbytes, iters, warmup))

    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"torch_allreduce: cannot import torch with {sys.executable}: {e}", file=sys.stderr)
        return 1

    if not torch.cuda.is_available():
        print("torch_allreduce: torch.cuda.is_available() is False: no GPU for torch", file=sys.stderr)
        return 1
    torch.cuda.set_device(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    bad = 0
    for nbytes, iters, warmup in runs:
        t = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        for _ in range(warmup):
            dist.all_reduce(t)
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
            torch.cuda.synchronize()
        us = (time.perf_counter() - start) / iters * 1e6
        wrong = int((t != 1.0).sum().item())
        bad += wrong
        print(f"torch bytes={nbytes} mode=in-place iters={iters} us_per_call={us:.3f} torch={torch.__version__} nccl={nccl} wrong={wrong}",
              flush=True)
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
