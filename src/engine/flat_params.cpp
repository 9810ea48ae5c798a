#include "engine/flat_params.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/GradMode.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <cstring>

#include "util/debug_buffers.h"
#include "zero/error.h"

namespace zero::engine {
namespace {

std::vector<int64_t> numels(const std::vector<at::Tensor>& params) {
  std::vector<int64_t> out;
  for (const auto& p : params) out.push_back(p.numel());
  return out;
}

at::ScalarType common_dtype(const std::vector<at::Tensor>& params) {
  if (params.empty()) throw Error("the model has no trainable parameters", "model");
  for (const auto& p : params) {
    if (p.scalar_type() != params[0].scalar_type()) {
      throw Error("trainable parameters have different dtypes (" + std::string(c10::toString(params[0].scalar_type())) +
                      " and " + c10::toString(p.scalar_type()) + "): zerocpp trains one dtype per model",
                  "model");
    }
    if (p.device() != params[0].device()) {
      throw Error("trainable parameters are on different devices (" + params[0].device().str() + " and " +
                      p.device().str() + "): move the model to one device before building the engine",
                  "model");
    }
  }
  return params[0].scalar_type();
}

}  // namespace

int64_t alignment_for(at::ScalarType dtype) { return 32 / static_cast<int64_t>(c10::elementSize(dtype)); }

FlatParams::FlatParams(std::vector<at::Tensor> params, int partitions, int64_t bucket_elements,
                       const std::vector<int>& groups, const std::vector<at::Tensor>& adopted,
                       const layout::ReplicaGroups& replicas)
    : params_(std::move(params)),
      layout_(numels(params_), partitions, alignment_for(common_dtype(params_)), bucket_elements,
              layout::backward_order(params_.size(), groups, replicas.of_param), groups, replicas),
      dtype_(params_[0].scalar_type()),
      device_(params_[0].device()),
      memory_(layout_.buckets().size()) {
  at::NoGradGuard no_grad;
  // Without groups no bucket is ever released on its own: all share one allocation, back to back.
  if (groups.empty()) whole_ = at::zeros({layout_.padded_numel()}, at::TensorOptions(dtype_).device(device_));
  int64_t start = 0;
  for (size_t b = 0; b < layout_.buckets().size(); ++b) {
    const layout::Bucket& bucket = layout_.buckets()[b];
    const size_t group = groups.empty() ? 0 : static_cast<size_t>(groups[static_cast<size_t>(bucket.params.front())]);
    if (group < adopted.size() && adopted[group].defined()) {
      check_adopted(adopted[group], static_cast<int>(b));
      memory_[b].buffer = adopted[group];
      memory_[b].held = false;
    } else if (whole_.defined()) {
      memory_[b].buffer = whole_.narrow(0, start, bucket.padded);
    } else {
      // (capacity stays 0: the first release frees these; only gathers' memory is kept.)
      memory_[b].buffer = at::zeros({bucket.padded}, at::TensorOptions(dtype_).device(device_));
    }
    start += bucket.padded;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const layout::ParamSlot& s = layout_.slot(static_cast<int>(i));
    if (!memory_[static_cast<size_t>(s.bucket)].held) continue;  // adopted: already a view of its bucket
    at::Tensor& buffer = memory_[static_cast<size_t>(s.bucket)].buffer;
    buffer.narrow(0, s.offset, s.numel).copy_(p.reshape(-1));
    // Note: set_ keeps the tensor object (modules and autograd hold it) and only swaps its storage.
    p.set_(buffer.storage(), buffer.storage_offset() + s.offset, p.sizes(), c10::contiguous_strides(p.sizes()));
  }
}

// `bytes` of the device's memory from LibTorch's own allocator for it (the CUDA caching
// allocator on a GPU): a tensor is allocated and its memory taken from it. (c10::GetAllocator
// names no CUDA allocator in every LibTorch version; a tensor always finds the right one.)
c10::DataPtr FlatParams::allocate(size_t bytes) const {
  if (bytes == 0) return c10::DataPtr(nullptr, device_);
  const at::Tensor donor = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions(at::kByte).device(device_));
  return donor.storage().unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr(nullptr, device_));
}

void FlatParams::check_adopted(const at::Tensor& buffer, int b) const {
  const layout::Bucket& bucket = layout_.buckets()[static_cast<size_t>(b)];
  bool same = buffer.numel() == bucket.padded && buffer.scalar_type() == dtype_;
  for (int p : bucket.params) {
    const at::Tensor& param = params_[static_cast<size_t>(p)];
    same = same && param.storage().unsafeGetStorageImpl() == buffer.storage().unsafeGetStorageImpl() &&
           param.storage_offset() - buffer.storage_offset() == layout_.slot(p).offset;
  }
  if (!same) {
    throw Error(
        "a unit built under zero::Init has another layout than the engine's (another world size, dtype or "
        "persistence threshold?): build the model with the engine's config and world",
        "zero::Init");
  }
}

