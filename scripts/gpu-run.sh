#!/usr/bin/env bash
# gpu-run.sh: the GPU check of collkit's NCCL transport, run on a machine
# with an NVIDIA GPU and no Go. scripts/gpu-build.sh copies it to
# gpu-kit/run.sh beside the binaries it built; run it from anywhere:
#
#   gpu-kit/run.sh            # results in $OUT, or gpu-kit/out
#
# Steps: the machine; library discovery (collkit's own search with no
# variables set, and what this script finds in the pip wheels); the NCCL
# test binaries (transport/nccl, gpu, the package's GPU tests) with -test.v;
# collbench on device memory for every dtype and op with exact checks; the
# hybrid run (NCCL inside two simulated nodes, TCP between); then an 8-byte
# and a 256 MiB all-reduce through collkit (collbench), torch.distributed
# (NCCL backend, world size 1) and a C loop of ncclAllReduce +
# cudaStreamSynchronize built here, in alternating rounds, and a summary
# table with the targets.
#
# Every step prints PASS, FAIL or NOT RUN with the reason; the exit status
# is 0 only when every step passed and every target was met.
#
# Environment: OUT (results folder), ROUNDS (comparison rounds, default 3),
# PYTHON (the python with torch; default /opt/torch/.venv/bin/python3, then
# python3 on PATH), COLLKIT_NCCL_LIB / COLLKIT_CUDA_LIB (override
# collkit's search for libnccl.so.2 and the driver's libcuda.so.1; the
# discovery step first runs without them). collkit needs only libnccl and
# the driver; the C loop also needs the CUDA runtime (libcudart) of the
# pip wheel nvidia-cuda-runtime (nvidia/cu13/lib).
set -u
kit=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$kit/out}
rounds=${ROUNDS:-3}
mkdir -p "$out" || { echo "FAIL: cannot create the results folder $out"; exit 1; }
work=$(mktemp -d) || { echo "FAIL: mktemp -d"; exit 1; }
trap 'rm -rf "$work"' EXIT
exec > >(tee "$out/run.log") 2>&1
# The package's GPU tests fail, never skip, without NCCL or a GPU.
export COLLKIT_GPU_CHECK=1

results=()
failed=0
pass() { results+=("PASS     $*"); echo "PASS: $*"; }
fail() { results+=("FAIL     $*"); echo "FAIL: $*"; failed=1; }
notrun() { results+=("NOT RUN  $*"); echo "NOT RUN: $*"; failed=1; }
step() { printf '\n===== %s\n' "$*"; }

summary() {
  step "summary"
  printf '%s\n' "${results[@]}" | tee "$out/summary.txt"
  if [ -f "$out/compare.txt" ]; then cat "$out/compare.txt"; fi
  if [ "$failed" -ne 0 ]; then
    echo "RESULT: FAIL (see the lines above; full log $out/run.log)"
  else
    echo "RESULT: PASS (full log $out/run.log)"
  fi
  echo "results in $out"
}

