// A Hugging Face config.json from a stranger (issue 37): read as the Llama family's config, then
// the tensors and the parameter count it implies (sizes are bounded before anything is sized).
#include "fuzz_input.h"
#include "models/llama/llama_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("config.json", fuzz::as_text(data, size));
  fuzz::only_clear_errors("read_llama_config", [&] {
    const zero::llama::LlamaConfig config = zero::llama::read_llama_config(path);
    (void)zero::llama::llama_tensors(config).size();
    (void)zero::llama::llama_parameter_count(config);
  });
  return 0;
}
