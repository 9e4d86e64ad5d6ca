// The CUDA backend's memory, streams, timing marks and factory. Everything is enqueued on the
// stream it names and returns without waiting unless the interface asks (synchronize,
// elapsed_s); memory goes through the stream-safe block cache (memory/block_cache.hpp). The
// constructor makes the backend's device current once (one device per rank): a thread that
// drives two devices calls cudaSetDevice itself.
#include <algorithm>
#include <string>

#include "cuda_backend_impl.hpp"
#include "cuda_elements.cuh"
#include "cudnn_sdpa.hpp"
#include "tessel/core/error.hpp"
#include "tessel/kernels/cuda/cuda_backend.hpp"

namespace tessel::kernels {

namespace cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(std::string("cuda: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
              cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string("cublasLt: ") + what + " failed with status " + std::to_string(int(status)));
}

void check_launch(const char* op) { check(cudaGetLastError(), op); }

// ---- the block cache's device: memory and fences ----

CudaBlockDevice::~CudaBlockDevice() {
  for (auto& [id, events] : fences_)
    for (cudaEvent_t event : events) cudaEventDestroy(event);
  for (cudaEvent_t event : spare_) cudaEventDestroy(event);
}

void* CudaBlockDevice::allocate(std::size_t bytes) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  void* block = nullptr;
  const cudaError_t status = cudaMalloc(&block, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the error: the cache gives memory back and tries again
    return nullptr;
  }
  check(status, "cudaMalloc");
  return block;
}

void CudaBlockDevice::release(void* block) { cudaFree(block); }

std::uint64_t CudaBlockDevice::record_fence() {
  std::array<cudaEvent_t, kStreamCount> events{};
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (spare_.empty()) {
      check(cudaEventCreateWithFlags(&events[i], cudaEventDisableTiming), "cudaEventCreate (allocator fence)");
    } else {
      events[i] = spare_.back();
      spare_.pop_back();
    }
    check(cudaEventRecord(events[i], streams_[i]), "cudaEventRecord (allocator fence)");
  }
  fences_.emplace(next_fence_, events);
  return next_fence_++;
}

bool CudaBlockDevice::passed(std::uint64_t fence) {
  for (cudaEvent_t event : fences_.at(fence)) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(status, "cudaEventQuery (allocator fence)");
  }
  return true;
}

void CudaBlockDevice::wait(std::uint64_t fence) {
  for (cudaEvent_t event : fences_.at(fence)) check(cudaEventSynchronize(event), "cudaEventSynchronize");
}

void CudaBlockDevice::forget(std::uint64_t fence) {
  const auto found = fences_.find(fence);
  if (found == fences_.end()) return;
  for (cudaEvent_t event : found->second) spare_.push_back(event);
  fences_.erase(found);
}

// ---- the backend's life ----

namespace {
// Gives back what a backend holds, ignoring errors: runs from the destructor and from a
// constructor that failed half way.
void release_handles(std::array<cudaStream_t, kStreamCount>& streams, cublasLtHandle_t& lt, cudaEvent_t& origin,
                     std::vector<cudaEvent_t>& marks, std::vector<cudaEvent_t>& spare) {
  for (cudaStream_t stream : streams)
    if (stream) cudaStreamSynchronize(stream);
  for (cudaEvent_t event : marks) cudaEventDestroy(event);
  for (cudaEvent_t event : spare) cudaEventDestroy(event);
  marks.clear();
  spare.clear();
  if (origin) cudaEventDestroy(origin);
  origin = nullptr;
  if (lt) cublasLtDestroy(lt);
  lt = nullptr;
  for (cudaStream_t& stream : streams) {
    if (stream) cudaStreamDestroy(stream);
    stream = nullptr;
  }
}
}  // namespace

