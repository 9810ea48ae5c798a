// A contiguous tensor's elements as the torch-free kernels take them: float, or bf16 as uint16_t.
#pragma once

#include <ATen/core/Tensor.h>

namespace zero::kernels {

template <class T>
T* raw_data(const at::Tensor& t) {
  return reinterpret_cast<T*>(t.data_ptr());
}

}  // namespace zero::kernels
