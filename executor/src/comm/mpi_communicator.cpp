#include "tessel/executor/comm/mpi_communicator.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/kernels/numeric.hpp"

// One macro for every MPI return code.
#define TESSEL_MPI_CHECK(call)                                                                    \
  do {                                                                                            \
    const int tessel_mpi_rc = (call);                                                             \
    if (tessel_mpi_rc != MPI_SUCCESS) {                                                           \
      char tessel_mpi_text[MPI_MAX_ERROR_STRING];                                                 \
      int tessel_mpi_length = 0;                                                                  \
      MPI_Error_string(tessel_mpi_rc, tessel_mpi_text, &tessel_mpi_length);                       \
      throw ::tessel::Error(fmt::format("MPI call {} failed: {}", #call, tessel_mpi_text));       \
    }                                                                                             \
  } while (false)

namespace tessel::executor {

namespace {

// bf16 and fp16 have no MPI type: they travel as 16-bit words and reduce through these
// user operations (each element widened to fp32, combined, rounded back), the
// arithmetic the GPU collectives use.
template <bool bf16, bool max>
void reduce_half_words(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = bf16 ? kernels::numeric::from_bf16(a[i]) : kernels::numeric::from_f16(a[i]);
    const float y = bf16 ? kernels::numeric::from_bf16(b[i]) : kernels::numeric::from_f16(b[i]);
    const float r = max ? std::max(x, y) : x + y;
    b[i] = bf16 ? kernels::numeric::to_bf16(r) : kernels::numeric::to_f16(r);
  }
}

MPI_Datatype mpi_type(DType type) {
  switch (type) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    case DType::f8_e4m3: return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

class MpiRequest final : public CommRequest {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  void wait() override { TESSEL_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE)); }
  ~MpiRequest() override {
    if (request != MPI_REQUEST_NULL) MPI_Wait(&request, MPI_STATUS_IGNORE);
  }
};

// Host memory only: a CUDA backend's ranks reach it through HostStagedCommunicator.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    TESSEL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    TESSEL_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override { TESSEL_MPI_CHECK(MPI_Barrier(comm_)); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    TESSEL_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 protected:
  void do_all_reduce(void* data, std::size_t n, DType type, ReduceOp op) override {
    if (size_ == 1) return;
    TESSEL_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, int(n), mpi_type(type), reduce_op(op, type), comm_));
    count(Collective::all_reduce, bytes(n, type));
  }
  std::unique_ptr<CommRequest> do_all_reduce_async(void* data, std::size_t n, DType type, ReduceOp op) override {
    auto request = std::make_unique<MpiRequest>();
    if (size_ == 1) return request;
    TESSEL_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, data, int(n), mpi_type(type), reduce_op(op, type), comm_, &request->request));
    count(Collective::all_reduce, bytes(n, type));
    return request;
  }
  void do_all_gather(const void* send_, void* recv_, std::size_t n, DType type) override {
    TESSEL_MPI_CHECK(MPI_Allgather(send_, int(n), mpi_type(type), recv_, int(n), mpi_type(type), comm_));
    count(Collective::all_gather, bytes(n, type) * size_);
  }
  void do_reduce_scatter(const void* send_, void* recv_, std::size_t n, DType type) override {
    TESSEL_MPI_CHECK(
        MPI_Reduce_scatter_block(send_, recv_, int(n), mpi_type(type), reduce_op(ReduceOp::sum, type), comm_));
    count(Collective::reduce_scatter, bytes(n, type) * size_);
  }
  std::unique_ptr<CommRequest> do_reduce_scatter_async(const void* send_, void* recv_, std::size_t n,
                                                       DType type) override {
    auto request = std::make_unique<MpiRequest>();
    TESSEL_MPI_CHECK(MPI_Ireduce_scatter_block(send_, recv_, int(n), mpi_type(type), reduce_op(ReduceOp::sum, type),
                                               comm_, &request->request));
    count(Collective::reduce_scatter, bytes(n, type) * size_);
    return request;
  }
  void do_broadcast(void* data, std::size_t n, DType type, int root) override {
    if (size_ == 1) return;
    TESSEL_MPI_CHECK(MPI_Bcast(data, int(n), mpi_type(type), root, comm_));
    count(Collective::broadcast, bytes(n, type), CollectiveAlgorithm::tree);
  }
  void do_reduce(const void* send_, void* recv_, std::size_t n, DType type, int root) override {
    if (size_ == 1) {
      if (send_ != recv_) std::memmove(recv_, send_, std::size_t(bytes(n, type)));
      return;
    }
    TESSEL_MPI_CHECK(MPI_Reduce(send_, rank_ == root ? recv_ : nullptr, int(n), mpi_type(type),
                                reduce_op(ReduceOp::sum, type), root, comm_));
    count(Collective::reduce, bytes(n, type), CollectiveAlgorithm::tree);
  }
  std::unique_ptr<CommRequest> do_send_async(const void* data, std::size_t n, DType type, int peer, int tag) override {
    auto request = std::make_unique<MpiRequest>();
    TESSEL_MPI_CHECK(MPI_Isend(data, int(n), mpi_type(type), peer, tag, comm_, &request->request));
    count(Collective::send_recv, bytes(n, type));
    return request;
  }
  void do_recv(void* data, std::size_t n, DType type, int peer, int tag) override {
    TESSEL_MPI_CHECK(MPI_Recv(data, int(n), mpi_type(type), peer, tag, comm_, MPI_STATUS_IGNORE));
  }
  // MPI_Alltoallv with displacements from the counts (blocks back to back in rank order).
  void do_all_to_all_v(const void* send_, std::span<const std::size_t> send_counts, void* recv_,
                       std::span<const std::size_t> recv_counts, DType type) override {
    const auto ranks = static_cast<std::size_t>(size_);
    std::vector<int> send_n(ranks), send_at(ranks), recv_n(ranks), recv_at(ranks);
    int send_total = 0, recv_total = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      send_n[r] = int(send_counts[r]), send_at[r] = send_total, send_total += send_n[r];
      recv_n[r] = int(recv_counts[r]), recv_at[r] = recv_total, recv_total += recv_n[r];
    }
    TESSEL_MPI_CHECK(MPI_Alltoallv(send_, send_n.data(), send_at.data(), mpi_type(type), recv_, recv_n.data(),
                                   recv_at.data(), mpi_type(type), comm_));
    count_all_to_all(send_counts, type);
  }

 private:
  static double bytes(std::size_t n, DType type) { return double(n) * double(kernels::element_bytes(type)); }
  static MPI_Op reduce_op(ReduceOp op, DType type);

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