step "kit"
# scripts/gpu-build.sh gzips the binaries to fit a carried folder.
for z in "$kit"/bin/*.gz "$kit"/nccl/*.gz; do
  if [ -f "$z" ]; then gunzip -f "$z" && chmod +x "${z%.gz}"; fi
done
cat "$kit/BUILD" 2>/dev/null || echo "(no BUILD file: was this folder made by scripts/gpu-build.sh?)"
for f in bin/collbench bin/collbench-nvml bin/collkit.test bin/gpu.test nccl/nccl.test src/nccl_loop.c src/nccl_min.h src/torch_allreduce.py; do
  if [ ! -f "$kit/$f" ]; then
    fail "kit: $kit/$f is missing; rebuild the kit with scripts/gpu-build.sh"
  fi
done
cb=$kit/bin/collbench
if [ "$failed" -ne 0 ]; then summary; exit 1; fi
"$cb" --version

step "machine"
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  if nvidia-smi; then
    gpu=$(nvidia-smi -L 2>/dev/null | head -1)
  else
    echo "nvidia-smi failed (exit $?): no usable driver or GPU"
  fi
elif [ -e /dev/nvidiactl ]; then
  gpu="a device node /dev/nvidiactl (no nvidia-smi to name the GPU)"
else
  echo "no nvidia-smi on PATH and no /dev/nvidiactl"
fi
if [ -n "$gpu" ]; then
  pass "GPU: $gpu"
else
  fail "no GPU: nvidia-smi found none (or is missing) and /dev/nvidiactl does not exist"
fi
uname -a
nproc

step "library discovery"
# The pythons whose site-packages may hold the nvidia wheels.
pythons=()
for p in "${PYTHON:-}" /opt/torch/.venv/bin/python3 "$(command -v python3 2>/dev/null)"; do
  if [ -n "$p" ] && [ -x "$p" ]; then
    case " ${pythons[*]:-} " in *" $p "*) ;; *) pythons+=("$p") ;; esac
  fi
done
sites=()
for p in "${pythons[@]}"; do
  while IFS= read -r d; do
    if [ -d "$d" ]; then
      case " ${sites[*]:-} " in *" $d "*) ;; *) sites+=("$d") ;; esac
    fi
  done < <("$p" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null)
done
declare -A looked # by variable: the files tried
pick() { # pick VAR FILE...: VAR, when empty, becomes the first FILE that exists
  local var=$1 f
  shift
  [ -z "${!var}" ] || return 0
  for f in "$@"; do
    looked[$var]+="$f "
    if [ -e "$f" ]; then
      printf -v "$var" '%s' "$f"
      return 0
    fi
  done
}
nccl_lib="" cudart_lib="" nccl_inc="" cuda_inc=""
for d in "${sites[@]}"; do
  pick nccl_lib "$d/nvidia/nccl/lib/libnccl.so.2"
  pick cudart_lib "$d/nvidia/cu13/lib/libcudart.so.13" "$d/nvidia/cuda_runtime/lib/libcudart.so.13" "$d/nvidia/cuda_runtime/lib/libcudart.so.12"
  pick nccl_inc "$d/nvidia/nccl/include/nccl.h"
  pick cuda_inc "$d/nvidia/cu13/include/cuda_runtime_api.h" "$d/nvidia/cuda_runtime/include/cuda_runtime_api.h"
done
pick nccl_lib /usr/local/cuda/lib64/libnccl.so.2 /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib/aarch64-linux-gnu/libnccl.so.2
pick cudart_lib /usr/local/cuda/lib64/libcudart.so.13 /usr/local/cuda/lib64/libcudart.so.12 /usr/local/cuda/lib64/libcudart.so
pick nccl_inc /usr/local/cuda/include/nccl.h /usr/include/nccl.h
pick cuda_inc /usr/local/cuda/include/cuda_runtime_api.h
echo "pythons: ${pythons[*]:-none}"
echo "site-packages and sys.path searched: ${sites[*]:-none}"
echo "libnccl.so.2:          ${nccl_lib:-NOT FOUND}"
echo "libcudart:             ${cudart_lib:-NOT FOUND}"
echo "nccl.h:                ${nccl_inc:-NOT FOUND}"
echo "cuda_runtime_api.h:    ${cuda_inc:-NOT FOUND}"
ldconfig -p 2>/dev/null | grep -E 'libnccl|libcudart|libcuda\.so' || echo "ldconfig: no libnccl, libcudart or libcuda on the loader's path"
if [ -z "$nccl_lib" ]; then
  echo "libnccl not found: looked in ${looked[nccl_lib]}"
fi

echo "--- collkit's own search, no COLLKIT_*, LD_LIBRARY_PATH, VIRTUAL_ENV or PYTHONPATH set:"
if (cd "$kit" && env -u COLLKIT_NCCL_LIB -u COLLKIT_CUDA_LIB -u LD_LIBRARY_PATH -u VIRTUAL_ENV -u PYTHONPATH \
    "$kit/bin/collkit.test" -test.run '^TestNCCLDiscovery$' -test.v -test.count=1); then
  pass "discovery: collkit finds NCCL with no variables set"
  found=1
else
  fail "discovery: collkit's search does not find NCCL with no variables set (its error above says where it looked)"
  found=0
  if [ -n "${COLLKIT_NCCL_LIB:-}" ] || [ -n "$nccl_lib" ]; then
    export COLLKIT_NCCL_LIB=${COLLKIT_NCCL_LIB:-$nccl_lib}
    echo "continuing with COLLKIT_NCCL_LIB=$COLLKIT_NCCL_LIB${COLLKIT_CUDA_LIB:+ COLLKIT_CUDA_LIB=$COLLKIT_CUDA_LIB}"
    if (cd "$kit" && "$kit/bin/collkit.test" -test.run '^TestNCCLDiscovery$' -test.v -test.count=1); then
      found=1
    else
      fail "discovery: NCCL does not load even from $COLLKIT_NCCL_LIB"
    fi
  fi
fi

if [ -z "$gpu" ] || [ "$found" -ne 1 ]; then
  why="no GPU"
  [ "$found" -ne 1 ] && why="libnccl not found"
  [ -z "$gpu" ] && [ "$found" -ne 1 ] && why="no GPU and libnccl not found"
  for s in "collbench topo" "transport/nccl tests" "gpu tests" "package GPU tests (hybrid)" "collbench device sweep" "hybrid collbench run" "collkit / torch / C comparison"; do
    notrun "$s: $why"
  done
  summary
  exit 1
fi

# gotest NAME DIR BINARY ARGS...: runs a test binary with -test.v in DIR,
# fails on a non-zero exit, on no test passing, and on a test skipped for
# want of NCCL or a GPU (other skips, such as tests that need two GPUs,
# are listed).
gotest() {
  local name=$1 dir=$2 bin=$3
  shift 3
  local log="$out/test-$name.txt"
  step "test $name"
  (cd "$dir" && "$bin" -test.v -test.count=1 -test.timeout 10m "$@") >"$log" 2>&1
  local code=$?
  grep -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|PASS|FAIL|ok)|_test\.go:[0-9]+:' "$log"
  local passed skipped
  passed=$(grep -cE '^\s*--- PASS' "$log")
  # -test.v prints a skip's reason on the line before its "--- SKIP".
  skipped=$(awk '/^[[:space:]]*--- SKIP:/ { sub(/^[[:space:]]*--- SKIP: /, ""); sub(/ \(.*/, ""); r = prev; sub(/^[[:space:]]*/, "", r); print $0 " (" r ")" } { prev = $0 }' "$log")
  if [ "$code" -ne 0 ]; then
    fail "$name: exit $code (log $log)"
  elif [ "$passed" -eq 0 ]; then
    fail "$name: no test passed (log $log)"
  elif printf '%s\n' "$skipped" | grep -v 'fake NCCL library' | grep -qiE 'not available|not found|no CUDA device|ErrNoDevice|no GPU|not built with|NVML|driver'; then
    fail "$name: a test skipped for want of NCCL or a GPU: $(printf '%s' "$skipped" | tr '\n' ' ')"
  else
    pass "$name: $passed passed${skipped:+; skipped: $(printf '%s' "$skipped" | tr '\n' ';')}"
  fi
}

