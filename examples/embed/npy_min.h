/* The smallest .npy reader the embedding tests need: little-endian float32, C order, 2-D.
 * Header-only, C and C++. Returns a malloc'ed array (NULL on any mismatch). */
#ifndef TEC_TESTS_NPY_MIN_H
#define TEC_TESTS_NPY_MIN_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float* npy_read_f32(const char* path, long* rows, long* cols) {
  FILE* f = fopen(path, "rb");
  unsigned char magic[10];
  char header[512];
  float* data = NULL;
  if (!f) return NULL;
  if (fread(magic, 1, 10, f) == 10 && memcmp(magic, "\x93NUMPY\x01\x00", 8) == 0) {
    const size_t length = (size_t)magic[8] | ((size_t)magic[9] << 8);
    if (length < sizeof header && fread(header, 1, length, f) == length) {
      header[length] = '\0';
      const char* shape = strstr(header, "'shape': (");
      if (strstr(header, "'descr': '<f4'") && strstr(header, "'fortran_order': False") && shape &&
          sscanf(shape, "'shape': (%ld, %ld)", rows, cols) == 2 && *rows > 0 && *cols > 0) {
        const size_t n = (size_t)(*rows * *cols);
        data = (float*)malloc(n * sizeof(float));
        if (data && fread(data, sizeof(float), n, f) != n) {
          free(data);
          data = NULL;
        }
      }
    }
  }
  fclose(f);
  return data;
}

/* bf16 encoding as tec rounds inputs: round to nearest even (no NaNs in test data). */
static uint16_t bf16_from_float(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

static float float_from_bf16(uint16_t b) {
  const uint32_t bits = (uint32_t)b << 16;
  float x;
  memcpy(&x, &bits, 4);
  return x;
}

#endif
