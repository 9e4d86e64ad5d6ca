// The activations a stage keeps from each forward to its backward, in slots: one per
// (chunk, micro-batch) in flight, as many as the schedule ever has between a forward and
// its backward (1 with gradient accumulation, pp - s on stage s with 1F1B, m with GPipe).
// What a slot keeps follows the recompute mode; it is packed into the storage type when
// that differs from the compute type (llm.c's ActivationTensors, per slot).
#pragma once

#include <vector>

#include "tessel/core/schedule.hpp"
#include "tessel/executor/gpt_stage.hpp"

namespace tessel::executor {

struct StageActivations {
  // Slots for `schedule`'s steps; `layers_here` layers each, a head's where `head`.
  StageActivations(const std::vector<PipelineStep>& schedule, int chunks, int micro_batches, std::size_t layers_here,
                   bool head, Recompute recompute, AttentionForm attention, kernels::Backend& backend, DType compute,
                   DType storage);
  // A (chunk, micro-batch) takes a free slot at its forward and gives it back at the end
  // of its backward.
  std::size_t take_slot(int chunk, int mb);
  std::size_t slot_of(int chunk, int mb) const {
    return std::size_t(slot_of_[std::size_t(chunk * micro_batches_ + mb)]);
  }
  void give_back(std::size_t slot) { free_slots_.push_back(int(slot)); }
  std::size_t slots() const { return kept.size(); }
  // Bytes of layer activations held for backwards, counted from the buffers.
  std::size_t kept_bytes() const;
  // Into and out of the storage type (`probs`: the kept probabilities, when kept).
  void pack(const LayerActivations& a, const Buffer* probs, PackedActivations& into);
  void unpack(const PackedActivations& from_packed, LayerActivations& a, Buffer* probs);

  const bool packs;                                    // kept in another type than computed
  std::vector<std::vector<LayerActivations>> kept;     // [slot][position of the layer on this rank]
  std::vector<std::vector<Buffer>> kept_probs;         // recompute none, materialised attention
  std::vector<std::vector<PackedActivations>> packed;  // [slot][layer here], when packing
  std::vector<HeadActivations> heads;                  // [slot], on the last stage
  // The layer full recompute rebuilds (or bf16 storage unpacks) and its input: the
  // activations of the one layer in its backward.
  LayerActivations recompute_scratch;
  Buffer probs_scratch, recompute_out;
  Buffer forward_qkv, forward_att_heads;  // lent to each kept layer's forward (workspace)

 private:
  kernels::Backend& backend_;
  DType storage_;
  int micro_batches_;
  std::vector<int> slot_of_, free_slots_;
};

}  // namespace tessel::executor
