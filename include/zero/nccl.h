// The NCCL backend for CUDA tensors (built only with -DZERO_WITH_CUDA=ON against a CUDA LibTorch).
//
//   auto gpu = zero::make_nccl_communicator(world, world.local_rank());
//   gpu->all_reduce(grads_on_gpu)->wait();
//
// Collectives run on a dedicated CUDA stream that first waits for the caller's current stream;
// wait() makes the caller's current stream wait for the collective (it does not block the host),
// test() asks whether it has finished. Consistency checks and split() go through the MPI world it
// was bootstrapped from. float16/bfloat16 reductions are NCCL's own (accumulated in the 16-bit type
// between ranks), unlike the MPI backend's float32 accumulation.
#pragma once

#include <memory>

#include "zero/communicator.h"
#include "zero/world.h"

namespace zero {

// Collective over the world: every rank calls it with the CUDA device it will use.
std::unique_ptr<Communicator> make_nccl_communicator(World& world, int device);

}  // namespace zero
