// The chunk manager's update and its state outside steps. The update follows the chunk plan's
// step copies in order (gradients down, device and host optimizer steps, weights up, ZeRO 1-2
// gathers, round-trip chunks back down), each element getting the same float ops in the same
// order as without offload, so the bits match. Checkpoints materialise the buckets whole, read
// or write them with the trainer's ordinary code, then reload and give them back.
#include <algorithm>

#include "tessel/executor/host_optimizer.hpp"
#include "chunk_manager.hpp"

namespace tessel::executor {

namespace {
std::pair<std::size_t, std::size_t> owned_part(const ChunkPiece& piece, std::size_t first, std::size_t count) {
  const std::size_t from = std::max(piece.bucket_offset, first), to = std::min(piece.bucket_offset + piece.size, first + count);
  return {from, to > from ? to : from};
}
}  // namespace

void ChunkManager::update(const kernels::AdamWParams& p, const Buffer* clip_factor) {
  // The host writes the master weights below: earlier fetches must have read them; the
  // gradients come from the syncs on the gradient group's stream.
  backend_.synchronize(Stream::copy);
  backend_.wait_for(Stream::copy, grid_.gradients().stream());
  const bool clipped = clip_factor != nullptr;
  float host_scale = 1.0f;
  if (clipped) {
    backend_.download(Stream::compute, &host_scale, clip_factor->data(), sizeof host_scale);
    backend_.synchronize(Stream::compute);
  }
  for (const ChunkCopy& copy : chunk_plan_.copies) {
    if (copy.op != ops::offload_grads_d2h) continue;
    HostChunk& h = chunks_[std::size_t(copy.chunk)];
    auto timed = timeline_.time(copy.op_id, Stream::copy);
    for (const ChunkPiece& piece : h.pieces) {
      GradientBucket& b = (*buckets_)[std::size_t(piece.bucket)];
      const auto [from, to] = owned_part(piece, b.owned_offset(), b.owned_size());
      if (from == to) continue;
      backend_.download(Stream::copy, h.grads.data() + piece.chunk_offset + (from - piece.bucket_offset),
                        b.owned_grads() + (from - b.owned_offset()), (to - from) * sizeof(float));
      device_to_host_bytes_ += double(to - from) * sizeof(float);
    }
    backend_.synchronize(Stream::copy);
  }
  // Buckets with any device-optimized chunk step whole on the device, as without
  // offload (a call over part of a bucket would place elements differently, see
  // host_optimizer.hpp); their host-optimized elements' device copies are overwritten
  // before they are read again (fetched, or sent up below).
  bool any_on_device = false;
  for (std::size_t i = 0; i < buckets_->size(); ++i) any_on_device = any_on_device || device_optimized_[i];
  if (any_on_device) {
    auto timed = timeline_.time(ops::step_op_id(ops::optimizer));
    const float* device_scale = clipped ? clip_factor->f32() : nullptr;
    for (std::size_t i = 0; i < buckets_->size(); ++i) {
      GradientBucket& b = (*buckets_)[i];
      if (!device_optimized_[i]) continue;
      backend_.adamw_step(Stream::compute, b.owned_params(), b.owned_grads(), b.moment1.f32(), b.moment2.f32(),
                          std::int64_t(b.owned_size()), p, device_scale);
    }
  }
  std::vector<HostAdamWPiece> pieces;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    if (!chunk_plan_.chunks[c].optimizer_on_host) continue;
    HostChunk& h = chunks_[c];
    for (const ChunkPiece& piece : h.pieces) {
      GradientBucket& b = (*buckets_)[std::size_t(piece.bucket)];
      const auto [from, to] = owned_part(piece, b.owned_offset(), b.owned_size());
      if (from == to) continue;
      const std::size_t at = piece.chunk_offset + (from - piece.bucket_offset);
      // The reference call: the bucket's owned range, from a 64-byte aligned allocation.
      const std::uintptr_t address = b.shards_weights() ? 0 : b.owned_offset() * sizeof(float);
      pieces.push_back({h.weights.data() + at, h.grads.data() + at, h.moment1.data() + at, h.moment2.data() + at,
                        std::int64_t(to - from),
                        {address, std::int64_t(b.owned_size()), std::int64_t(from - b.owned_offset())}});
    }
  }
  if (!pieces.empty()) {
    const bool chunked = plan_.parallel.offload == OffloadMode::chunked;
    auto timed = timeline_.time(ops::step_op_id(chunked ? ops::optimizer_host : ops::optimizer));
    host_adamw_step(pieces, p, clipped ? &host_scale : nullptr);
  }
  stream_updated_weights();
}

