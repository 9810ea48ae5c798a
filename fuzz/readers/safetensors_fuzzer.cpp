// A safetensors file and a sharded model's index from a stranger (issue 37). The first byte
// chooses: even, the rest is one model.safetensors, opened and every tensor's first and last
// byte read; odd, the rest is model.safetensors.index.json beside a valid shard, the model
// opened, every tensor found and touched.
#include <string>

#include "checkpoint/safetensors_reader.h"
#include "fuzz_input.h"

namespace {

void touch(const zero::checkpoint::SafetensorsFile& file, const zero::checkpoint::SafetensorsTensor& t) {
  const auto* bytes = static_cast<const volatile unsigned char*>(file.data(t));
  if (t.end > t.begin) (void)(bytes[0] + bytes[t.end - t.begin - 1]);
  file.release(t);
}

// A valid shard of two tensors, for the index to name: the header, then 8 + 4 bytes of data.
std::string valid_shard() {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header + std::string(12, '\x01');
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    const std::string path = fuzz::write_file("one/model.safetensors", rest);
    fuzz::only_clear_errors("SafetensorsFile", [&] {
      zero::checkpoint::SafetensorsFile file(path);
      for (const auto& t : file.tensors()) touch(file, t);
    });
  } else {
    static const std::string shard = fuzz::write_file("sharded/model-00001-of-00001.safetensors", valid_shard());
    const std::string index = fuzz::write_file("sharded/model.safetensors.index.json", rest);
    fuzz::only_clear_errors("SafetensorsModel", [&] {
      zero::checkpoint::SafetensorsModel model((fuzz::scratch() / "sharded").string());
      (void)model.total_bytes();
      for (const std::string& name : model.names()) {
        const auto found = model.find(name);
        if (found.file) touch(*found.file, *found.tensor);
      }
    });
  }
  return 0;
}
