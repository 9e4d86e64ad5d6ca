// cuDNN's own verdict on tessel's SDPA graphs for an H100 without a GPU (cuDNN 9.8+'s
// deviceless compilation, the toolkit's stub driver standing in for libcuda): heuristics
// find engines and NVRTC compiles them for the forward and backward graphs, while a graph
// cuDNN's engines do not take gets none. Its own program (the stub driver stays loaded);
// skipped with a real driver, or without cuDNN 9.8+ or the stub.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "cudnn_api.hpp"
#include "tessel/core/error.hpp"

using namespace tessel;
using namespace tessel::kernels::cuda;

namespace {

constexpr int kDevicePropertiesDescriptor = 38;  // CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR
constexpr int kJsonAttribute = 2702;             // CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION
constexpr int kCharType = 24;                    // CUDNN_TYPE_CHAR

// An H100 SXM as cuDNN's device-properties JSON names its fields.
constexpr const char* kH100 =
    R"({"maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],"regsPerBlock":65536,)"
    R"("multiProcessorCount":132,"warpSize":32,"maxSharedMemoryPerBlock":49152,)"
    R"("maxSharedMemoryPerBlockOptin":232448,"reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,)"
    R"("maxCtasPerSM":32,"maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":9008,"isTccDriver":0,)"
    R"("supportCoopLaunch":1,"totalGlobalMem":85029158912,"smClockRateKHz":1980000,"memClockRateKHz":2619000,)"
    R"("l2CacheSize":52428800,"cudaDeviceId":0,"deviceVer":900,"driverVer":13000,)"
    R"("deviceName":"NVIDIA H100 80GB HBM3"})";

const char* load_cudnn(cudnn::Api& api) {
  for (const char* path : {"libcudnn.so.9", TESSEL_CUDA_LIBRARY_DIR "/libcudnn.so.9",
                           TESSEL_CUDA_LIBRARY_DIR "/../lib/libcudnn.so.9"})
    if (cudnn::load_api(path, api).empty()) return path;
  return nullptr;
}

bool compiled_but_not_loaded(const std::string& message) {
  return message.find("cuLibraryLoadData") != std::string::npos ||
         message.find("EXECUTION_FAILED_CUDA_DRIVER") != std::string::npos;
}

TEST(CudnnDeviceless, H100PlansCompileForBothGraphs) {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr) GTEST_SKIP() << "a CUDA driver is present";
  cudnn::Api api;
  if (load_cudnn(api) == nullptr) GTEST_SKIP() << "no libcudnn.so.9 here";
  const std::size_t version = api.get_version();
  if (version < 90800) GTEST_SKIP() << "cuDNN " << cudnn::version_text(version) << " has no deviceless plans";
  // The stub driver and NVRTC, found by their sonames when cuDNN opens them.
  if (dlopen(TESSEL_CUDA_LIBRARY_DIR "/stubs/libcuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr ||
      dlopen(TESSEL_CUDA_LIBRARY_DIR "/libnvrtc.so", RTLD_NOW | RTLD_GLOBAL) == nullptr)
    GTEST_SKIP() << "no stub libcuda or libnvrtc in " << TESSEL_CUDA_LIBRARY_DIR;

  cudnn::Descriptors owned(api);
  cudnn::Descriptor h100 = nullptr;
  ASSERT_EQ(api.create_descriptor(kDevicePropertiesDescriptor, &h100), cudnn::kStatusSuccess);
  ASSERT_EQ(api.set_attribute(h100, kJsonAttribute, kCharType, std::int64_t(std::strlen(kH100)), kH100),
            cudnn::kStatusSuccess);
  ASSERT_EQ(api.finalize(h100), cudnn::kStatusSuccess);

  const cudnn::SdpaShape gpt2{96, 1024, 64, cudnn::DataType::bf16, 0.125f};
  for (const bool forward : {true, false}) {
    const cudnn::Graph graph = forward ? cudnn::forward_graph(gpt2, version) : cudnn::backward_graph(gpt2, version);
    try {
      cudnn::build_plan(api, nullptr, graph, version, h100);
      ADD_FAILURE() << "a plan loaded into the stub driver";
    } catch (const Error& error) {
      EXPECT_TRUE(compiled_but_not_loaded(error.what())) << (forward ? "forward: " : "backward: ") << error.what();
    }
  }
  cudnn::Graph float_probabilities = cudnn::forward_graph(gpt2, version);
  for (cudnn::Tensor& t : float_probabilities.tensors)
    if (t.name == "div::out") t.type = cudnn::DataType::f32;
  try {
    cudnn::build_plan(api, nullptr, float_probabilities, version, h100);
    ADD_FAILURE() << "a plan for fp32 probabilities";
  } catch (const Error& error) {
    EXPECT_FALSE(compiled_but_not_loaded(error.what())) << error.what();
  }
  api.destroy_descriptor(h100);
}

}  // namespace
