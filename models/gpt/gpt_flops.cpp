#include "models/gpt/gpt_flops.h"

namespace zero::gpt {

GptFlops gpt_flops_per_token(const GptShape& s, int64_t seq, int64_t checkpoint_every) {
  const double C = static_cast<double>(s.channels), T = static_cast<double>(seq);
  const double block = 24 * C * C + 4 * C * T;
  GptFlops f;
  f.forward = static_cast<double>(s.layers) * block + 2 * C * static_cast<double>(s.vocab);
  f.backward = 2 * f.forward;
  if (checkpoint_every > 0) {
    const int64_t checkpointed = (s.layers + checkpoint_every - 1) / checkpoint_every;
    f.recompute = static_cast<double>(checkpointed) * block;
  }
  return f;
}

}  // namespace zero::gpt
