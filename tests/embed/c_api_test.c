/* include/tec/tec_c.h, compiled as C: load a plan, run it on the CPU backend, and reproduce
 * the reference output bit for bit; errors come back as codes with messages; the
 * delayed-scaling state saves and restores.
 *   c_api_test PLAN X.npy Y.npy   (tests/embed/make_expected.py writes them) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/embed/npy_min.h"
#include "tec/tec_c.h"

static int failures = 0;
#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

/* Fills x, runs, and copies y (bf16) out as floats. */
static void run_once(tec_session* s, const float* x, long n, float* y) {
  tec_tensor in, out;
  EXPECT(tec_session_input(s, "x", &in) == TEC_OK);
  EXPECT(in.bytes == (size_t)n * 2 && strcmp(in.dtype, "bf16") == 0);
  for (long i = 0; i < n; ++i) ((uint16_t*)in.data)[i] = bf16_from_float(x[i]);
  EXPECT(tec_session_run(s, NULL) == TEC_OK);
  EXPECT(tec_session_output(s, "y", &out) == TEC_OK);
  for (long i = 0; i < n; ++i) y[i] = float_from_bf16(((const uint16_t*)out.data)[i]);
}

int main(int argc, char** argv) {
  long rows = 0, cols = 0, yrows = 0, ycols = 0;
  if (argc != 4) {
    fprintf(stderr, "usage: c_api_test PLAN X.npy Y.npy\n");
    return 2;
  }
  float* x = npy_read_f32(argv[2], &rows, &cols);
  float* expected = npy_read_f32(argv[3], &yrows, &ycols);
  if (!x || !expected || rows != yrows || cols != ycols) {
    fprintf(stderr, "cannot read %s / %s\n", argv[2], argv[3]);
    return 1;
  }
  const long n = rows * cols;

  /* Errors: a code and a message naming what is wrong. */
  tec_plan* plan = NULL;
  EXPECT(tec_plan_load_file("/nonexistent.teplan", &plan) == TEC_ERROR_IO && plan == NULL);
  EXPECT(strstr(tec_last_error(), "/nonexistent.teplan") != NULL);
  EXPECT(tec_plan_load_memory("not a plan", 10, &plan) == TEC_ERROR_INVALID_PLAN);

  EXPECT(tec_plan_load_file(argv[1], &plan) == TEC_OK);
  if (!plan) return 1;
  EXPECT(strcmp(tec_last_error(), "") == 0);
  int profiles = 0, inputs = 0;
  EXPECT(tec_plan_profile_count(plan, &profiles) == TEC_OK && profiles == 1);
  EXPECT(tec_plan_input_count(plan, 0, &inputs) == TEC_OK && inputs == 1);
  tec_tensor described;
  EXPECT(tec_plan_input(plan, 0, 0, &described) == TEC_OK);
  EXPECT(strcmp(described.name, "x") == 0 && described.rank == 2 && described.shape[0] == rows &&
         described.shape[1] == cols && described.data == NULL);
  EXPECT(tec_plan_input(plan, 0, 5, &described) == TEC_ERROR_USAGE);
  EXPECT(tec_plan_input(plan, 3, 0, &described) == TEC_ERROR_USAGE);

  tec_session* session = NULL;
  EXPECT(tec_session_create(plan, 0, TEC_BACKEND_CPU, &session) == TEC_OK);
  if (!session) return 1;
  tec_tensor bad;
  EXPECT(tec_session_input(session, "nope", &bad) == TEC_ERROR_USAGE);
  EXPECT(strstr(tec_last_error(), "'nope'") != NULL);

  /* The first run from a fresh session is the reference's, bit for bit. */
  float* y = (float*)malloc((size_t)n * sizeof(float));
  float* y2 = (float*)malloc((size_t)n * sizeof(float));
  run_once(session, x, n, y);
  EXPECT(memcmp(y, expected, (size_t)n * sizeof(float)) == 0);

  /* State: save after run 1, run 2, restore, run again: the same as run 2. */
  size_t size = 0;
  EXPECT(tec_session_get_state(session, NULL, 0, &size) == TEC_OK && size > 16);
  unsigned char* state = (unsigned char*)malloc(size);
  EXPECT(tec_session_get_state(session, state, size, &size) == TEC_OK);
  run_once(session, x, n, y);
  EXPECT(tec_session_set_state(session, state, size) == TEC_OK);
  run_once(session, x, n, y2);
  EXPECT(memcmp(y, y2, (size_t)n * sizeof(float)) == 0);
  state[size / 2] ^= 0x10;
  EXPECT(tec_session_set_state(session, state, size) == TEC_ERROR_INVALID_PLAN);
  EXPECT(strstr(tec_last_error(), "checksum") != NULL);
  state[size / 2] ^= 0x10;
  state[8] = 1; /* a version-1 state (before the four-lane checksum): named, not a checksum error */
  EXPECT(tec_session_set_state(session, state, size) == TEC_ERROR_INVALID_PLAN);
  EXPECT(strstr(tec_last_error(), "version 1 is not supported") != NULL);

  tec_session_free(session);
  tec_plan_free(plan);
  free(state);
  free(y);
  free(y2);
  free(x);
  free(expected);
  if (failures == 0) printf("c_api_test: all checks passed (%ld x %ld output bit-identical to the reference)\n", rows, cols);
  return failures == 0 ? 0 : 1;
}
