#include <ATen/ATen.h>
#include <ATen/core/Tensor.h>
#include <fmt/core.h>

#include "comm/collective_checks.h"
#include "zero/error.h"

namespace zero {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kAllToAll:
      return "all_to_all";
    case CollectiveOp::kBarrier:
      return "barrier";
  }
  return "?";
}

namespace comm_detail {

bool is_16bit_float(const at::Tensor& t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    default:
      return c10::toString(type);
  }
}

std::string describe(const at::Tensor& t) { return fmt::format("{}[{}]", dtype_name(t.scalar_type()), t.numel()); }

void check_tensor(CollectiveOp op, const char* role, const at::Tensor& t, bool require_cpu, int rank) {
  if (!t.defined())
    throw Error(fmt::format("{}: the {} tensor is undefined", to_string(op), role), to_string(op), rank);
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      break;
    default:
      throw Error(fmt::format("{}: dtype {} of the {} tensor is not supported (float32, float64, float16, bfloat16, "
                              "int8, uint8, int32, int64 are)",
                              to_string(op), dtype_name(t.scalar_type()), role),
                  to_string(op), rank);
  }
  if (!t.is_contiguous()) {
    throw Error(fmt::format("{}: the {} tensor {} must be contiguous", to_string(op), role, describe(t)), to_string(op),
                rank);
  }
  if (require_cpu && !t.device().is_cpu()) {
    throw Error(fmt::format("{}: the {} tensor is on {}, this backend needs CPU tensors", to_string(op), role,
                            t.device().str()),
                to_string(op), rank);
  }
}

void check_pair(CollectiveOp op, const at::Tensor& input, const at::Tensor& output, int64_t in_factor,
                int64_t out_factor, bool require_cpu, int rank) {
  check_tensor(op, "input", input, require_cpu, rank);
  check_tensor(op, "output", output, require_cpu, rank);
  if (input.scalar_type() != output.scalar_type()) {
    throw Error(fmt::format("{}: input {} and output {} have different dtypes", to_string(op), describe(input),
                            describe(output)),
                to_string(op), rank);
  }
  if (input.numel() * out_factor != output.numel() * in_factor) {
    throw Error(fmt::format("{}: output {} must have {} the elements of input {}", to_string(op), describe(output),
                            out_factor >= in_factor ? fmt::format("{}x", out_factor / in_factor)
                                                    : fmt::format("1/{}", in_factor / out_factor),
                            describe(input)),
                to_string(op), rank);
  }
}

void check_root(int root, int size, int rank) {
  if (root < 0 || root >= size) {
    throw Error(fmt::format("broadcast: root {} is outside the group of {} ranks", root, size), "broadcast", rank);
  }
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.storage().is_alias_of(b.storage())) return false;
  auto begin_a = static_cast<const char*>(a.data_ptr()), begin_b = static_cast<const char*>(b.data_ptr());
  auto end_a = begin_a + a.nbytes(), end_b = begin_b + b.nbytes();
  return begin_a < end_b && begin_b < end_a;
}

void divide_for_average(at::Tensor& buffer, ReduceOp op, int size) {
  if (op != ReduceOp::kAvg) return;
  if (at::isFloatingType(buffer.scalar_type())) {
    buffer.div_(size);
  } else {
    buffer.div_(size, "trunc");
  }
}

}  // namespace comm_detail
}  // namespace zero
