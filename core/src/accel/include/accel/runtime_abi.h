/*
 * accel runtime ABI: the C contract between accel-core and a backend's
 * compiled runtime.
 *
 * A backend runtime exposes one `accel_runtime_api` table. accel-core reads
 * `abi_version` before anything else and refuses a runtime whose version is
 * not ACCEL_ABI_VERSION. Everything else is reached through the table:
 *
 *   create   parses and validates a blob (every offset, count, id and size
 *            checked before use) and returns an opaque handle. A bad blob is
 *            an error status with a message, never a crash. The options say
 *            how the handle runs (its thread count); NULL means the defaults.
 *   run      reads the inputs and writes the outputs into caller-owned,
 *            C-contiguous buffers whose shapes and dtypes the blob fixed.
 *            One handle may be run from several threads at once: run must
 *            not mutate the handle.
 *   destroy  frees the handle (NULL is accepted).
 *   num_threads  the threads a handle computes with (what create chose from
 *            its options), so a caller can report and check it.
 *
 * Threads are chosen when a blob is loaded, never fixed by the blob: accel
 * resolves the count once (accel.load(path, threads=N), `accel run
 * --threads N`, else ACCEL_NUM_THREADS, else every core) and passes it here.
 *
 * Errors: a non-zero accel_status and a NUL-terminated message written into
 * `err` (at most `err_len` bytes, always terminated when err_len > 0).
 *
 * The Python side of a runtime is a pybind11 module that publishes the table
 * as a capsule named ACCEL_RUNTIME_CAPSULE in its attribute `__accel_abi__`
 * (accel-sdk's glue does this).
 */
#ifndef ACCEL_RUNTIME_ABI_H
#define ACCEL_RUNTIME_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to the structures or entry points below. */
#define ACCEL_ABI_VERSION 2

#define ACCEL_RUNTIME_CAPSULE "accel.runtime_api"

#define ACCEL_MAX_RANK 8

typedef enum accel_status {
  ACCEL_OK = 0,
  ACCEL_ERR_INVALID_BLOB = 1,     /* create: the blob is malformed */
  ACCEL_ERR_INVALID_ARGUMENT = 2, /* run: wrong count, dtype, rank or shape */
  ACCEL_ERR_RUNTIME = 3,          /* anything else (allocation, internal) */
} accel_status;

/* Element types; the codes are part of the ABI. */
typedef enum accel_dtype {
  ACCEL_FLOAT32 = 0,
  ACCEL_FLOAT16 = 1,
  ACCEL_FLOAT64 = 2,
  ACCEL_INT8 = 3,
  ACCEL_UINT8 = 4,
  ACCEL_INT16 = 5,
  ACCEL_UINT16 = 6,
  ACCEL_INT32 = 7,
  ACCEL_UINT32 = 8,
  ACCEL_INT64 = 9,
  ACCEL_UINT64 = 10,
  ACCEL_BOOL = 11,
} accel_dtype;

/* A dense, C-contiguous tensor owned by the caller. */
typedef struct accel_tensor {
  void *data;
  int32_t dtype; /* an accel_dtype */
  int32_t rank;  /* 0 .. ACCEL_MAX_RANK */
  const int64_t *shape;
} accel_tensor;

typedef struct accel_runtime accel_runtime; /* opaque, backend-defined */

/* How a loaded handle runs. `size` is sizeof(accel_runtime_options) as the
 * caller knows it, so fields can be appended without a new ABI version: a
 * runtime reads only the fields that fit in `size`. */
typedef struct accel_runtime_options {
  uint32_t size;
  int32_t num_threads; /* threads to compute with; <= 0: every core of the machine */
} accel_runtime_options;

typedef struct accel_runtime_api {
  uint32_t abi_version; /* ACCEL_ABI_VERSION the runtime was built against */
  const char *backend;  /* backend name, e.g. "ethosn" */
  accel_status (*create)(const uint8_t *blob, size_t size, const accel_runtime_options *options, accel_runtime **out,
                         char *err, size_t err_len);
  accel_status (*run)(const accel_runtime *rt, const accel_tensor *inputs, size_t n_inputs, const accel_tensor *outputs,
                      size_t n_outputs, char *err, size_t err_len);
  void (*destroy)(accel_runtime *rt);
  int32_t (*num_threads)(const accel_runtime *rt);
} accel_runtime_api;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_RUNTIME_ABI_H */