CudaBackend::CudaBackend(int device) : device_(device), block_device_(device, streams_), allocator_(block_device_) {
  try {
    check(cudaSetDevice(device_), "cudaSetDevice");
    for (cudaStream_t& stream : streams_) check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cublasLtCreate(&lt_), "cublasLtCreate");
    check(cudaEventCreate(&origin_), "cudaEventCreate");
    reset_origin();
  } catch (...) {
    release_handles(streams_, lt_, origin_, marks_, spare_events_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  for (cudaStream_t stream : streams_)
    if (stream) cudaStreamSynchronize(stream);
  for (void*& block : workspace_) {
    if (block) allocator_.deallocate(block);
    block = nullptr;
  }
  cudnn_.reset();  // its plans and handle, while the streams it ran on still exist
  release_handles(streams_, lt_, origin_, marks_, spare_events_);
}

void* CudaBackend::workspace(Stream s, std::size_t bytes) {
  const auto i = static_cast<std::size_t>(s);
  if (workspace_bytes_[i] >= bytes && workspace_[i]) return workspace_[i];
  // Growing: ops already queued on this stream may still read the old block, and a freed
  // block can go to another stream at once, so wait for them first (rare: sizes settle).
  if (workspace_[i]) {
    check(cudaStreamSynchronize(native(s)), "cudaStreamSynchronize");
    allocator_.deallocate(workspace_[i]);
    workspace_[i] = nullptr;
  }
  const std::size_t rounded = BlockCache::rounded_bytes(bytes);
  workspace_[i] = allocator_.allocate(rounded);
  workspace_bytes_[i] = rounded;
  return workspace_[i];
}

// ---- memory ----

void* CudaBackend::allocate(std::size_t bytes) { return allocator_.allocate(bytes); }

void CudaBackend::deallocate(void* pointer) { allocator_.deallocate(pointer); }

std::size_t CudaBackend::device_peak_bytes() {
  // What the device has in use now beyond the allocator's blocks (the context, cuBLASLt
  // and NCCL workspaces) is taken as constant and added to the allocator's peak.
  // cudaMemGetInfo sees the whole device: other processes on it count too.
  check(cudaSetDevice(device_), "cudaSetDevice");
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  const std::size_t used = total_bytes - free_bytes;
  const std::size_t reserved = allocator_.live_bytes() + allocator_.cached_bytes();
  return allocator_.peak_reserved_bytes() + (used > reserved ? used - reserved : 0);
}

void* CudaBackend::allocate_host(std::size_t bytes) {
  void* host = nullptr;
  check(cudaMallocHost(&host, bytes == 0 ? 1 : bytes), "cudaMallocHost");
  return host;
}

void CudaBackend::deallocate_host(void* pointer) {
  if (pointer) check(cudaFreeHost(pointer), "cudaFreeHost");
}

void CudaBackend::upload(Stream s, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, native(s)), "upload (cudaMemcpyAsync)");
}

void CudaBackend::download(Stream s, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, native(s)), "download (cudaMemcpyAsync)");
}

void CudaBackend::copy(Stream s, void* destination, const void* source, std::size_t bytes) {
  if (bytes == 0 || destination == source) return;
  check(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, native(s)), "copy (cudaMemcpyAsync)");
}

// ---- streams and timing ----

void CudaBackend::wait_for(Stream waiter, Stream producer) {
  if (waiter == producer) return;
  // cudaStreamWaitEvent captures the event as recorded now, so the event may go at once;
  // CUDA frees it when the producer reaches it.
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t recorded = cudaEventRecord(event, native(producer));
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(native(waiter), event, 0) : recorded;
  cudaEventDestroy(event);
  check(waited, "wait_for (cudaStreamWaitEvent)");
}

void CudaBackend::synchronize(Stream s) { check(cudaStreamSynchronize(native(s)), "cudaStreamSynchronize"); }

void CudaBackend::synchronize() {
  for (cudaStream_t stream : streams_) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

// The origin is "now": every stream is drained first, so the event is not recorded
// behind queued work (ranks call this after a barrier to share a clock).
void CudaBackend::reset_origin() {
  synchronize();
  check(cudaEventRecord(origin_, native(Stream::compute)), "cudaEventRecord");
  check(cudaEventSynchronize(origin_), "cudaEventSynchronize");
}

TimeMark CudaBackend::mark(Stream s) {
  cudaEvent_t event = nullptr;
  if (!spare_events_.empty()) {
    event = spare_events_.back();
    spare_events_.pop_back();
  } else {
    check(cudaEventCreate(&event), "cudaEventCreate");
  }
  const cudaError_t recorded = cudaEventRecord(event, native(s));
  if (recorded != cudaSuccess) {
    spare_events_.push_back(event);
    check(recorded, "mark (cudaEventRecord)");
  }
  marks_.push_back(event);
  return TimeMark(marks_.size() - 1);
}

double CudaBackend::elapsed_s(TimeMark mark) {
  if (mark >= marks_.size()) {
    throw Error("cuda: time mark " + std::to_string(mark) + " does not exist (" + std::to_string(marks_.size()) +
                " marks since the last release)");
  }
  cudaEvent_t event = marks_[mark];
  check(cudaEventSynchronize(event), "elapsed_s (cudaEventSynchronize)");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, origin_, event), "elapsed_s (cudaEventElapsedTime)");
  return double(ms) / 1e3;
}

void CudaBackend::release_marks() {
  spare_events_.insert(spare_events_.end(), marks_.begin(), marks_.end());
  marks_.clear();
}

// ---- what code outside the module may ask ----

namespace {
CudaBackend& as_cuda(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) throw Error("backend " + std::string(backend.name()) + " is not a CUDA backend");
  return *cuda;
}
}  // namespace

cudaStream_t native_stream(Backend& backend, Stream stream) { return as_cuda(backend).native(stream); }
int device_of(Backend& backend) { return as_cuda(backend).device(); }

}  // namespace cuda

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error, just none
    return 0;
  }
  return count;
}

bool cuda_device_has_fp8(int device) {
  if (device < 0 || device >= cuda_device_count()) return false;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major * 10 + minor >= 89;  // Ada (8.9) and Hopper (9.0) onwards
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    throw Error("backend cuda: device " + std::to_string(device) + " does not exist (this process sees " +
                std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + ")");
  }
  return std::make_unique<cuda::CudaBackend>(device);
}

bool cuda_backend_built() { return true; }

}  // namespace tessel::kernels
