// How ranks talk: one interface, with an MPI implementation now and an NCCL one with the
// CUDA backend. Every call counts the bytes and messages this rank sends, defined as
// the planner counts them (nccl-tests size x bus factor; latency steps of a ring), so
// tests can hold the executor's traffic against the planner's prediction.
// Collectives are on fp32 buffers; counts are elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tessel::executor {

enum class ReduceOp { sum, max };

struct CommCounters {
  double bytes_sent = 0;
  double messages = 0;
};

// A non-blocking operation in flight.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(float* data, std::size_t count, ReduceOp op = ReduceOp::sum) = 0;
  virtual std::unique_ptr<CommRequest> all_reduce_async(float* data, std::size_t count,
                                                        ReduceOp op = ReduceOp::sum) = 0;
  // recv holds size() x count_per_rank elements, rank r's block at r x count_per_rank.
  virtual void all_gather(const float* send, float* recv, std::size_t count_per_rank) = 0;
  // send holds size() x count_per_rank elements; recv gets this rank's reduced block.
  virtual void reduce_scatter(const float* send, float* recv, std::size_t count_per_rank) = 0;
  virtual std::unique_ptr<CommRequest> reduce_scatter_async(const float* send, float* recv,
                                                            std::size_t count_per_rank) = 0;
  virtual void broadcast(float* data, std::size_t count, int root) = 0;
  // Sums every rank's `send` into `recv` on `root` (recv is ignored elsewhere).
  virtual void reduce(const float* send, float* recv, std::size_t count, int root) = 0;
  virtual void send(const float* data, std::size_t count, int peer, int tag) = 0;
  // `data` must stay valid until the request completes. Pipeline stages send this way,
  // so that two neighbours sending to each other at once cannot deadlock.
  virtual std::unique_ptr<CommRequest> send_async(const float* data, std::size_t count, int peer, int tag) = 0;
  virtual void recv(float* data, std::size_t count, int peer, int tag) = 0;
  virtual void barrier() = 0;

  // A communicator over the ranks that pass the same `color`, ordered by `key`.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 protected:
  CommCounters counters_;
};

}  // namespace tessel::executor
