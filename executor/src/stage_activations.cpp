// The stage's kept activations (stage_activations.hpp): slots sized by the schedule,
// their bytes, and packing into the storage type.
#include "stage_activations.hpp"

#include <algorithm>

namespace tessel::executor {

StageActivations::StageActivations(const std::vector<PipelineStep>& schedule, int chunks, int micro_batches,
                                   std::size_t layers_here, bool head, Recompute recompute, AttentionForm attention,
                                   kernels::Backend& backend, DType compute, DType storage)
    : packs(storage != compute), backend_(backend), storage_(storage), micro_batches_(micro_batches) {
  std::size_t in_flight = 0, most = 0;
  for (const PipelineStep& step : schedule) {
    in_flight += step.pass == Pass::forward ? 1 : std::size_t(-1);
    most = std::max(most, in_flight);
  }
  const std::size_t slots = std::max<std::size_t>(most, 1);
  slot_of_.assign(std::size_t(chunks * micro_batches), 0);
  for (std::size_t slot = slots; slot-- > 0;) free_slots_.push_back(int(slot));
  kept.resize(slots);
  for (auto& per_layer : kept) {
    per_layer.resize(layers_here);
    for (LayerActivations& a : per_layer) a.bind(backend, compute);
  }
  // The probabilities selective recompute rebuilds live within one layer's backward:
  // workspace. Full recompute rebuilds them with the layer's other activations.
  recompute_scratch.bind(backend, compute);
  recompute_out.bind(backend, compute, MemoryCategory::activations);
  for (Buffer* b : {&forward_qkv, &forward_att_heads}) b->bind(backend, compute);
  probs_scratch.bind(backend, compute,
                     recompute == Recompute::full ? MemoryCategory::activations : MemoryCategory::workspace);
  if (packs) {
    packed.resize(slots);
    for (auto& per_layer : packed) per_layer.resize(layers_here);
  } else if (recompute == Recompute::none && attention == AttentionForm::materialized) {
    kept_probs.resize(slots);
    for (auto& per_layer : kept_probs) {
      for (std::size_t i = 0; i < layers_here; ++i) {
        per_layer.emplace_back(backend, compute).set_category(MemoryCategory::activations);
      }
    }
  }
  heads.resize(head ? slots : 0);
  for (HeadActivations& h : heads) h.bind(backend, compute);
}

std::size_t StageActivations::take_slot(int chunk, int mb) {
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  slot_of_[std::size_t(chunk * micro_batches_ + mb)] = slot;
  return std::size_t(slot);
}

std::size_t StageActivations::kept_bytes() const {
  std::size_t bytes = 0;
  for (const auto& per_layer : kept) {
    for (const LayerActivations& a : per_layer) {
      for (auto member : LayerActivations::kSaved) bytes += (a.*member).bytes();
      for (auto member : LayerActivations::kRowStatistics) bytes += (a.*member).bytes();
    }
  }
  for (const auto& per_layer : kept_probs) {
    for (const Buffer& probs : per_layer) bytes += probs.bytes();
  }
  for (const auto& per_layer : packed) {
    for (const PackedActivations& p : per_layer) {
      for (const Buffer& tensor : p.saved) bytes += tensor.bytes();
      for (const Buffer& stats : p.row_statistics) bytes += stats.bytes();
      bytes += p.probs.bytes();
    }
  }
  return bytes;
}

void StageActivations::pack(const LayerActivations& a, const Buffer* probs, PackedActivations& into) {
  constexpr std::size_t saved = std::size(LayerActivations::kSaved);
  if (into.saved.size() != saved) {
    into.saved.clear();
    for (std::size_t i = 0; i < saved; ++i) {
      into.saved.emplace_back(backend_, storage_).set_category(MemoryCategory::activations);
    }
    into.row_statistics.clear();
    for (std::size_t i = 0; i < std::size(LayerActivations::kRowStatistics); ++i) {
      into.row_statistics.emplace_back(backend_, DType::f32).set_category(MemoryCategory::activations);
    }
    into.probs = Buffer(backend_, storage_);
    into.probs.set_category(MemoryCategory::activations);
  }
  for (std::size_t i = 0; i < saved; ++i) {
    const Buffer& from = a.*LayerActivations::kSaved[i];
    into.saved[i].resize(from.size());
    backend_.convert(Stream::compute, into.saved[i].ref(), from.cref(), std::int64_t(from.size()));
  }
  for (std::size_t i = 0; i < std::size(LayerActivations::kRowStatistics); ++i) {
    into.row_statistics[i].copy_from(a.*LayerActivations::kRowStatistics[i]);
  }
  into.probs.resize(probs ? probs->size() : 0);
  if (probs) backend_.convert(Stream::compute, into.probs.ref(), probs->cref(), std::int64_t(probs->size()));
}

void StageActivations::unpack(const PackedActivations& from_packed, LayerActivations& a, Buffer* probs) {
  for (std::size_t i = 0; i < from_packed.saved.size(); ++i) {
    Buffer& to = a.*LayerActivations::kSaved[i];
    to.resize(from_packed.saved[i].size());
    backend_.convert(Stream::compute, to.ref(), from_packed.saved[i].cref(), std::int64_t(to.size()));
  }
  for (std::size_t i = 0; i < from_packed.row_statistics.size(); ++i) {
    (a.*LayerActivations::kRowStatistics[i]).copy_from(from_packed.row_statistics[i]);
  }
  if (probs) {
    probs->resize(from_packed.probs.size());
    backend_.convert(Stream::compute, probs->ref(), from_packed.probs.cref(), std::int64_t(probs->size()));
  }
}

}  // namespace tessel::executor
