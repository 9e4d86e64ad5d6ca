// A world of one rank: every collective is the identity (a copy where input and output
// differ). For single-process runs and tests that need no MPI; copies go through the
// backend whose memory the pointers are.
#pragma once

#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

class SingleRankCommunicator final : public Communicator {
 public:
  explicit SingleRankCommunicator(kernels::Backend& backend = kernels::cpu_backend()) : backend_(backend) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SingleRankCommunicator>(backend_); }

 protected:
  void do_all_reduce(void*, std::size_t, DType, ReduceOp) override {}
  std::unique_ptr<CommRequest> do_all_reduce_async(void*, std::size_t, DType, ReduceOp) override {
    return completed_request();
  }
  void do_all_gather(const void* send, void* recv, std::size_t count, DType type) override { copy(send, recv, count, type); }
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DType type) override {
    copy(send, recv, count, type);
  }
  std::unique_ptr<CommRequest> do_reduce_scatter_async(const void* send, void* recv, std::size_t count,
                                                       DType type) override {
    copy(send, recv, count, type);
    return completed_request();
  }
  void do_broadcast(void*, std::size_t, DType, int) override {}
  void do_reduce(const void* send, void* recv, std::size_t count, DType type, int) override {
    copy(send, recv, count, type);
  }
  std::unique_ptr<CommRequest> do_send_async(const void*, std::size_t, DType, int peer, int) override;
  void do_recv(void*, std::size_t, DType, int peer, int) override;
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, DType type) override;

 private:
  void copy(const void* from, void* to, std::size_t count, DType type) {
    if (from != to) backend_.copy(stream(), to, from, count * kernels::element_bytes(type));
  }
  kernels::Backend& backend_;
};

}  // namespace tessel::executor
