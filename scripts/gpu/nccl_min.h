/*
 * nccl_min.h: the few NCCL and CUDA runtime declarations nccl_loop.c uses,
 * written for collkit from the libraries' C ABI (the same values
 * transport/nccl binds through purego), for machines where nccl.h or the
 * CUDA headers are missing. nccl_loop.c includes the real headers when
 * built with -DUSE_NCCL_H; gpu-kit/run.sh tries that first.
 */
#ifndef COLLKIT_NCCL_MIN_H
#define COLLKIT_NCCL_MIN_H
#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef int cudaError_t;

#define ncclSuccess 0
#define ncclFloat32 7
#define ncclSum 0
#define cudaSuccess 0
#define cudaStreamNonBlocking 0x01
#define cudaMemcpyHostToDevice 1
#define cudaMemcpyDeviceToHost 2

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dtype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaMalloc(void **p, size_t size);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, int kind);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
const char *cudaGetErrorString(cudaError_t error);

#endif
