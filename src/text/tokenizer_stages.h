// The stages of a tokenizer.json between the text and the model, each built from its JSON block:
// normalizers and pre-tokenizers on the way in, decoders on the way out, the post-processor's
// template around the ids. `path` (e.g. "tokenizer.json: pre_tokenizer.pretokenizers[0]") names
// the block in errors: a type or option that is not built is refused by name.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zero::text {

using Normalize = std::function<void(std::string&)>;
using PreTokenize = std::function<std::vector<std::string>(std::vector<std::string>)>;  // pieces → finer pieces
using Decode = std::function<std::vector<std::string>(std::vector<std::string>)>;       // tokens → strings
using PostProcess = std::function<std::vector<int32_t>(std::vector<int32_t>)>;          // ids → with specials

// A null block gives the identity.
Normalize build_normalizer(const nlohmann::json& block, const std::string& path);
PreTokenize build_pre_tokenizer(const nlohmann::json& block, const std::string& path);
Decode build_decoder(const nlohmann::json& block, const std::string& path);
PostProcess build_post_processor(const nlohmann::json& block, const std::string& path);

// GPT-2's byte-level alphabet: every byte as a printable character (UTF-8), and back.
const std::string& byte_char(uint8_t byte);
std::string byte_level_bytes(const std::string& token);  // the bytes its characters stand for
std::string byte_level_chars(const std::string& bytes);

}  // namespace zero::text