MPI_Op MpiCommunicator::reduce_op(ReduceOp op, DType type) {
  if (type != DType::bf16 && type != DType::f16) return op == ReduceOp::sum ? MPI_SUM : MPI_MAX;
  // Created once, after MPI_Init (communicators exist only after it).
  static const std::array<MPI_Op, 4> half_ops = [] {
    std::array<MPI_Op, 4> made{};
    TESSEL_MPI_CHECK(MPI_Op_create(&reduce_half_words<true, false>, 1, &made[0]));
    TESSEL_MPI_CHECK(MPI_Op_create(&reduce_half_words<true, true>, 1, &made[1]));
    TESSEL_MPI_CHECK(MPI_Op_create(&reduce_half_words<false, false>, 1, &made[2]));
    TESSEL_MPI_CHECK(MPI_Op_create(&reduce_half_words<false, true>, 1, &made[3]));
    return made;
  }();
  return half_ops[(type == DType::bf16 ? 0 : 2) + (op == ReduceOp::max ? 1 : 0)];
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
}  // namespace

Communicator& mpi_world() {
  static MpiCommunicator* world = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      TESSEL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
      std::atexit(finalize_mpi);
    }
    return new MpiCommunicator(MPI_COMM_WORLD, false);
  }();
  return *world;
}

void abort_all_ranks(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

Communicator& mpi_self() {
  mpi_world();  // initialises MPI
  static MpiCommunicator self(MPI_COMM_SELF, false);
  return self;
}

}  // namespace tessel::executor
