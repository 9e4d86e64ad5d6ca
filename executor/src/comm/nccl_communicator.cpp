// The NCCL communicator (nccl_communicator.hpp). Ordering goes through the backend's
// stream waits: a call makes the communicator's stream wait for the compute stream (its
// inputs are ready), enqueues the NCCL call on it, and a blocking call or a request's
// wait() makes the compute stream wait for the communicator's stream. No call blocks the
// host except communicator creation (ncclCommInitRank is collective).
#include "tessel/executor/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/kernels/cuda/cuda_backend.hpp"

// One macro for every NCCL return code.
#define TESSEL_NCCL_CHECK(call)                                                                    \
  do {                                                                                             \
    const ncclResult_t tessel_nccl_rc = (call);                                                    \
    if (tessel_nccl_rc != ncclSuccess) {                                                           \
      throw ::tessel::Error(fmt::format("NCCL call {} failed: {}", #call, ncclGetErrorString(tessel_nccl_rc))); \
    }                                                                                              \
  } while (false)

namespace tessel::executor {

namespace {

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::f8_e4m3: return ncclFloat8e4m3;
  }
  throw Error("internal: an element type NCCL does not know");
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::max ? ncclMax : ncclSum; }

double bytes_of(std::size_t count, DType type) { return double(count) * double(kernels::element_bytes(type)); }

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device);
  ~NcclCommunicator() override;
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void barrier() override {
    flush_sends();
    host_->barrier();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    flush_sends();
    auto sub = std::make_unique<NcclCommunicator>(host_->split(color, key), device_);
    sub->set_stream(stream());
    return sub;
  }

  // Issues every held send up to and including send `id`.
  void flush_through(std::uint64_t id) {
    if (id >= issued_through_) flush_sends();
  }
  // Compute-stream work submitted from now on sees this communicator's results.
  void results_visible() {
    if (stream() != Stream::compute) device_.wait_for(Stream::compute, stream());
  }

 protected:
  void do_all_reduce(void* data, std::size_t count, DType type, ReduceOp op) override {
    enqueue_all_reduce(data, count, type, op);
    results_visible();
  }
  std::unique_ptr<CommRequest> do_all_reduce_async(void* data, std::size_t count, DType type, ReduceOp op) override {
    enqueue_all_reduce(data, count, type, op);
    return request(std::nullopt);
  }
  void do_all_gather(const void* send, void* recv, std::size_t n, DType type) override {
    inputs_ready();
    TESSEL_NCCL_CHECK(ncclAllGather(send, recv, n, nccl_type(type), comm_, native()));
    count(Collective::all_gather, bytes_of(n, type) * size());
    results_visible();
  }
  void do_reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DType type) override {
    enqueue_reduce_scatter(send, recv, count_per_rank, type);
    results_visible();
  }
  std::unique_ptr<CommRequest> do_reduce_scatter_async(const void* send, void* recv, std::size_t count_per_rank,
                                                       DType type) override {
    if (count_per_rank > 0) enqueue_reduce_scatter(send, recv, count_per_rank, type);
    return request(std::nullopt);
  }
  void do_broadcast(void* data, std::size_t count, DType type, int root) override {
    inputs_ready();
    TESSEL_NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type(type), root, comm_, native()));
    count_call(Collective::broadcast, bytes_of(count, type), CollectiveAlgorithm::tree);
    results_visible();
  }
  void do_reduce(const void* send, void* recv, std::size_t count, DType type, int root) override {
    inputs_ready();
    TESSEL_NCCL_CHECK(ncclReduce(send, recv, count, nccl_type(type), ncclSum, root, comm_, native()));
    count_call(Collective::reduce, bytes_of(count, type), CollectiveAlgorithm::tree);
    results_visible();
  }
  std::unique_ptr<CommRequest> do_send_async(const void* data, std::size_t n, DType type, int peer,
                                             int) override {
    // The data is ready now (the compute stream's work so far); the send itself waits
    // for the next receive or for its request.
    if (stream() != Stream::compute) device_.wait_for(stream(), Stream::compute);
    held_sends_.push_back({data, n, type, peer});
    count(Collective::send_recv, bytes_of(n, type));
    return request(next_send_id_++);
  }
  void do_recv(void* data, std::size_t count, DType type, int peer, int) override {
    if (stream() != Stream::compute) device_.wait_for(stream(), Stream::compute);  // the buffer is free
    TESSEL_NCCL_CHECK(ncclGroupStart());
    issue_held_sends();
    TESSEL_NCCL_CHECK(ncclRecv(data, count, nccl_type(type), peer, comm_, native()));
    TESSEL_NCCL_CHECK(ncclGroupEnd());
    results_visible();
  }
  // NCCL has no all-to-all primitive: one group of a send and a receive per peer (this
  // rank included), which NCCL runs as one operation, so no pairing order can deadlock.
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, DType type) override {
    inputs_ready();
    const std::size_t element = kernels::element_bytes(type);
    std::size_t send_at = 0, recv_at = 0;
    TESSEL_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size(); ++peer) {
      const std::size_t out = send_counts[std::size_t(peer)], in = recv_counts[std::size_t(peer)];
      if (out > 0) {
        TESSEL_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + send_at * element, out, nccl_type(type), peer,
                                   comm_, native()));
      }
      if (in > 0) {
        TESSEL_NCCL_CHECK(
            ncclRecv(static_cast<char*>(recv) + recv_at * element, in, nccl_type(type), peer, comm_, native()));
      }
      send_at += out, recv_at += in;
    }
    TESSEL_NCCL_CHECK(ncclGroupEnd());
    count_all_to_all(send_counts, type);
    results_visible();
  }

 private:
  struct HeldSend {
    const void* data;
    std::size_t count;
    DType type;
    int peer;
  };
  class Request;

  cudaStream_t native() { return kernels::cuda::native_stream(device_, stream()); }
  void inputs_ready() {
    flush_sends();
    if (stream() != Stream::compute) device_.wait_for(stream(), Stream::compute);
  }
  void count_call(Collective collective, double size_bytes, CollectiveAlgorithm algorithm) {
    if (size() > 1) count(collective, size_bytes, algorithm);
  }
  void enqueue_all_reduce(void* data, std::size_t n, DType type, ReduceOp op) {
    inputs_ready();
    TESSEL_NCCL_CHECK(ncclAllReduce(data, data, n, nccl_type(type), nccl_op(op), comm_, native()));
    count_call(Collective::all_reduce, bytes_of(n, type), CollectiveAlgorithm::ring);
  }
  void enqueue_reduce_scatter(const void* send, void* recv, std::size_t n, DType type) {
    inputs_ready();
    TESSEL_NCCL_CHECK(ncclReduceScatter(send, recv, n, nccl_type(type), ncclSum, comm_, native()));
    count(Collective::reduce_scatter, bytes_of(n, type) * size());
  }
  // Inside an NCCL group, or alone.
  void issue_held_sends() {
    for (const HeldSend& s : held_sends_) {
      TESSEL_NCCL_CHECK(ncclSend(s.data, s.count, nccl_type(s.type), s.peer, comm_, native()));
    }
    held_sends_.clear();
    issued_through_ = next_send_id_;
  }
  void flush_sends() {
    if (held_sends_.empty()) return;
    TESSEL_NCCL_CHECK(ncclGroupStart());
    issue_held_sends();
    TESSEL_NCCL_CHECK(ncclGroupEnd());
  }
  std::unique_ptr<CommRequest> request(std::optional<std::uint64_t> send_id);

  std::unique_ptr<Communicator> host_;
  kernels::Backend& device_;
  ncclComm_t comm_ = nullptr;
  std::vector<HeldSend> held_sends_;
  std::uint64_t next_send_id_ = 0, issued_through_ = 0;  // sends below issued_through_ are enqueued
};

