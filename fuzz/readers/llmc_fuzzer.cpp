// llm.c's files from a stranger (issue 37). The first byte chooses: a model checkpoint (header
// and parameters), a token shard, or a tokenizer (then a few tokens decoded).
#include "fuzz_input.h"
#include "models/gpt/llmc_files.h"
#include "models/gpt/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string path = fuzz::write_file("llmc.bin", fuzz::as_text(data + 1, size - 1));
  switch (data[0] % 3) {
    case 0:
      fuzz::only_clear_errors("read_llmc_checkpoint", [&] { (void)zero::gpt::read_llmc_checkpoint(path); });
      break;
    case 1:
      fuzz::only_clear_errors("read_token_shard", [&] { (void)zero::gpt::read_token_shard(path, 50257); });
      break;
    default:
      fuzz::only_clear_errors("Tokenizer::from_llmc", [&] {
        const zero::gpt::Tokenizer tokenizer = zero::gpt::Tokenizer::from_llmc(path);
        (void)tokenizer.decode({0, 1, tokenizer.vocab() - 1, tokenizer.vocab(), -1});
      });
  }
  return 0;
}
