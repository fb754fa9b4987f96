/* The DLPack type of a kite dtype: tests build their tensors from kite dtypes. */
#ifndef KITE_TESTS_DTYPES_H
#define KITE_TESTS_DTYPES_H

#include "kite/backend.h"

static inline DLDataType test_dl_type(kite_dtype t) {
  switch (t) {
  case KITE_DTYPE_F16:
    return (DLDataType){kDLFloat, 16, 1};
  case KITE_DTYPE_BF16:
    return (DLDataType){kDLBfloat, 16, 1};
  case KITE_DTYPE_I32:
    return (DLDataType){kDLInt, 32, 1};
  case KITE_DTYPE_I8:
    return (DLDataType){kDLInt, 8, 1};
  case KITE_DTYPE_U8:
    return (DLDataType){KITE_DL_BOOL, 8, 1};
  case KITE_DTYPE_FP8_E4M3:
    return (DLDataType){KITE_DL_FLOAT8_E4M3FN, 8, 1};
  default:
    return (DLDataType){kDLFloat, 32, 1};
  }
}

#endif
