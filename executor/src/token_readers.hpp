// The readers behind open_token_source, one per format, each in its own file
// (token_megatron.cpp, token_nanogpt.cpp, token_llmc.cpp); token_open.cpp picks one.
// Each maps its file(s) and returns a TokenSource over the ids, or throws tessel::Error
// naming the file and what is wrong with it.
#pragma once

#include <string>

#include "mapped_file.hpp"
#include "tessel/executor/token_source.hpp"

namespace tessel::executor {

// Megatron-LM's indexed dataset PREFIX.bin + PREFIX.idx; `prefix` has no extension.
TokenSource read_megatron(const std::string& prefix);
// nanoGPT's headerless flat file of `dtype` ids.
TokenSource read_nanogpt(std::shared_ptr<const MappedFile> file, TokenDType dtype);
// llm.c's shard: a 256 x int32 header, then the ids.
TokenSource read_llmc(std::shared_ptr<const MappedFile> file);
// Whether the file starts with one of llm.c's magic numbers.
bool starts_with_llmc_magic(const MappedFile& file);
// Throws tessel::Error when the file is almost an llm.c shard (a magic near llm.c's, or a
// 1024-byte header whose ints after the count are zero) without llm.c's magic: read as
// headerless tokens, its header would be trained on.
void refuse_almost_llmc(const MappedFile& file);

}  // namespace tessel::executor
