// nanoGPT's flat token files (data/openwebtext/prepare.py, data/shakespeare/prepare.py
// in karpathy/nanoGPT): the ids of the whole split as raw little-endian uint16 written
// by numpy's tofile, no header, documents separated by the tokeniser's end-of-text token.
// With no header the dtype cannot be read from the file: --data-dtype gives it (uint32
// for vocabularies past 65535).
#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "token_readers.hpp"

namespace tessel::executor {

TokenSource read_nanogpt(std::shared_ptr<const MappedFile> file, TokenDType dtype) {
  const std::size_t item = token_bytes(dtype);
  if (file->size_bytes() == 0) throw Error(fmt::format("--data: {}: empty file", file->path()));
  if (file->size_bytes() % item != 0) {
    throw Error(fmt::format("--data: {}: {} bytes, not a whole number of {}-byte {} tokens (truncated?)",
                            file->path(), file->size_bytes(), item, to_string(dtype)));
  }
  const std::byte* first = file->data();
  const std::uint64_t count = file->size_bytes() / item;
  const std::string origin = file->path();
  return TokenSource(std::move(file), first, count, dtype, origin, TokenFormat::nanogpt);
}

}  // namespace tessel::executor
