// Reads a safetensors file back for tests, checking the framing as the format's specification
// states it: an 8-byte little-endian header length, a JSON header, data starting 8-byte aligned,
// and tensors whose data_offsets tile the data exactly, with no gap or overlap.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

struct SafetensorsFile {
  nlohmann::json header;  // without __metadata__
  nlohmann::json metadata;
  std::string data;       // everything after the header
};

inline SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile file;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  unsigned char length[8] = {};
  in.read(reinterpret_cast<char*>(length), 8);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | length[i];  // little-endian, whatever the host
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  EXPECT_EQ((8 + header_size) % 8, 0u) << "data must start 8-byte aligned";
  file.header = nlohmann::json::parse(header);
  file.metadata = file.header.value("__metadata__", nlohmann::json::object());
  file.header.erase("__metadata__");
  file.data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : file.header.items()) {
    ranges.emplace_back(entry.at("data_offsets").at(0).get<uint64_t>(), entry.at("data_offsets").at(1).get<uint64_t>());
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_EQ(begin, next) << "tensors must tile the data";
    next = end;
  }
  EXPECT_EQ(next, file.data.size()) << "every byte belongs to one tensor";
  return file;
}
