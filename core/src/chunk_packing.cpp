// Packing tensors into chunks and the chunk-size search (Fang et al., IEEE TPDS 34(1),
// 2022: Gemini picks the chunk size that wastes the fewest bytes over a range of sizes).
// Packing is greedy in execution order, as a chunk manager that registers tensors one by
// one does, so the executor can rebuild the same chunks; the search tries a fixed,
// evenly spaced set of aligned sizes, so the result is a function of the shapes alone.
#include <algorithm>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/error.hpp"

namespace tessel {

namespace {
std::int64_t round_up(std::int64_t value, std::int64_t to) { return (value + to - 1) / to * to; }
}  // namespace

ChunkPacking pack_in_order(const std::vector<std::int64_t>& sizes, const std::vector<int>& group,
                           std::int64_t chunk_elements, std::int64_t alignment) {
  if (sizes.size() != group.size() || alignment <= 0 || chunk_elements <= 0) {
    throw Error("internal: pack_in_order needs one group per size and positive sizes");
  }
  ChunkPacking out;
  out.chunk_elements = chunk_elements;
  out.alignment_elements = alignment;
  bool open = false;  // the last chunk takes more items
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::int64_t size = sizes[i];
    const bool same_group = i > 0 && group[i] == group[i - 1];
    if (size > chunk_elements) {  // outsized: a chunk of its own
      out.capacity.push_back(round_up(size, alignment));
      out.used.push_back(size);
      out.first_item.push_back(int(i));
      open = false;
      continue;
    }
    if (open && same_group && out.used.back() + size <= out.capacity.back()) {
      out.used.back() += size;
      continue;
    }
    out.capacity.push_back(chunk_elements);
    out.used.push_back(size);
    out.first_item.push_back(int(i));
    open = true;
  }
  for (std::size_t c = 0; c < out.capacity.size(); ++c) out.wasted_elements += out.capacity[c] - out.used[c];
  return out;
}

ChunkPacking search_chunk_size(const std::vector<std::int64_t>& sizes, const std::vector<int>& group,
                               const std::vector<bool>& searched_item, std::int64_t alignment, int candidates) {
  std::int64_t largest = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (searched_item[i]) largest = std::max(largest, sizes[i]);
  }
  if (largest == 0) {
    for (std::int64_t size : sizes) largest = std::max(largest, size);
  }
  const std::int64_t lower = round_up(std::max<std::int64_t>(largest, 1), alignment);
  const int steps = std::max(candidates, 1);
  const std::int64_t step = round_up(std::max<std::int64_t>(lower / steps, 1), alignment);
  ChunkPacking best;
  bool have = false;
  for (int k = 0; k < steps; ++k) {
    const std::int64_t size = lower + std::int64_t(k) * step;
    if (size > 2 * lower) break;
    ChunkPacking packing = pack_in_order(sizes, group, size, alignment);
    if (!have || packing.wasted_elements < best.wasted_elements) {
      best = std::move(packing);
      have = true;
    }
  }
  return best;
}

}  // namespace tessel