// The updated weights go up, are gathered and come back down chunk by chunk in the
// plan's order, so that the device holds the whole weights of a few buckets at a time,
// not of every host-resident one: a bucket is gathered once every chunk holding a piece
// of it is up, a round-trip chunk goes down once its buckets are gathered, and an
// evictable bucket is released once its chunks are down (chunk_plan.hpp: the update's
// round trip, which the named budget counts).
void ChunkManager::stream_updated_weights() {
  std::vector<int> uploads_left(buckets_->size(), 0), downloads_left(buckets_->size(), 0);
  std::vector<const ChunkCopy*> ups, downs;
  for (const ChunkCopy& copy : chunk_plan_.copies) {
    const bool up = copy.op == ops::offload_params_h2d, down = copy.op == ops::offload_params_d2h;
    if (!up && !down) continue;
    (up ? ups : downs).push_back(&copy);
    for (int b : chunks_[std::size_t(copy.chunk)].buckets) ++(up ? uploads_left : downloads_left)[std::size_t(b)];
  }
  std::vector<bool> gathered(buckets_->size(), false);
  auto all_gathered = [&](int chunk) {
    const std::vector<int>& of = chunks_[std::size_t(chunk)].buckets;
    return std::all_of(of.begin(), of.end(), [&](int b) { return bool(gathered[std::size_t(b)]); });
  };
  std::size_t next_down = 0;
  auto send_down = [&](bool all) {
    for (; next_down < downs.size() && (all || all_gathered(downs[next_down]->chunk)); ++next_down) {
      const ChunkCopy& copy = *downs[next_down];
      backend_.wait_for(Stream::copy, grid_.gradients().stream());  // the gathers rebuilt what goes down
      {
        auto timed = timeline_.time(copy.op_id, Stream::copy);
        device_to_host_bytes_ += download_chunk_weights(copy.chunk, false);
      }
      for (int b : chunks_[std::size_t(copy.chunk)].buckets) {
        if (--downloads_left[std::size_t(b)] == 0 && evictable_[std::size_t(b)] && held_[std::size_t(b)] == 0) {
          release_weights(b);
        }
      }
    }
  };
  for (const ChunkCopy* copy : ups) {
    const std::vector<int>& of = chunks_[std::size_t(copy->chunk)].buckets;
    for (int b : of) acquire_weights(b);
    {
      auto timed = timeline_.time(copy->op_id, Stream::copy);
      host_to_device_bytes_ += upload_chunk_weights(copy->chunk, true);
    }
    for (int b : of) {
      if (--uploads_left[std::size_t(b)] > 0) continue;
      buckets_->gather_bucket_weights((*buckets_)[std::size_t(b)]);
      gathered[std::size_t(b)] = true;
    }
    send_down(false);
  }
  buckets_->gather_updated_weights(gathered);
  send_down(true);
  for (std::size_t i = 0; i < buckets_->size(); ++i) {
    if (evictable_[i] && held_[i] == 0) release_weights(int(i));
  }
}

void ChunkManager::materialise() {
  pool_->set_enforcing(false);
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& chunk = chunk_plan_.chunks[c];
    HostChunk& h = chunks_[c];
    if (chunk.host_resident) {
      for (int b : h.buckets) acquire_weights(b);
      upload_chunk_weights(int(c), false);
    }
    if (!chunk.optimizer_on_host) continue;
    for (const ChunkPiece& piece : h.pieces) {
      GradientBucket& b = (*buckets_)[std::size_t(piece.bucket)];
      for (Buffer* moment : {&b.moment1, &b.moment2}) {
        if (moment->empty()) moment->assign(b.owned_size(), 0.0f);
      }
      const auto [from, to] = owned_part(piece, b.owned_offset(), b.owned_size());
      if (from == to) continue;
      const std::size_t at = piece.chunk_offset + (from - piece.bucket_offset), bytes = (to - from) * sizeof(float);
      backend_.upload(Stream::compute, b.moment1.f32() + (from - b.owned_offset()), h.moment1.data() + at, bytes);
      backend_.upload(Stream::compute, b.moment2.f32() + (from - b.owned_offset()), h.moment2.data() + at, bytes);
    }
  }
  backend_.synchronize();
}

void ChunkManager::reload() {
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    HostChunk& h = chunks_[c];
    if (!h.weights.empty()) download_chunk_weights(int(c), false);
    if (!chunk_plan_.chunks[c].optimizer_on_host) continue;
    for (const ChunkPiece& piece : h.pieces) {
      GradientBucket& b = (*buckets_)[std::size_t(piece.bucket)];
      const auto [from, to] = owned_part(piece, b.owned_offset(), b.owned_size());
      if (from == to) continue;
      const std::size_t at = piece.chunk_offset + (from - piece.bucket_offset), bytes = (to - from) * sizeof(float);
      backend_.download(Stream::compute, h.moment1.data() + at, b.moment1.f32() + (from - b.owned_offset()), bytes);
      backend_.download(Stream::compute, h.moment2.data() + at, b.moment2.f32() + (from - b.owned_offset()), bytes);
    }
  }
  backend_.synchronize();
}

void ChunkManager::dematerialise() {
  for (std::size_t i = 0; i < buckets_->size(); ++i) {
    if (evictable_[i] && held_[i] == 0) release_weights(int(i));
    if (!device_optimized_[i]) (*buckets_)[i].moment1.release(), (*buckets_)[i].moment2.release();
  }
  pool_->set_enforcing(true);
}

}  // namespace tessel::executor
