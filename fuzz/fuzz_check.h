// What the fuzz targets share: a property check that stops the run (libFuzzer keeps the input).
#pragma once

#include <cstdio>
#include <cstdlib>

#define MGPU_FUZZ_CHECK(condition)                                                                 \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      std::fprintf(stderr, "%s:%d: property does not hold: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                                \
    }                                                                                              \
  } while (0)