step "collbench topo (NVML build)"
"$kit/bin/collbench-nvml" topo >"$out/topo.txt" 2>&1
code=$?
cat "$out/topo.txt"
gpuname=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ "$code" -ne 0 ]; then
  fail "collbench topo: exit $code"
elif [ -n "$gpuname" ] && ! grep -qF "$gpuname" "$out/topo.txt"; then
  fail "collbench topo: the GPU nvidia-smi names ($gpuname) is not in its list"
elif ! grep -q '^NCCL [0-9]' "$out/topo.txt"; then
  fail "collbench topo: NCCL's line does not give a loaded version"
else
  pass "collbench topo: lists ${gpuname:-the GPU} and NCCL's version"
fi

# The GPU tests and the fake library's tests in separate processes: the
# fake, loaded with RTLD_GLOBAL, must not stand in for the real symbols.
gotest nccl-gpu "$kit/nccl" "$kit/nccl/nccl.test" -test.run '^TestGPU'
gotest nccl-other "$kit/nccl" "$kit/nccl/nccl.test" -test.skip '^TestGPU'
gotest gpu "$kit" "$kit/bin/gpu.test"
gotest collkit-gpu "$kit" "$kit/bin/collkit.test" -test.run 'GPU|Discovery'

# Device memory: collbench's --mem flag (issue 17 item 2). A collbench
# without it stages host buffers through the GPU, which measures PCIe.
mem=()
if "$cb" --help 2>&1 | grep -qE -- '(^|[ ,])--mem( |$)'; then
  mem=(--mem device)