// An enqueued collective, or a held send: waiting issues the send and orders the
// compute stream after the communicator's stream.
class NcclCommunicator::Request final : public CommRequest {
 public:
  Request(NcclCommunicator& owner, std::optional<std::uint64_t> send_id) : owner_(owner), send_id_(send_id) {}
  void wait() override {
    if (done_) return;
    if (send_id_) owner_.flush_through(*send_id_);
    owner_.results_visible();
    done_ = true;
  }
  ~Request() override {
    // A dropped request still sends its data (the peer waits for it).
    if (!done_ && send_id_) {
      try {
        owner_.flush_through(*send_id_);
      } catch (const Error&) {
      }
    }
  }

 private:
  NcclCommunicator& owner_;
  std::optional<std::uint64_t> send_id_;
  bool done_ = false;
};

std::unique_ptr<CommRequest> NcclCommunicator::request(std::optional<std::uint64_t> send_id) {
  return std::make_unique<Request>(*this, send_id);
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device)
    : host_(std::move(host)), device_(device) {
  const int device_index = kernels::cuda::device_of(device_);
  ncclUniqueId id{};
  static_assert(sizeof(id) % sizeof(std::int32_t) == 0);
  if (host_->rank() == 0) TESSEL_NCCL_CHECK(ncclGetUniqueId(&id));
  host_->broadcast(&id, sizeof(id) / sizeof(std::int32_t), DType::i32, 0);
  if (const cudaError_t status = cudaSetDevice(device_index); status != cudaSuccess) {
    throw Error(fmt::format("cudaSetDevice({}) failed: {}", device_index, cudaGetErrorString(status)));
  }
  TESSEL_NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()));
  host_->reset_counters();  // the id's broadcast is setup, not traffic
}

NcclCommunicator::~NcclCommunicator() {
  try {
    flush_sends();
  } catch (const Error&) {
  }
  if (comm_ != nullptr) {
    ncclCommFinalize(comm_);
    ncclCommDestroy(comm_);
  }
}

}  // namespace

bool nccl_built() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, kernels::Backend& device) {
  return std::make_unique<NcclCommunicator>(std::move(host), device);
}

}  // namespace tessel::executor
