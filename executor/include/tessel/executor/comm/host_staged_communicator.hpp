// A communicator for ranks whose tensors live in device memory but cannot use NCCL (several
// ranks on one GPU, which NCCL refuses, or no NCCL): each call copies its input to the host
// after the compute stream's earlier work, runs MPI on it and copies the result back in stream
// order. With the CPU backend the copies are memcpys, so the whole path is tested on CPU ranks.
#pragma once

#include <vector>

#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

class HostStagedCommunicator final : public Communicator {
 public:
  // Takes the host communicator; `device` is the backend whose memory calls pass in.
  HostStagedCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device);
  ~HostStagedCommunicator() override;
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void barrier() override { host_->barrier(); }
  std::unique_ptr<Communicator> split(int color, int key) override;

 protected:
  void do_all_reduce(void* data, std::size_t count, DType type, ReduceOp op) override;
  std::unique_ptr<CommRequest> do_all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) override;
  void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType type) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType type) override;
  std::unique_ptr<CommRequest> do_reduce_scatter_async(const void* send, void* recv, std::size_t count_per_rank,
                                                       DType type) override;
  void do_broadcast(void* data, std::size_t count, DType type, int root) override;
  void do_reduce(const void* send, void* recv, std::size_t count, DType type, int root) override;
  std::unique_ptr<CommRequest> do_send_async(const void* data, std::size_t count, DType type, int peer,
                                             int tag) override;
  void do_recv(void* data, std::size_t count, DType type, int peer, int tag) override;
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, DType type) override;

 private:
  class Staging;  // pinned host memory of the device backend, from the pool below
  class StagedRequest;
  struct PinnedBlock {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  PinnedBlock take_block(std::size_t bytes);
  std::unique_ptr<Staging> stage_in(const void* device, std::size_t bytes);
  void stage_out(const Staging& staging, void* device, std::size_t bytes);
  void sync_counters();

  std::unique_ptr<Communicator> host_;
  kernels::Backend& device_;
  std::vector<PinnedBlock> free_blocks_;  // released by finished calls, reused by the next
  CommCounters host_seen_;                 // host_'s counters at the last sync
};

}  // namespace tessel::executor