else
  fail "collbench has no --mem flag: device buffers are not built in; the collkit numbers below are host-staged"
fi

# collbench_checked NAME WANT_TABLES ARGS...: a collbench run whose every
# table must end "Out of bounds values : 0 OK".
collbench_checked() {
  local name=$1 want=$2
  shift 2
  local log="$out/collbench-$name.txt"
  step "collbench $name: $*"
  "$cb" "$@" --json "$out/collbench-$name.json" >"$log" 2>&1
  local code=$?
  cat "$log"
  local ok
  ok=$(grep -c 'Out of bounds values : 0 OK' "$log")
  if [ "$code" -ne 0 ]; then
    fail "collbench $name: exit $code"
  elif [ "$ok" -ne "$want" ]; then
    fail "collbench $name: $ok of $want tables checked with no wrong element"
  else
    pass "collbench $name: $ok tables, every element checked and right"
  fi
}

collbench_checked device-sweep 35 --transport nccl --np 1 "${mem[@]}" -d all -o all -b 8 -e 64M -f 8 -n 5 -w 2 -c 1 -q
for m in device host; do
  collbench_checked "hybrid-$m" 35 --algo hierarchical --nodes 2 --np 2 --transport tcp --intra nccl --mem "$m" -d all -o all -b 8 -e 16M -f 8 -n 5 -w 2 -c 1 -q
  if ! grep -q 'intra=nccl,inter=tcp' "$out/collbench-hybrid-$m.txt"; then
    fail "hybrid --mem $m: the report does not say NCCL inside nodes and TCP between (intra=nccl,inter=tcp)"
  fi
done

step "comparison: build the C loop (ncclAllReduce + cudaStreamSynchronize)"
loop=$work/nccl_loop
cudart_for_c=$cudart_lib
nccl_for_c=${COLLKIT_NCCL_LIB:-$nccl_lib}
built=""
if [ -z "$nccl_for_c" ] || [ -z "$cudart_for_c" ]; then
  fail "C loop: cannot build: libnccl (${nccl_for_c:-not found}) and libcudart (${cudart_for_c:-not found}) are both needed"
