// A stand-in for Nsight's NVTX tool: loaded by NVTX3 through NVTX_INJECTION64_PATH, it records
// the ranges pushed in the "kiln" domain, so log_test can check names without a profiler.
#include <nvtx3/nvToolsExt.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex mu;
std::vector<std::string> ranges;  // every range pushed in the "kiln" domain, in order
std::vector<std::string> names;   // registered strings; a handle is the index + 1
int depth = 0;                    // pushes minus pops
const char* const kiln_domain = "kiln";

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  // Any non-null handle; only "kiln" ranges are recorded.
  static char other;
  return std::strcmp(name, kiln_domain) == 0
             ? reinterpret_cast<nvtxDomainHandle_t>(const_cast<char*>(kiln_domain))
             : reinterpret_cast<nvtxDomainHandle_t>(&other);
}

nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t, const char* s) {
  std::lock_guard lock(mu);
  names.push_back(s);
  return reinterpret_cast<nvtxStringHandle_t>(names.size());
}

int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard lock(mu);
  ++depth;
  if (reinterpret_cast<const char*>(d) != kiln_domain) return 0;
  if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
    ranges.push_back(a->message.ascii);
  else if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
    ranges.push_back("registered:" +
                     names.at(reinterpret_cast<std::size_t>(a->message.registered) - 1));
  else
    ranges.push_back("?");
  return depth;
}

int NVTX_API pop(nvtxDomainHandle_t) {
  std::lock_guard lock(mu);
  return --depth;
}

}  // namespace

extern "C" {

// NVTX3's entry point for a tool: fill the core2 (domain) callbacks Kiln uses.
int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *table[NVTX_CBID_CORE2_DomainRegisterStringA] =
      reinterpret_cast<NvtxFunctionPointer>(&register_string);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}

// For the test: the recorded ranges as one '\n'-separated string, and the open depth.
const char* fake_nvtx_ranges() {
  static std::string joined;
  std::lock_guard lock(mu);
  joined.clear();
  for (const auto& r : ranges) joined += r + '\n';
  return joined.c_str();
}
int fake_nvtx_depth() {
  std::lock_guard lock(mu);
  return depth;
}
void fake_nvtx_clear() {
  std::lock_guard lock(mu);
  ranges.clear();
}

}  // extern "C"
