/*
 * nccl_loop: the floor collkit's NCCL calls are measured against. One rank
 * on GPU 0 calls ncclAllReduce (float32 sum) and cudaStreamSynchronize in a
 * loop, as a C program using NCCL directly would, and prints the mean time
 * per call. gpu-kit/run.sh builds it on the GPU machine (nvcc, or gcc
 * against the wheel's nccl.h, or against nccl_min.h) and runs it beside
 * collbench and torch.distributed.
 *
 *   nccl_loop BYTES ITERS WARMUP out-of-place|in-place
 *
 * Output, one line:  nccl_loop bytes=8 mode=in-place iters=2000 us_per_call=12.345 nccl=22703 cudart=13000
 * It checks the result (every rank's input is 1.0, so the sum over one
 * rank is 1.0) and exits non-zero on any error or a wrong result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef USE_NCCL_H
#include <cuda_runtime_api.h>
#include <nccl.h>
#else
#include "nccl_min.h"
#endif

#define CUDA(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
  fprintf(stderr, "nccl_loop: %s failed: %s (code %d)\n", #call, cudaGetErrorString(e_), (int)e_); exit(1); } } while (0)
#define NCCL(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
  fprintf(stderr, "nccl_loop: %s failed: %s (code %d)\n", #call, ncclGetErrorString(r_), (int)r_); exit(1); } } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[4], "out-of-place") != 0 && strcmp(argv[4], "in-place") != 0)) {
    fprintf(stderr, "usage: nccl_loop BYTES ITERS WARMUP out-of-place|in-place\n");
    return 2;
  }
  size_t bytes = strtoull(argv[1], NULL, 10);
  long iters = strtol(argv[2], NULL, 10), warmup = strtol(argv[3], NULL, 10);
  int inplace = strcmp(argv[4], "in-place") == 0;
  if (bytes < 4 || bytes % 4 != 0 || iters < 1 || warmup < 0) {
    fprintf(stderr, "nccl_loop: BYTES must be a positive multiple of 4 (float32), ITERS >= 1, WARMUP >= 0\n");
    return 2;
  }
  size_t count = bytes / 4;
  int ndev = 0, nver = 0, cver = 0;
  CUDA(cudaGetDeviceCount(&ndev));
  if (ndev < 1) {
    fprintf(stderr, "nccl_loop: no CUDA device visible\n");
    return 1;
  }
  CUDA(cudaSetDevice(0));
  CUDA(cudaRuntimeGetVersion(&cver));
  NCCL(ncclGetVersion(&nver));

  float *host = malloc(bytes);
  if (!host) { fprintf(stderr, "nccl_loop: out of host memory\n"); return 1; }
  for (size_t i = 0; i < count; i++) host[i] = 1.0f;
  void *send = NULL, *recv = NULL;
  CUDA(cudaMalloc(&send, bytes));
  CUDA(cudaMalloc(&recv, bytes));
  CUDA(cudaMemcpy(send, host, bytes, cudaMemcpyHostToDevice));
  if (inplace) recv = send;

  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t stream;
  NCCL(ncclGetUniqueId(&id));
  NCCL(ncclCommInitRank(&comm, 1, id, 0));
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  for (long i = 0; i < warmup; i++) {
    NCCL(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream));
    CUDA(cudaStreamSynchronize(stream));
  }
  double t0 = now_us();
  for (long i = 0; i < iters; i++) {
    NCCL(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm, stream));
    CUDA(cudaStreamSynchronize(stream));
  }
  double us = (now_us() - t0) / (double)iters;

  memset(host, 0, bytes);
  CUDA(cudaMemcpy(host, recv, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += host[i] != 1.0f;
  printf("nccl_loop bytes=%zu mode=%s iters=%ld us_per_call=%.3f nccl=%d cudart=%d wrong=%zu\n",
         bytes, argv[4], iters, us, nver, cver, wrong);
  NCCL(ncclCommDestroy(comm));
  CUDA(cudaStreamDestroy(stream));
  CUDA(cudaFree(send));
  if (!inplace) CUDA(cudaFree(recv));
  free(host);
  if (wrong) {
    fprintf(stderr, "nccl_loop: %zu of %zu elements wrong\n", wrong, count);
    return 1;
  }
  return 0;
}
