// Writers of the token formats tessel reads (nanoGPT, llm.c, Megatron-LM's indexed
// dataset), written from each format's definition, not from tessel's readers, so the
// tests check the readers against the formats. Shared by the token reader tests and the
// CLI's --data tests; the formats in brief below.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

//  - nanoGPT (karpathy/nanoGPT data/*/prepare.py): the ids as raw little-endian uint16
//    (numpy tofile), no header; uint32 for large vocabularies.
//  - llm.c (karpathy/llm.c dev/data/data_common.py, write_datafile): 256 int32 header
//    {magic, version, token count, 0...}, then the ids; 20240520/1/uint16 for GPT-2,
//    20240801/7/uint32 for Llama 3.
//  - Megatron-LM (megatron/core/datasets/indexed_dataset.py, _IndexWriter): PREFIX.bin the
//    ids of each sequence back to back; PREFIX.idx "MMIDIDX\0\0", uint64 version 1, uint8
//    dtype code, uint64 sequence count, uint64 document count, int32 sizes, int64 byte
//    pointers, int64 document indices (0, then the sequence count after each document).

namespace tessel_token_test {

inline void append_bytes(std::string& out, const void* value, std::size_t bytes) {
  out.append(static_cast<const char*>(value), bytes);
}

template <typename T>
void append_as(std::string& out, std::int64_t value) {
  const T typed = static_cast<T>(value);
  append_bytes(out, &typed, sizeof(T));
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Ids of `bytes_per_id` (2: uint16, 4: uint32) bytes each.
inline std::string flat_ids(const std::vector<std::int64_t>& ids, int bytes_per_id) {
  std::string out;
  for (std::int64_t id : ids) {
    if (bytes_per_id == 2) append_as<std::uint16_t>(out, id);
    else append_as<std::uint32_t>(out, id);
  }
  return out;
}

inline void write_nanogpt(const std::string& path, const std::vector<std::int64_t>& ids, int bytes_per_id = 2) {
  write_bytes(path, flat_ids(ids, bytes_per_id));
}

// `llama3`: magic 20240801 version 7 uint32; otherwise GPT-2's 20240520 version 1 uint16.
inline std::string llmc_shard(const std::vector<std::int64_t>& ids, bool llama3 = false) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = llama3 ? 20240801 : 20240520;
  header[1] = llama3 ? 7 : 1;
  header[2] = std::int32_t(ids.size());
  std::string out;
  append_bytes(out, header.data(), header.size() * sizeof(std::int32_t));
  return out + flat_ids(ids, llama3 ? 4 : 2);
}

inline void write_llmc(const std::string& path, const std::vector<std::int64_t>& ids, bool llama3 = false) {
  write_bytes(path, llmc_shard(ids, llama3));
}

struct MegatronFiles {
  std::string bin, idx;
};

// One sequence per document, as preprocess_data.py writes without sentence splitting.
// `dtype_code` 8 writes uint16 ids, 4 int32 (Megatron's choice past 65500 tokens).
inline MegatronFiles megatron_dataset(const std::vector<std::vector<std::int64_t>>& documents, int dtype_code = 8) {
  const std::size_t item = dtype_code == 8 ? 2 : 4;
  MegatronFiles files;
  std::vector<std::int32_t> sizes;
  std::vector<std::int64_t> pointers, document_indices{0};
  for (const auto& document : documents) {
    pointers.push_back(std::int64_t(files.bin.size()));
    sizes.push_back(std::int32_t(document.size()));
    files.bin += flat_ids(document, int(item));
    document_indices.push_back(std::int64_t(sizes.size()));
  }
  files.idx.append("MMIDIDX\0\0", 9);
  append_as<std::uint64_t>(files.idx, 1);
  append_as<std::uint8_t>(files.idx, dtype_code);
  append_as<std::uint64_t>(files.idx, std::int64_t(sizes.size()));
  append_as<std::uint64_t>(files.idx, std::int64_t(document_indices.size()));
  append_bytes(files.idx, sizes.data(), sizes.size() * sizeof(std::int32_t));
  append_bytes(files.idx, pointers.data(), pointers.size() * sizeof(std::int64_t));
  append_bytes(files.idx, document_indices.data(), document_indices.size() * sizeof(std::int64_t));
  return files;
}

inline void write_megatron(const std::string& prefix, const std::vector<std::vector<std::int64_t>>& documents,
                           int dtype_code = 8) {
  const MegatronFiles files = megatron_dataset(documents, dtype_code);
  write_bytes(prefix + ".bin", files.bin);
  write_bytes(prefix + ".idx", files.idx);
}

// Cuts `ids` into documents of 1, 2, 3, ... ids (the last one what is left).
inline std::vector<std::vector<std::int64_t>> as_documents(const std::vector<std::int64_t>& ids) {
  std::vector<std::vector<std::int64_t>> documents;
  std::size_t at = 0;
  for (std::size_t length = 1; at < ids.size(); ++length) {
    const std::size_t take = std::min(length, ids.size() - at);
    documents.emplace_back(ids.begin() + std::ptrdiff_t(at), ids.begin() + std::ptrdiff_t(at + take));
    at += take;
  }
  return documents;
}

}  // namespace tessel_token_test