else
  rpath="$(dirname "$nccl_for_c"):$(dirname "$cudart_for_c")"
  nvcc=""
  for n in "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc "${sites[@]/%//nvidia/cu13/bin/nvcc}" "${sites[@]/%//nvidia/cuda_nvcc/bin/nvcc}"; do
    if [ -n "$n" ] && [ -x "$n" ]; then nvcc=$n; break; fi
  done
  incs=()
  [ -n "$nccl_inc" ] && incs+=(-I"$(dirname "$nccl_inc")")
  [ -n "$cuda_inc" ] && incs+=(-I"$(dirname "$cuda_inc")")
  if [ -n "$nvcc" ] && [ -n "$nccl_inc" ]; then
    echo "trying nvcc ($nvcc) against $nccl_inc"
    if "$nvcc" -O2 -DUSE_NCCL_H "${incs[@]}" -o "$loop" "$kit/src/nccl_loop.c" "$nccl_for_c" -Xlinker -rpath -Xlinker "$rpath"; then
      built="nvcc $nvcc with $nccl_inc"
    fi
  else
    echo "no nvcc (looked on PATH, /usr/local/cuda/bin and the wheels' nvidia/*/bin) or no nccl.h"
  fi
  if [ -z "$built" ] && command -v gcc >/dev/null 2>&1; then
    if [ -n "$nccl_inc" ] && [ -n "$cuda_inc" ]; then
      echo "trying gcc against $nccl_inc and $cuda_inc"
      if gcc -O2 -std=c11 -D_POSIX_C_SOURCE=199309L -DUSE_NCCL_H "${incs[@]}" -o "$loop" "$kit/src/nccl_loop.c" "$nccl_for_c" "$cudart_for_c" -Wl,-rpath,"$rpath"; then
        built="gcc with $nccl_inc"
      fi
    fi
    if [ -z "$built" ]; then
      echo "trying gcc against collkit's nccl_min.h (declarations of the calls it makes; no NVIDIA header)"
      if gcc -O2 -std=c11 -D_POSIX_C_SOURCE=199309L -I"$kit/src" -o "$loop" "$kit/src/nccl_loop.c" "$nccl_for_c" "$cudart_for_c" -Wl,-rpath,"$rpath"; then
        built="gcc with nccl_min.h (nccl.h or the CUDA headers missing or not usable)"
      fi
    fi
  elif [ -z "$built" ]; then
    echo "no gcc on PATH"
  fi
  if [ -n "$built" ]; then
    pass "C loop built: $built, linked to $nccl_for_c and $cudart_for_c"
  else
    fail "C loop: could not be built (no nvcc with nccl.h, and gcc failed or is missing; see above)"
  fi
fi

py=""
for p in "${pythons[@]}"; do
  if "$p" -c 'import torch, torch.distributed' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
  fail "torch: no python here imports torch (tried: ${pythons[*]:-none}; set PYTHON)"
else
  echo "torch from $py"
fi

# value FILE KEY: the number after KEY= on the line of FILE.
value() { sed -n "s/.*$2=\([0-9.]*\).*/\1/p" "$1" | head -1; }
# json_us FILE PLACE: collbench's time_us (out_of_place or in_place).
json_us() {
  "${py:-python3}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["reports"][0]["rows"][0][sys.argv[2]]["time_us"])' "$1" "$2" 2>/dev/null ||
    awk -v col="$([ "$2" = in_place ] && echo 10 || echo 6)" '!/^#/ && NF > 10 { print $col; exit }' "${1%.json}.txt"
}

sizes=(8 65536 16777216 268435456)
iters_of() { if [ "$1" -le 65536 ]; then echo "2000 200"; elif [ "$1" -le 16777216 ]; then echo "200 20"; else echo "50 5"; fi; }
label_of() { case $1 in 8) echo "8 B" ;; 65536) echo "64 KiB" ;; 16777216) echo "16 MiB" ;; *) echo "256 MiB" ;; esac; }
step "comparison: $rounds alternating rounds of collkit, torch and the C loop at 8 B, 64 KiB, 16 MiB and 256 MiB (float32 sum, GPU 0)"
for r in $(seq 1 "$rounds"); do
  for b in "${sizes[@]}"; do
    read -r n w <<<"$(iters_of "$b")"
    f=$out/cmp-collkit-$b-r$r
    "$cb" --transport nccl --np 1 "${mem[@]}" --size "$b" -n "$n" -w "$w" -c 1 -q --json "$f.json" >"$f.txt" 2>&1 ||
      { cat "$f.txt"; fail "collkit $b B round $r: collbench failed"; }
    echo "collkit bytes=$b round=$r out-of-place=$(json_us "$f.json" out_of_place) in-place=$(json_us "$f.json" in_place) us"
  done
  if [ -n "$py" ]; then
    args=()
    for b in "${sizes[@]}"; do read -r n w <<<"$(iters_of "$b")"; args+=("$b:$n:$w"); done
    "$py" "$kit/src/torch_allreduce.py" "${args[@]}" >"$out/cmp-torch-r$r.txt" 2>&1 ||
      fail "torch round $r: exit $? ($(tail -3 "$out/cmp-torch-r$r.txt" | tr '\n' ' '))"
    grep '^torch ' "$out/cmp-torch-r$r.txt"
  fi
  if [ -n "$built" ]; then
    for b in "${sizes[@]}"; do
      read -r n w <<<"$(iters_of "$b")"
      for mode in out-of-place in-place; do
        "$loop" "$b" "$n" "$w" "$mode" >"$out/cmp-c-$b-$mode-r$r.txt" 2>&1 ||
          fail "C loop $b B $mode round $r: exit $? ($(tr '\n' ' ' <"$out/cmp-c-$b-$mode-r$r.txt"))"
        cat "$out/cmp-c-$b-$mode-r$r.txt"
      done
    done
  fi
