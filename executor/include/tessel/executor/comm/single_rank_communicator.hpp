// A world of one rank: every collective is the identity. For single-process reference
// runs and tests that need no MPI.
#pragma once

#include <cstring>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce(float*, std::size_t, ReduceOp) override {}
  std::unique_ptr<CommRequest> all_reduce_async(float*, std::size_t, ReduceOp) override { return done(); }
  void all_gather(const float* send, float* recv, std::size_t count) override {
    if (send != recv) std::memcpy(recv, send, count * sizeof(float));
  }
  void reduce_scatter(const float* send, float* recv, std::size_t count) override {
    if (send != recv) std::memcpy(recv, send, count * sizeof(float));
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const float* send, float* recv, std::size_t count) override {
    reduce_scatter(send, recv, count);
    return done();
  }
  void broadcast(float*, std::size_t, int) override {}
  void reduce(const float* send, float* recv, std::size_t count, int) override {
    if (send != recv) std::memcpy(recv, send, count * sizeof(float));
  }
  void send(const float*, std::size_t, int peer, int) override {
    throw Error(fmt::format("send to rank {} in a world of one rank", peer));
  }
  std::unique_ptr<CommRequest> send_async(const float* data, std::size_t count, int peer, int tag) override {
    send(data, count, peer, tag);
    return done();
  }
  void recv(float*, std::size_t, int peer, int) override {
    throw Error(fmt::format("recv from rank {} in a world of one rank", peer));
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SingleRankCommunicator>(); }

 private:
  static std::unique_ptr<CommRequest> done() {
    struct Done final : CommRequest {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
};

}  // namespace tessel::executor
