/* tec's embedding API for C and other languages: the same plans, sessions and errors as
 * tec/runtime.h, behind opaque handles. Every call returns a tec_status (0 on success; the
 * CLIs' exit codes otherwise) and leaves a message for tec_last_error() on the calling
 * thread. Strings and shapes handed out stay valid while the handle that gave them lives.
 *
 * A plan carries GPU code: load only plans you trust. Its checksum guards integrity, not
 * authenticity. */
#ifndef TEC_TEC_C_H
#define TEC_TEC_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tec_status {
  TEC_OK = 0,
  TEC_ERROR_USAGE = 2,        /* a bad argument: unknown name, wrong profile, null handle */
  TEC_ERROR_INVALID_PLAN = 3, /* a damaged or inconsistent plan, or state bytes */
  TEC_ERROR_UNSUPPORTED = 4,  /* e.g. a plan without GPU code on the gpu backend */
  TEC_ERROR_IO = 6,
  TEC_ERROR_DEVICE = 7, /* no CUDA device, out of memory, a failed CUDA or cuBLASLt call */
  TEC_ERROR_DEVICE_LOST = 8, /* a sticky CUDA error (illegal address, ...): every session on that
                                device refuses to run; only a new process can use the GPU again */
  TEC_ERROR_INTERNAL = 70
} tec_status;

typedef enum tec_backend { TEC_BACKEND_GPU = 0, TEC_BACKEND_CPU = 1 } tec_backend;

typedef struct tec_plan tec_plan;
typedef struct tec_session tec_session;

/* A tensor: name, dtype ("bf16", "fp32", "fp8_e4m3", ...), shape, and for a session its
 * data in the backend's memory (device for gpu, host for cpu). */
typedef struct tec_tensor {
  const char* name;
  const char* dtype;
  int rank;
  const int64_t* shape;
  void* data;
  size_t bytes;
} tec_tensor;

/* The message of this thread's last failed call ("" if none). */
const char* tec_last_error(void);

tec_status tec_plan_load_file(const char* path, tec_plan** plan);
tec_status tec_plan_load_memory(const void* data, size_t size, tec_plan** plan);
void tec_plan_free(tec_plan* plan);
/* Profiles are numbered from 0; dims of profile i as parallel arrays of `count` entries. */
tec_status tec_plan_profile_count(const tec_plan* plan, int* count);
tec_status tec_plan_profile_dim(const tec_plan* plan, int profile, int index, const char** name, int64_t* value);
/* Inputs and outputs of a profile (data is NULL). */
tec_status tec_plan_input_count(const tec_plan* plan, int profile, int* count);
tec_status tec_plan_input(const tec_plan* plan, int profile, int index, tec_tensor* tensor);
tec_status tec_plan_output_count(const tec_plan* plan, int profile, int* count);
tec_status tec_plan_output(const tec_plan* plan, int profile, int index, tec_tensor* tensor);

/* A session of one profile on a backend; the plan must outlive it. */
tec_status tec_session_create(const tec_plan* plan, int profile, tec_backend backend, tec_session** session);
void tec_session_free(tec_session* session);
/* GPU: one graph launch on `cuda_stream` (a cudaStream_t, NULL for the default stream).
 * CPU: runs to completion on the calling thread. */
tec_status tec_session_run(tec_session* session, void* cuda_stream);
tec_status tec_session_input(tec_session* session, const char* name, tec_tensor* tensor);
tec_status tec_session_output(tec_session* session, const char* name, tec_tensor* tensor);
/* Delayed-scaling state: with buffer NULL, *size gets the bytes needed. */
tec_status tec_session_get_state(tec_session* session, void* buffer, size_t capacity, size_t* size);
tec_status tec_session_set_state(tec_session* session, const void* buffer, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TEC_TEC_C_H */
