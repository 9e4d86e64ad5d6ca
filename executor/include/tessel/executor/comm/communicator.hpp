// How ranks talk: one interface, MPI (CPU ranks, and GPU ranks sharing a device via host
// staging) and NCCL (a rank per GPU). Every call counts bytes and messages as the planner does
// (nccl-tests size x bus factor), so tests hold traffic to predictions. A call reads its inputs
// after the compute stream's earlier work, and compute work after a blocking call or a wait()
// sees its result; on a GPU collectives run on the Program's comm streams and overlap compute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tessel/core/collective.hpp"
#include "tessel/executor/buffer.hpp"

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

// A request that is already complete.
std::unique_ptr<CommRequest> completed_request();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A communicator over the ranks that pass the same `color`, ordered by `key`
  // (collective: every rank calls it, in the same order).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  virtual void barrier() = 0;

  Stream stream() const { return stream_; }
  void set_stream(Stream stream) { stream_ = stream; }

  void all_reduce(void* data, std::size_t count, DType type, ReduceOp op = ReduceOp::sum) {
    if (count > 0) do_all_reduce(data, count, type, op);
  }
  std::unique_ptr<CommRequest> all_reduce_async(void* data, std::size_t count, DType type,
                                                ReduceOp op = ReduceOp::sum) {
    if (count == 0) return completed_request();
    return do_all_reduce_async(data, count, type, op);
  }
  // recv holds size() x count_per_rank elements, rank r's block at r x count_per_rank.
  void all_gather(const void* send, void* recv, std::size_t count_per_rank, DType type) {
    if (count_per_rank > 0) do_all_gather(send, recv, count_per_rank, type);
  }
  // send holds size() x count_per_rank elements; recv gets this rank's reduced block.
  void reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType type) {
    if (count_per_rank > 0) do_reduce_scatter(send, recv, count_per_rank, type);
  }
  std::unique_ptr<CommRequest> reduce_scatter_async(const void* send, void* recv, std::size_t count_per_rank,
                                                    DType type) {
    if (count_per_rank == 0) return completed_request();
    return do_reduce_scatter_async(send, recv, count_per_rank, type);
  }
  void broadcast(void* data, std::size_t count, DType type, int root) {
    if (count > 0) do_broadcast(data, count, type, root);
  }
  // Sums every rank's `send` into `recv` on `root` (recv is ignored elsewhere).
  void reduce(const void* send, void* recv, std::size_t count, DType type, int root) {
    if (count > 0) do_reduce(send, recv, count, type, root);
  }
  // `data` must stay valid until the request completes. Pipeline stages send this way,
  // so that two neighbours sending to each other at once cannot deadlock.
  std::unique_ptr<CommRequest> send_async(const void* data, std::size_t count, DType type, int peer, int tag) {
    return do_send_async(data, count, type, peer, tag);
  }
  void send(const void* data, std::size_t count, DType type, int peer, int tag) {
    send_async(data, count, type, peer, tag)->wait();
  }
  void recv(void* data, std::size_t count, DType type, int peer, int tag) { do_recv(data, count, type, peer, tag); }

  // All-to-all (MoE dispatch and combine): `send` holds size() blocks of count_per_rank
  // elements, block r for rank r; `recv` gets rank r's block at r x count_per_rank.
  void all_to_all(const void* send, void* recv, std::size_t count_per_rank, DType type);
  // Variable sizes: `send` holds send_counts[r] elements for rank r, blocks back to back
  // in rank order; `recv` gets recv_counts[r] elements from rank r, in rank order. Both
  // lists have size() entries and agree across ranks (send_counts[r] on rank q equals
  // recv_counts[q] on rank r): exchange them first with the equal form when unknown.
  // No arithmetic happens, so the result is the same bits on every implementation.
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                    std::span<const std::size_t> recv_counts, DType type);

  // fp32 host or backend memory, for scalars and tests.
  void all_reduce(float* data, std::size_t count, ReduceOp op = ReduceOp::sum) {
    all_reduce(data, count, DType::f32, op);
  }
  // Whole buffers, their type and length.
  void all_reduce(Buffer& data, ReduceOp op = ReduceOp::sum) { all_reduce(data.data(), data.size(), data.type(), op); }

  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 protected:
  virtual void do_all_reduce(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  virtual std::unique_ptr<CommRequest> do_all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, void* recv, std::size_t count_per_rank, DType type) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType type) = 0;
  virtual std::unique_ptr<CommRequest> do_reduce_scatter_async(const void* send, void* recv,
                                                               std::size_t count_per_rank, DType type) = 0;
  virtual void do_broadcast(void* data, std::size_t count, DType type, int root) = 0;
  virtual void do_reduce(const void* send, void* recv, std::size_t count, DType type, int root) = 0;
  virtual std::unique_ptr<CommRequest> do_send_async(const void* data, std::size_t count, DType type, int peer,
                                                     int tag) = 0;
  virtual void do_recv(void* data, std::size_t count, DType type, int peer, int tag) = 0;
  // Counts are checked (size() entries each) before this is called.
  virtual void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                               std::span<const std::size_t> recv_counts, DType type) = 0;

  // Counted with the planner's and the simulator's formulas (profiles/collectives.hpp):
  // bytes sent = the call's nccl-tests size x bus factor, messages = the algorithm's
  // latency steps (rings for the collectives, trees for broadcast and reduce).
  void count(Collective collective, double size_bytes, CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring);
  // An all-to-all sends what leaves this rank (the blocks for the other ranks): for equal
  // blocks that is the planner's size x (n-1)/n; messages are the n-1 pairwise steps.
  void count_all_to_all(std::span<const std::size_t> send_counts, DType type);

  CommCounters counters_;

 private:
  Stream stream_ = Stream::compute;
};

}  // namespace tessel::executor