at::Tensor FlatParams::shard(const at::Tensor& bucket_buffer, int b, int rank) const {
  const int64_t n = layout_.buckets()[static_cast<size_t>(b)].shard;
  return bucket_buffer.narrow(0, rank * n, n);
}

at::Tensor FlatParams::view_of(const at::Tensor& bucket_buffer, int p) const {
  const layout::ParamSlot& s = layout_.slot(p);
  return bucket_buffer.narrow(0, s.offset, s.numel).view(params_[static_cast<size_t>(p)].sizes());
}

int64_t FlatParams::spare_bytes() const {
  int64_t total = 0;
  for (const Spare& s : spares_) total += static_cast<int64_t>(s.capacity);
  return total;
}

int64_t FlatParams::bytes_of(int b) const {
  const BucketMemory& m = memory_[static_cast<size_t>(b)];
  return m.held && !m.aliased ? static_cast<int64_t>(m.buffer.nbytes()) : 0;
}

int64_t FlatParams::bytes() const {
  int64_t total = 0;
  for (const BucketMemory& m : memory_) total += m.held && !m.aliased ? static_cast<int64_t>(m.buffer.nbytes()) : 0;
  return total;
}

// Through the storage, never by swapping tensors: autograd holds the parameters (and saved views
// of them), which must keep their identity and see the bytes when they come back.
void FlatParams::release(int b) {
  if (whole_.defined()) throw Error("internal: a bucket of a model laid out without units was released", "stage3");
  BucketMemory& m = memory_[static_cast<size_t>(b)];
  if (!m.aliased) poison_if_debugging(m.buffer);  // a stale reader of these bytes sees NaN
  const bool owned = !m.aliased;
  m.aliased = false;
  c10::StorageImpl* storage = m.buffer.storage().unsafeGetStorageImpl();
  c10::DataPtr memory = storage->set_data_ptr(allocate(0));
  storage->set_nbytes(0);
  m.held = false;
  // Keep the largest spares: a smaller one could not serve every bucket.
  if (owned && memory.get() != nullptr && m.capacity > 0) {
    spares_.push_back({m.capacity, std::move(memory)});
    std::sort(spares_.begin(), spares_.end(), [](const Spare& x, const Spare& y) { return x.capacity > y.capacity; });
    if (spares_.size() > kSpareBuffers) spares_.pop_back();
  }
}

void FlatParams::materialize(int b) {
  BucketMemory& m = memory_[static_cast<size_t>(b)];
  const size_t bytes = m.buffer.nbytes();
  c10::StorageImpl* storage = m.buffer.storage().unsafeGetStorageImpl();
  // The smallest spare that holds it, else new memory.
  auto fit = spares_.end();
  for (auto it = spares_.begin(); it != spares_.end(); ++it)
    if (it->capacity >= bytes) fit = it;
  if (fit != spares_.end()) {
    m.capacity = fit->capacity;
    storage->set_data_ptr_noswap(std::move(fit->memory));
    spares_.erase(fit);
  } else {
    m.capacity = bytes;
    storage->set_data_ptr_noswap(allocate(bytes));
  }
  storage->set_nbytes(bytes);
  m.held = true;
  poison_if_debugging(m.buffer);  // what the gather does not write stays NaN
}

void FlatParams::materialize_as(int b, const at::Tensor& memory) {
  BucketMemory& m = memory_[static_cast<size_t>(b)];
  const size_t bytes = m.buffer.nbytes();
  if (memory.nbytes() != bytes || !memory.is_contiguous()) {
    throw Error("internal: a bucket can only view contiguous memory of its own size", "stage3");
  }
  c10::StorageImpl* storage = m.buffer.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(memory.data_ptr(), memory.device()));  // not owning
  storage->set_nbytes(bytes);
  m.held = true;
  m.aliased = true;
}

void FlatParams::own_aliased(int b) {
  BucketMemory& m = memory_[static_cast<size_t>(b)];
  if (!m.aliased) return;
  void* viewed = m.buffer.data_ptr();  // still alive: its owner outlives this call
  materialize(b);
  m.aliased = false;
  m.buffer.copy_(at::from_blob(viewed, m.buffer.sizes(), m.buffer.options()));
}

}  // namespace zero::engine
