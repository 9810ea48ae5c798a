// A checkpoint's manifest.json from a stranger (issue 37): the reader checks it key by key, and
// every file it names must stay inside the checkpoint's directory. Then what a load asks of it:
// each parameter's shape, size and state kinds, small reads of each, the random states, and a
// verification of every file (the directory holds the seed's real files, and one outside it).
#include <algorithm>
#include <fstream>
#include <iterator>
#include <vector>

#include "checkpoint/reader.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool laid_out = [] {
    fuzz::write_file("ckpt/latest", "t");
    // The files of the checkpoint whose manifest is the seed (zero-train, 2 ranks, stage 2, bf16:
    // fuzz/seeds/checkpoint_manifest/), so that a manifest close to it reads real data.
    for (const char* name : {"rank0.bin", "rank1.bin", "rank0.rng", "rank1.rng"}) {
      std::ifstream in(std::string(ZERO_FUZZ_DATA) + "/checkpoint/" + name, std::ios::binary);
      fuzz::write_file(std::string("ckpt/t/") + name, std::string(std::istreambuf_iterator<char>(in), {}));
    }
    fuzz::write_file("outside.bin", std::string(64, '\x03'));  // what ../ would reach
    return true;
  }();
  (void)laid_out;
  fuzz::write_file("ckpt/t/manifest.json", fuzz::as_text(data, size));
  fuzz::only_clear_errors("CheckpointReader", [&] {
    zero::checkpoint::CheckpointReader reader((fuzz::scratch() / "ckpt").string());
    std::vector<float> out(16);
    std::vector<uint16_t> out16(16);
    for (int p = 0; p < reader.num_params(); ++p) {
      (void)reader.shape(p);
      const int64_t n = std::min<int64_t>(reader.numel(p), 16);
      for (const char* kind : {"master", "exp_avg", "exp_avg_sq"}) {
        const int k = reader.kind(kind);
        if (k >= 0 && n > 0) reader.read(p, k, 0, n, out.data());
      }
      if (!reader.params16_dtype().empty() && n > 0) reader.read16(p, 0, n, out16.data());
    }
    (void)reader.rng_state(0);
    (void)reader.files();
    reader.verify_all();
  });
  return 0;
}