done

# median of the numbers on stdin, or "-" when there are none.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f", a / b }'; }
meets() { awk -v r="$1" -v t="$2" 'BEGIN { exit !(r != "-" && r <= t) }'; }
{
  echo "all-reduce, float32 sum, one rank on GPU 0: median of $rounds rounds, mean us per call (call + wait for completion)"
  echo "collkit: collbench --transport nccl --np 1 ${mem[*]:-(host buffers)}; torch: dist.all_reduce + torch.cuda.synchronize (in place only); C: ncclAllReduce + cudaStreamSynchronize"
  printf '%-9s %-13s %11s %11s %11s %11s %13s  %-28s %s\n' size mode "collkit us" "torch us" "C us" collkit/C collkit/torch target verdict
  for b in "${sizes[@]}"; do
    label=$(label_of "$b")
    for mode in out-of-place in-place; do
      key=$([ "$mode" = in-place ] && echo in_place || echo out_of_place)
      ck=$(for r in $(seq 1 "$rounds"); do [ -f "$out/cmp-collkit-$b-r$r.json" ] && json_us "$out/cmp-collkit-$b-r$r.json" "$key"; done | grep -E '^[0-9.]+$' | median)
      cc=$(for r in $(seq 1 "$rounds"); do [ -f "$out/cmp-c-$b-$mode-r$r.txt" ] && value "$out/cmp-c-$b-$mode-r$r.txt" us_per_call; done | grep -E '^[0-9.]+$' | median)
      tt="-"
      if [ "$mode" = in-place ]; then
        tt=$(for r in $(seq 1 "$rounds"); do [ -f "$out/cmp-torch-r$r.txt" ] && grep "^torch bytes=$b " "$out/cmp-torch-r$r.txt" | sed -n 's/.*us_per_call=\([0-9.]*\).*/\1/p'; done | grep -E '^[0-9.]+$' | median)
      fi
      rc=$(ratio "$ck" "$cc")
      rt=$(ratio "$ck" "$tt")
      if [ "$b" -eq 8 ]; then
        target="collkit/C <= 1.2"
        ok=1
        meets "$rc" 1.2 || ok=0
        if [ "$mode" = in-place ]; then
          target="collkit/C <= 1.2, /torch <= 1"
          meets "$rt" 1.0 || ok=0
        fi
      elif [ "$b" -eq 268435456 ]; then
        target="collkit/C <= 1.05"
        ok=1
        meets "$rc" 1.05 || ok=0
      else
        target="(none: reported)"
        ok=2
      fi
      verdict=$(case $ok in 1) echo met ;; 0) echo MISSED ;; *) echo - ;; esac)
      printf '%-9s %-13s %11s %11s %11s %11s %13s  %-28s %s\n' "$label" "$mode" "$ck" "$tt" "$cc" "$rc" "$rt" "$target" "$verdict"
      echo "$label $mode $verdict" >>"$work/verdicts"
    done
  done
} >"$out/compare.txt"
cat "$out/compare.txt"
if grep -q MISSED "$work/verdicts" 2>/dev/null; then
  fail "targets: $(grep MISSED "$work/verdicts" | tr '\n' ';') (a '-' means a number is missing)"
else
  pass "targets: every size within its target"
fi
summary
[ "$failed" -eq 0 ]
